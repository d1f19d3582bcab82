package procs

import (
	"runtime"
	"testing"
)

func TestBorrowOutsideLeanChangesNothing(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	release := Borrow(before + 3)
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d while borrowing in a process that is not lean, want %d", got, before)
	}
	release()
	if Max() != before {
		t.Fatalf("Max %d, want GOMAXPROCS %d", Max(), before)
	}
}

func TestLeanBorrowsAndGivesBack(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // as a 4-CPU host would start
	restore := Lean()
	defer restore()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after Lean, want 1", got)
	}
	if Max() != 4 {
		t.Fatalf("Max %d after Lean, want the 4 it had", Max())
	}
	a := Borrow(2)
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("GOMAXPROCS %d while 2 are borrowed, want 2", got)
	}
	b := Borrow(16) // more than the process may use: capped at Max
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Fatalf("GOMAXPROCS %d with a second, larger borrow, want the cap 4", got)
	}
	a()
	a() // a second release of the same borrow counts once
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Fatalf("GOMAXPROCS %d after the first of two borrows ended, want 4 still", got)
	}
	b()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after every borrow ended, want 1", got)
	}
	Borrow(1)() // one goroutine needs no second P
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after Borrow(1), want 1", got)
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != 4 || Max() != 4 {
		t.Fatalf("GOMAXPROCS %d, Max %d after restore, want 4", got, Max())
	}
}
