package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Child creates a group nested in g, with its own limits under g's: a warm
// function's per-request group. Its processes join it themselves, through
// the descriptors JoinFiles returns (see there).
//
// Only v1 is supported: on v2, a group with processes of its own (a
// sandbox's PID 1) cannot give controllers to nested groups (the "no
// internal processes" rule), so requests there would need PID 1 in a leaf
// of its own first.
func (g *Group) Child(name string, lim Limits) (c *Group, err error) {
	if g.host.Version != V1 {
		return nil, fmt.Errorf("%w: per-request cgroups are implemented for cgroup v1 only", ErrUnavailable)
	}
	if _, ok := g.dirs["cpu"]; lim.CPUs > 0 && !ok {
		return nil, fmt.Errorf("%w: the parent group has no cpu controller", ErrUnavailable)
	}
	c = &Group{host: g.host, name: g.name + "/" + name, dirs: map[string]string{}, fd: -1}
	defer func() {
		if err != nil {
			c.Remove()
		}
	}()
	made := map[string]string{}
	for ctl, parent := range g.dirs {
		if dir, ok := made[parent]; ok {
			c.dirs[ctl] = dir
			continue
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		made[parent], c.dirs[ctl] = dir, dir
	}
	return c, c.setLimits(lim)
}

// JoinFiles opens, for writing, the files by which a single-threaded
// process joins the group: one per hierarchy, `tasks` on v1 and
// cgroup.procs on v2. A process that is handed them joins by writing "0"
// to each: the kernel checks the opener's permission at open (v2 also its
// cgroup namespace), and the writer may always move itself, so a process
// with no rights over cgroupfs can admit itself into a group tine made,
// and into no other. The caller closes the descriptors.
//
// Why `tasks` on v1: writing 0 there moves the writer's own thread, which
// the kernel does without its global cgroup_threadgroup_rwsem (commit
// 9a3284fad42f, "cgroup: Optimize single thread migration", 2021); a
// write to cgroup.procs
// takes it for writing, and since Linux 6.0 the first writer after a
// quiet spell waits for an RCU grace period (≈10 ms here, holding
// cgroup_mutex meanwhile). A process that has only one thread moves as a
// whole either way. Every joiner tine hands these to is one: a sandbox's
// PID 1 or exec reaper (a clone of one thread), a command before its
// execve, a forked Python request. v2 has no such file for a move across
// domains; there tine places processes with clone3(CLONE_INTO_CGROUP).
func (g *Group) JoinFiles() ([]int, error) {
	name := "cgroup.procs"
	if g.host.Version == V1 {
		name = "tasks"
	}
	var fds []int
	seen := map[string]bool{}
	for _, c := range Controllers {
		dir, ok := g.dirs[c]
		if !ok || seen[dir] {
			continue
		}
		seen[dir] = true
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, fmt.Errorf("open %s/%s: %w", dir, name, err)
		}
		fds = append(fds, fd)
	}
	if len(fds) == 0 {
		return nil, errors.New("cgroup has no directories")
	}
	return fds, nil
}
