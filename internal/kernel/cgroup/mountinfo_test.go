package cgroup

import (
	"testing"

	"github.com/tine-run/tine/internal/kernel/procstat"
)

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b\\c`); got != `/a b\\c` {
		t.Fatalf("got %q", got)
	}
}

func TestOwnerNames(t *testing.T) {
	if !ownerAlive(NewName()) {
		t.Fatal("this process's own group is not alive")
	}
	// pid 1 exists, but started at another time than this claims.
	if ownerAlive("1.1-1") && procstat.StartTime(1) != 1 {
		t.Fatal("a reused pid counts as the owner")
	}
	if ownerAlive("999999999.5-1") {
		t.Fatal("a dead pid counts as the owner")
	}
}
