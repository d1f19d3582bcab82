package cgroup

import "testing"

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b\\c`); got != `/a b\\c` {
		t.Fatalf("got %q", got)
	}
}
