package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Track creates a group nested in g that only tracks membership: one
// directory, in the pids hierarchy (v1) or the unified one (v2, with no
// controllers enabled, so g may keep processes of its own), with no limits
// of its own: what runs in it still counts against g's. An exec's command
// joins it before its execve (JoinFiles, or Attach), and everything the
// command starts is born inside, whatever process group or session it moves
// to, so KillAll finds it all.
func (g *Group) Track(name string) (*Group, error) {
	parent, ok := g.dirs["pids"]
	if !ok {
		return nil, fmt.Errorf("%w: the group has no pids directory to track processes in", ErrUnavailable)
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	t := &Group{host: g.host, name: g.name + "/" + name, dirs: map[string]string{"pids": dir}, fd: -1}
	if g.host.Version == V2 {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Rmdir(dir)
			return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
		}
		t.fd = fd
	}
	return t, nil
}

// killRounds bounds KillAll's rounds: each kills what the group holds;
// only a process that forked between a listing and its kill adds a round.
const killRounds = 200

// KillAll kills every process in the group and returns once none is left
// in it (v1 lists and kills until the list is empty; v2 has cgroup.kill).
func (g *Group) KillAll() error {
	dir := g.dirs["pids"]
	if g.host.Version == V2 {
		writeOptional(dir, "cgroup.kill", "1")
	}
	for range killRounds {
		procs := strings.Fields(readSmall(filepath.Join(dir, "cgroup.procs")))
		if len(procs) == 0 {
			return nil
		}
		killProcs(dir)
		time.Sleep(200 * time.Microsecond)
	}
	return fmt.Errorf("cgroup %s: processes still in it after %d rounds of SIGKILL", dir, killRounds)
}

// Release ends tracking without killing: the processes still in the group
// (what a command left running in the background) move up into its parent,
// and the group is removed.
func (g *Group) Release() error {
	dir := g.dirs["pids"]
	parent := filepath.Dir(dir)
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	for range killRounds {
		for _, p := range strings.Fields(readSmall(filepath.Join(dir, "cgroup.procs"))) {
			// ESRCH: it exited meanwhile.
			if err := writeFile(parent, "cgroup.procs", p); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("release cgroup %s: %w", dir, err)
			}
		}
		// EBUSY: a process forked meanwhile, or one that exited is not
		// reaped yet.
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: still busy", dir)
}
