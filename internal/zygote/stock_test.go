package zygote

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
)

// The stock makes ahead only what it is sized to make ahead, and keeps
// more than that when they are given back: a request-group pool grows to
// what the load needs instead of removing a group each time one comes
// back to a pool its fill topped up.
func TestStockMakesAheadAndKeepsWhatComesBack(t *testing.T) {
	var made, discarded atomic.Int32
	// Two to make, no more: taking one while the fill runs has it make
	// another (it tops up to 2), which this test does not count on.
	s := newStock(2, 4, func() (int, error) {
		if n := made.Add(1); n <= 2 {
			return int(n), nil
		}
		return 0, errors.New("no more")
	}, func(int) { discarded.Add(1) })
	var got []int
	for len(got) < 2 { // the background fill's two
		if v, ok := s.tryTake(); ok {
			got = append(got, v)
		} else {
			runtime.Gosched()
		}
	}
	for _, v := range append(got, 100, 101) {
		if !s.put(v) {
			t.Fatal("put on an open stock reported it closed")
		}
	}
	if d := discarded.Load(); d != 0 {
		t.Fatalf("%d of 4 given back were discarded; the stock keeps up to 4", d)
	}
	if n := len(s.ready); n != 4 {
		t.Fatalf("%d ready after 4 given back, want 4", n)
	}
	s.put(102)
	if d := discarded.Load(); d != 1 {
		t.Fatalf("a fifth given back: %d discarded, want 1", d)
	}
	s.close()
	if d := discarded.Load(); d != 5 {
		t.Errorf("close discarded %d of the 4 ready", d-1)
	}
}
