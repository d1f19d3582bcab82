package osthread

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// fn never runs on the main thread, even when Throwaway is called from a
// goroutine that holds it, and the namespace fn enters stays out of the
// process's view.
func TestThrowawayLeavesProcessNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to unshare a mount namespace: euid %d", os.Geteuid())
	}
	before, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		var tid int
		var entered string
		Throwaway(func() {
			tid = unix.Gettid()
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				t.Errorf("unshare: %v", err)
				return
			}
			entered, _ = os.Readlink("/proc/thread-self/ns/mnt")
		})
		if tid == unix.Getpid() {
			t.Fatal("fn ran on the main thread")
		}
		if entered == before {
			t.Fatal("fn's thread did not enter a new mount namespace: the check proves nothing")
		}
		if now, _ := os.Readlink("/proc/self/ns/mnt"); now != before {
			t.Fatalf("the process's mount namespace changed: %s -> %s", before, now)
		}
	}
}

// fromMainThread is the thread fn ran on when Throwaway was called by the
// main goroutine locked to the main thread (init locks it; package init
// runs on the main thread).
var fromMainThread, mainTID int

func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	mainTID = unix.Gettid()
	Throwaway(func() { fromMainThread = unix.Gettid() })
	runtime.UnlockOSThread()
	os.Exit(m.Run())
}

func TestThrowawayFromMainThread(t *testing.T) {
	if mainTID != unix.Getpid() {
		t.Fatalf("TestMain ran on thread %d, not the main thread %d: the check proves nothing", mainTID, unix.Getpid())
	}
	if fromMainThread == 0 || fromMainThread == mainTID {
		t.Fatalf("fn ran on thread %d; the main thread is %d", fromMainThread, mainTID)
	}
}
