package sandbox

import (
	"path/filepath"
	"slices"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"golang.org/x/sys/unix"
)

// cgroupFSMount is one mount of the sandbox's read-only /sys/fs/cgroup
// (Spec.CgroupFS).
type cgroupFSMount struct {
	fstype, target, data string
	mkdir                bool
}

// cgroupFSControllers are the v1 controllers a sandbox's group has
// (cgroup.Host.Create's): only their hierarchies are shown, since in the
// others the sandbox sits in its creator's cgroup.
var cgroupFSControllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// cgroupFSMounts are the mounts that show a sandbox its own cgroup at
// /sys/fs/cgroup, as runc's cgroup mount does: they are made inside its
// cgroup namespace, whose root is the sandbox's group. v2: the unified
// hierarchy. v1: a tmpfs holding one mount per hierarchy of the group's
// controllers, named like the host's (cpu,cpuacct).
func cgroupFSMounts(h *cgroup.Host) []cgroupFSMount {
	const dir = "/sys/fs/cgroup"
	if h.Version == cgroup.V2 {
		return []cgroupFSMount{{fstype: "cgroup2", target: dir}}
	}
	out := []cgroupFSMount{{fstype: "tmpfs", target: dir, data: "mode=0755,size=64k"}}
	var seen []string
	for _, c := range cgroupFSControllers {
		m := h.V1Mounts[c]
		if m == "" || slices.Contains(seen, m) {
			continue
		}
		seen = append(seen, m)
		name := filepath.Base(m) // the hierarchy's controllers, as systemd names it
		out = append(out, cgroupFSMount{fstype: "cgroup", target: dir + "/" + name, data: name, mkdir: true})
	}
	return out
}

// addCgroupFS mounts them, read-only, once the child is in its cgroup
// namespace and its new root.
func (pg *program) addCgroupFS(mounts []cgroupFSMount) {
	const ro = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for i, m := range mounts {
		if m.mkdir {
			pg.addSetup("make "+m.target, sys(unix.SYS_MKDIRAT, atFdcwd, pg.cstr(m.target), 0o755))
		}
		flags := uintptr(ro)
		if i == 0 && len(mounts) > 1 {
			flags &^= unix.MS_RDONLY // the tmpfs is filled first, then made read-only
		}
		pg.addSetup("mount "+m.target, sys(unix.SYS_MOUNT, pg.cstr(m.fstype), pg.cstr(m.target), pg.cstr(m.fstype), flags, pg.cstr(m.data)))
	}
	if len(mounts) > 1 {
		pg.addSetup("make /sys/fs/cgroup read-only", sys(unix.SYS_MOUNT, 0, pg.cstr(mounts[0].target), 0, unix.MS_REMOUNT|ro, 0))
	}
}
