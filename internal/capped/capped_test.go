package capped

import "testing"

func TestBufferKeepsTheFirstBytes(t *testing.T) {
	b := New(5)
	for _, s := range []string{"ab", "cd", "efg", "h"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v: want all of it taken", s, n, err)
		}
	}
	if b.String() != "abcde" || !b.Dropped() {
		t.Fatalf("kept %q, dropped %v; want \"abcde\", true", b.String(), b.Dropped())
	}
	small := New(5)
	small.Write([]byte("abcde"))
	if small.Dropped() {
		t.Fatal("a write that fits exactly counts as dropped")
	}
}
