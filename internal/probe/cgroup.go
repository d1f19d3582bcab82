package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// Cgroup returns the cgroup driver's view of this host (which version tine
// drives, which controllers it can enforce), detected once per process.
func Cgroup() (*cgroup.Host, error) { return detectCgroup() }

var detectCgroup = sync.OnceValues(cgroup.Detect)

const cgroupFix = "mount cgroup2 on /sys/fs/cgroup with the memory and pids controllers " +
	"(systemd: boot with systemd.unified_cgroup_hierarchy=1), or mount the v1 memory and pids hierarchies"

// checkCgroup takes the driver's detection and, as root, tries to create
// and remove a group in each hierarchy tine would use: a read-only
// cgroupfs (common inside containers) looks enforceable but is not.
func checkCgroup() Check {
	h, err := Cgroup()
	if err != nil {
		return Check{Detail: "detect cgroups: " + err.Error(), Fix: cgroupFix}
	}
	if h.Version == cgroup.None {
		return Check{Detail: h.Why, Fix: cgroupFix}
	}
	detail := fmt.Sprintf("%s, enforceable: %s (%s)", h.Version, strings.Join(h.Enforceable, " "), h.Why)
	if os.Geteuid() != 0 {
		return Check{OK: true, Detail: detail + "; creating a group not tried: needs root"}
	}
	for _, mount := range cgroupMounts(h) {
		if err := tryCgroupDir(mount); err != nil {
			return Check{Detail: detail + "; but " + err.Error(), Fix: "make " + mount + " writable for root (inside a container: --cgroupns=private and a writable cgroupfs)"}
		}
	}
	return Check{OK: true, Detail: detail}
}

// cgroupMounts lists the hierarchy roots tine creates sandbox groups under.
func cgroupMounts(h *cgroup.Host) []string {
	if h.Version == cgroup.V2 {
		return []string{h.V2Mount}
	}
	var mounts []string
	for _, c := range h.Enforceable {
		mounts = append(mounts, h.V1Mounts[c])
	}
	return mounts
}

// tryCgroupDir creates an empty group at the root of a hierarchy and
// removes it at once.
func tryCgroupDir(mount string) error {
	dir := filepath.Join(mount, fmt.Sprintf("tine-probe-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create a group: %w", err)
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("cannot remove group %s: %w", dir, err)
	}
	return nil
}
