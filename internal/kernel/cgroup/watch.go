package cgroup

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Watch is a group's counter files kept open and read again with pread: a
// warm function's request group is read on every request, and opening a
// cgroupfs file (a path walk through kernfs) costs more than reading it.
type Watch struct {
	mu        sync.RWMutex // Close against reads: a closed number may be reused
	v2        bool
	pids      int // pids.current
	procs     int // the pids hierarchy's cgroup.procs (v1), cgroup.kill (v2)
	oom       int // memory.oom_control (v1), memory.events (v2)
	throttled int // cpu.stat, or -1 without a cpu controller
}

// Watch opens g's counter files. throttling says whether Throttled will be
// asked (a group without a CPU quota is never throttled).
func (g *Group) Watch(throttling bool) (w *Watch, err error) {
	w = &Watch{v2: g.host.Version == V2, pids: -1, procs: -1, oom: -1, throttled: -1}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	open := func(dir, file string, flags int) (int, error) {
		return unix.Open(filepath.Join(dir, file), flags|unix.O_CLOEXEC, 0)
	}
	if w.pids, err = open(g.dirs["pids"], "pids.current", unix.O_RDONLY); err != nil {
		return w, err
	}
	if w.v2 {
		if w.procs, err = open(g.dirs["memory"], "cgroup.kill", unix.O_WRONLY); err != nil {
			return w, err
		}
		if w.oom, err = open(g.dirs["memory"], "memory.events", unix.O_RDONLY); err != nil {
			return w, err
		}
	} else {
		if w.procs, err = open(g.dirs["pids"], "cgroup.procs", unix.O_RDONLY); err != nil {
			return w, err
		}
		if w.oom, err = open(g.dirs["memory"], "memory.oom_control", unix.O_RDONLY); err != nil {
			return w, err
		}
	}
	if dir, ok := g.dirs["cpu"]; ok && throttling {
		if w.throttled, err = open(dir, "cpu.stat", unix.O_RDONLY); err != nil {
			return w, err
		}
	}
	return w, nil
}

// Close closes the files; later reads find nothing.
func (w *Watch) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fd := range []*int{&w.pids, &w.procs, &w.oom, &w.throttled} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// Pids is the number of processes in the group now.
func (w *Watch) Pids() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	v, _ := strconv.ParseInt(strings.TrimSpace(pread(w.pids)), 10, 64)
	return v
}

// KillMembers is Group.KillMembers through the open files.
func (w *Watch) KillMembers() {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.v2 {
		if w.procs >= 0 {
			unix.Write(w.procs, []byte("1"))
		}
		return
	}
	for _, f := range strings.Fields(pread(w.procs)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// OOMKills is Group.OOMKills through the open files.
func (w *Watch) OOMKills() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return keyed(pread(w.oom), "oom_kill")
}

// Throttled is Group.Throttled through the open files (0 when the Watch
// was made without throttling).
func (w *Watch) Throttled() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.throttled < 0 {
		return 0
	}
	return keyed(pread(w.throttled), "nr_throttled")
}

// pread reads a small cgroupfs file from its start: kernfs makes its text
// again for a read at offset 0.
func pread(fd int) string {
	if fd < 0 {
		return ""
	}
	var buf [4096]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n < 0 {
		return ""
	}
	return string(buf[:n])
}

// keyed finds "key value" in text such as memory.events.
func keyed(text, key string) int64 {
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
