package server

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestRaiseOpenFiles lowers this process's soft limit, then lets
// raiseOpenFiles lift it for a budget that fits under the hard limit; and
// asks for a budget past fs.nr_open, which it cannot meet: it says so
// (have < want) and leaves the most it could in force.
func TestRaiseOpenFiles(t *testing.T) {
	var orig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &orig) })
	want := uint64(openFilesBase + openFilesPerSandbox*10)
	if orig.Max < want {
		t.Skipf("hard open files limit %d is below the %d this test raises the soft one to", orig.Max, want)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 64, Max: orig.Max}); err != nil {
		t.Fatal(err)
	}
	have, w := raiseOpenFiles(10)
	var now unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &now)
	if w != want || have != want || now.Cur != want {
		t.Errorf("raiseOpenFiles(10) = %d, %d with the soft limit at %d; want %d, %d, %d", have, w, now.Cur, want, want, want)
	}

	nrOpen := readNrOpen()
	if nrOpen == 0 {
		t.Skip("fs.nr_open unreadable")
	}
	huge := int(nrOpen) // 8 descriptors each: past nr_open whatever the privileges
	have, w = raiseOpenFiles(huge)
	unix.Getrlimit(unix.RLIMIT_NOFILE, &now)
	if have >= w || now.Cur != have || have < orig.Max {
		t.Errorf("raiseOpenFiles(%d) = %d, %d with the soft limit at %d; want less than asked, in force, and at least the hard limit %d",
			huge, have, w, now.Cur, orig.Max)
	}
}
