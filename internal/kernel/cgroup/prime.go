package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PrimeMove gets the kernel's cgroup lock ready for a move this process is
// about to make on a v1 host, in the background: since Linux 6.0 the first
// move after a quiet spell waits for an RCU grace period (≈10 ms here),
// and a move of this process into the v1 group it is already in takes the
// lock the same way while nothing moves. Begun early, that wait overlaps
// the work before the real move, which then finds the lock ready (or the
// wait part done). It does nothing on v2, where tine clones into the
// group and moves nothing, and when the group's file cannot be written.
func (h *Host) PrimeMove() {
	if h.Version != V1 {
		return
	}
	mount := h.V1Mounts["pids"]
	self, err := os.ReadFile("/proc/self/cgroup")
	if mount == "" || err != nil {
		return
	}
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "pids" {
			procs := filepath.Join(mount, parts[2], "cgroup.procs")
			go func() { os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0) }()
			return
		}
	}
}
