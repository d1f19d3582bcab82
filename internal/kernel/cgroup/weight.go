package cgroup

import (
	"fmt"
	"strconv"
)

// SetCPUShares sets the group's CPU weight from cgroup v1 shares (2 to
// 262144, the default 1024), converted on v2 to cpu.weight (1 to 10000)
// the way runc and the kubelet convert it.
func (g *Group) SetCPUShares(shares uint64) error {
	dir, ok := g.dirs["cpu"]
	if !ok {
		return fmt.Errorf("%w: this group has no cpu controller", ErrUnavailable)
	}
	if shares < 2 || shares > 262144 {
		return fmt.Errorf("cpu shares %d: want 2 to 262144", shares)
	}
	if g.host.Version == V2 {
		return writeFile(dir, "cpu.weight", strconv.FormatUint(1+((shares-2)*9999)/262142, 10))
	}
	return writeFile(dir, "cpu.shares", strconv.FormatUint(shares, 10))
}
