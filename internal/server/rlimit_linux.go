package server

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Descriptors the daemon holds: per live sandbox its PID 1's pidfd,
// status pipe and launch socket, with room for the execs, streams and
// connections in flight on it; and a base for the listeners, the log and
// the function zygotes.
const (
	openFilesPerSandbox = 8
	openFilesBase       = 1024
)

// raiseOpenFiles lifts RLIMIT_NOFILE so that maxSandboxes sandboxes cannot
// run the daemon out of descriptors (a create would fail with EMFILE far
// inside the budget: 315 sandboxes under a hard limit of 1024). Go has
// already raised the soft limit to the hard one; past that, raising the
// hard limit needs CAP_SYS_RESOURCE and stops at fs.nr_open. It returns
// the soft limit in force and how many it wanted, for the caller to warn
// when the first is short of the second.
func raiseOpenFiles(maxSandboxes int) (have, want uint64) {
	want = openFilesBase + openFilesPerSandbox*uint64(maxSandboxes)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, want
	}
	if lim.Cur >= want {
		return lim.Cur, want
	}
	target := unix.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if nrOpen := readNrOpen(); nrOpen > 0 && target.Max > nrOpen {
		target.Max = max(lim.Max, nrOpen)
		target.Cur = min(want, target.Max)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &target); err != nil {
		// Without the privilege the hard limit is as far as it goes.
		target = unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &target) != nil {
			return lim.Cur, want
		}
	}
	return target.Cur, want
}

// readNrOpen is fs.nr_open, the most any process may raise RLIMIT_NOFILE
// to (0 when unreadable).
func readNrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}
