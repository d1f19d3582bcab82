// Package procs runs a process on one P (GOMAXPROCS=1) while lending its
// parallel work the CPUs it would have had. A desktop's guest answers
// small requests (an OSWorld /execute, an ACI click) by handing them
// between goroutines: request, X connection, reply. With a second P idle,
// every hand-off wakes another thread that spins, finds nothing and
// sleeps again, and in this VM each such wake-up is a context switch
// that costs more than the work (ADR 0020's fifth-session amendment
// measured twice the context switches and 1.5x the CPU per /execute).
// A screenshot's bands (PNG, JPEG) and the scaler's are the guest's only
// parallel computation: Borrow raises GOMAXPROCS while they run.
package procs

import (
	"runtime"
	"sync"
)

var (
	mu      sync.Mutex
	lean    bool
	wide    int // GOMAXPROCS before Lean: the CPUs the process may use
	current int // GOMAXPROCS now, while lean
	users   int // Borrow calls not yet released
)

// Lean sets GOMAXPROCS to 1; Borrow raises it while parallel work runs.
// Call it at the start of a process that wants it; restore gives the
// process its GOMAXPROCS back (for tests: borrows must have ended).
func Lean() (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	if lean {
		return func() {}
	}
	wide = runtime.GOMAXPROCS(1)
	lean, current = true, 1
	return func() {
		mu.Lock()
		defer mu.Unlock()
		runtime.GOMAXPROCS(wide)
		lean, users = false, 0
	}
}

// Max is how many goroutines may usefully compute in parallel: GOMAXPROCS,
// or what it was before Lean.
func Max() int {
	mu.Lock()
	defer mu.Unlock()
	if lean {
		return wide
	}
	return runtime.GOMAXPROCS(0)
}

// Borrow lets n goroutines (at most Max) compute in parallel until
// release is called: in a lean process it raises GOMAXPROCS, and the last
// release of overlapping borrows puts it back to 1. Elsewhere, or for
// n <= 1, it does nothing. A change of GOMAXPROCS stops the world for
// some 10 µs here: borrow for work of milliseconds, not for each item.
func Borrow(n int) (release func()) {
	mu.Lock()
	defer mu.Unlock()
	if !lean || n <= 1 {
		return func() {}
	}
	users++
	if n = min(n, wide); n > current {
		runtime.GOMAXPROCS(n)
		current = n
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 && current != 1 {
				runtime.GOMAXPROCS(1)
				current = 1
			}
		})
	}
}
