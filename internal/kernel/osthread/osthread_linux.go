// Package osthread runs code on OS threads that Go throws away afterwards,
// so the code may move its thread into namespaces of its own (unshare)
// without any other goroutine ever running there.
package osthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Throwaway runs fn on an OS thread that Go ends once fn returns, and
// waits for it. The thread is never the process's main thread: Go does not
// end that one (a goroutine that exits locked to it wedges it instead), and
// /proc/self describes the process by its main thread, so a namespace the
// main thread entered would become the process's own view (mountinfo,
// ns/net). While a goroutine holds the main thread locked no other
// goroutine can be scheduled onto it, so a second try lands elsewhere.
func Throwaway(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			Throwaway(fn)
			runtime.UnlockOSThread()
			return
		}
		// No UnlockOSThread: Go ends a thread whose goroutine exits locked.
		fn()
	}()
	<-done
}
