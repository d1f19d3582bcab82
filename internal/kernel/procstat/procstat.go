// Package procstat reads a process's /proc/PID/stat: its state, parent and
// start time, which the packages that tell a live process from a later one
// with the same pid (cgroup owners, OCI state, snapshot holders) share.
package procstat

import (
	"strconv"
	"strings"

	"github.com/tine-run/tine/internal/kernel/rawfile"
)

// Fields returns the fields of /proc/PID/stat after the command name,
// which may hold spaces and parentheses: [0] is the state, [1] the
// parent's pid, [19] the start time. nil once the process is gone.
func Fields(pid int) []string {
	b, err := rawfile.ReadFileHint("/proc/"+strconv.Itoa(pid)+"/stat", 1<<10)
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// State is the process's state letter (R, S, D, T, Z, X, ...), "" once it
// is gone.
func State(pid int) string {
	if f := Fields(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}

// StartTime is the process's start time in clock ticks since boot (field
// 22), 0 once it is gone. With the pid it names one process for good.
func StartTime(pid int) uint64 {
	f := Fields(pid)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
