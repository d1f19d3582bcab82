package cgroup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the per-sandbox resource limits; zero means "no limit".
type Limits struct {
	MemoryBytes int64
	// CPUs is a CPU quota in cores (1.5 = one and a half cores).
	CPUs float64
	Pids int64
}

// cpuPeriodUs is the CFS period used for --cpus quotas.
const cpuPeriodUs = 100000

// MaxCPUs is the largest CPU quota a spec may ask for, in cores: more
// than any host has, and far from where the quota in microseconds
// (CPUs * cpuPeriodUs) overflows an int64.
const MaxCPUs = 4096

// Group is one sandbox's cgroup: a directory per v1 controller, or one
// directory in the unified hierarchy.
type Group struct {
	host *Host
	name string
	// dirs maps a controller to its directory (v1); for v2 every
	// controller maps to the same directory.
	dirs map[string]string
	// fd is an O_PATH|O_DIRECTORY descriptor of the v2 directory, for
	// clone3(CLONE_INTO_CGROUP); -1 on v1.
	fd int
}

// Name returns the group's name under the tine parent.
func (g *Group) Name() string { return g.name }

// Dirs returns the group's directories, one per controller.
func (g *Group) Dirs() map[string]string { return g.dirs }

// FD returns a descriptor for clone3(CLONE_INTO_CGROUP), or -1 when the
// process must be attached after it is born (v1).
func (g *Group) FD() int { return g.fd }

// Create makes the cgroup <parent>/tine/<name> with limits lim. Controllers
// are created only where needed: memory and pids always (accounting, OOM
// detection, fork-bomb limits), cpu with a CPU quota. A long-lived group
// (a live sandbox) also gets cpu, so a quota can be set later, and on v1
// cpuacct for its CPU time (a one-shot sandbox gets that from its PID 1's
// rusage instead). On failure nothing is left behind.
func (h *Host) Create(name string, lim Limits, longLived bool) (g *Group, err error) {
	return h.create(name, "/"+Parent+"/"+name, lim, longLived)
}

// CreateAt is Create for a group at path, below each hierarchy's root (an
// OCI container's cgroupsPath, such as /default/c1), parents made as
// needed. The reaper never touches it: its owner removes it (OpenAt).
func (h *Host) CreateAt(path string, lim Limits, longLived bool) (*Group, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" || strings.HasPrefix(path+"/", "/"+Parent+"/") {
		return nil, fmt.Errorf("cgroup path %q: want a clean absolute path outside /%s", path, Parent)
	}
	return h.create(path, path, lim, longLived)
}

func (h *Host) create(name, path string, lim Limits, longLived bool) (g *Group, err error) {
	if h.Version == None {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, h.Why)
	}
	if lim.CPUs > 0 && !h.Has("cpu") {
		return nil, fmt.Errorf("%w: the cpu controller is not available (%s)", ErrUnavailable, h.Why)
	}
	g = &Group{host: h, name: name, dirs: map[string]string{}, fd: -1}
	defer func() {
		if err != nil {
			g.Remove()
		}
	}()
	want := []string{"memory", "pids"}
	if lim.CPUs > 0 || (longLived && h.Has("cpu")) {
		want = append(want, "cpu")
	}
	if longLived && h.Version == V1 && h.V1Mounts["cpuacct"] != "" {
		want = append(want, "cpuacct")
	}
	// v1 freezes through its own controller (v2 through cgroup.freeze in
	// every group): a live sandbox can be snapshotted.
	if longLived && h.Version == V1 && h.V1Mounts["freezer"] != "" {
		want = append(want, "freezer")
	}
	switch h.Version {
	case V2:
		if err := h.ensureV2Parents(path); err != nil {
			return nil, err
		}
		dir := filepath.Join(h.V2Mount, path)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, c := range want {
			g.dirs[c] = dir
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
		}
		g.fd = fd
	case V1:
		for _, c := range want {
			if dir, shared := g.sharedDir(h.V1Mounts[c]); shared {
				g.dirs[c] = dir // co-mounted controllers (cpu,cpuacct) share a directory
				continue
			}
			parent := filepath.Join(h.V1Mounts[c], filepath.Dir(path))
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
			}
			dir := filepath.Join(h.V1Mounts[c], path)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			g.dirs[c] = dir
		}
	}
	return g, g.setLimits(lim)
}

// sharedDir returns the directory already created in the hierarchy mounted
// at mount, if any.
func (g *Group) sharedDir(mount string) (string, bool) {
	for c, dir := range g.dirs {
		if g.host.V1Mounts[c] == mount {
			return dir, true
		}
	}
	return "", false
}

// ensureV2Parents creates the parents of the group at path in the unified
// hierarchy and hands each the controllers sandboxes need.
func (h *Host) ensureV2Parents(path string) error {
	var enable []string
	for _, c := range h.Enforceable {
		enable = append(enable, "+"+c)
	}
	dir := h.V2Mount
	for _, part := range strings.Split(strings.Trim(filepath.Dir(path), "/"), "/") {
		if err := writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " ")); err != nil {
			return fmt.Errorf("enable controllers %v in %s: %w", enable, dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
	}
	if err := writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " ")); err != nil {
		return fmt.Errorf("enable controllers %v in %s: %w", enable, dir, err)
	}
	return nil
}

// SetLimits changes the group's limits (a pooled sandbox gets its
// request's limits when it is claimed). A limit can only be set on a
// controller the group was created with: memory and pids always, cpu only
// if it was created with a CPU quota.
func (g *Group) SetLimits(lim Limits) error {
	if _, ok := g.dirs["cpu"]; lim.CPUs > 0 && !ok {
		return fmt.Errorf("%w: this group has no cpu controller", ErrUnavailable)
	}
	return g.setLimits(lim)
}

func (g *Group) setLimits(lim Limits) error {
	v2 := g.host.Version == V2
	if lim.MemoryBytes > 0 {
		dir := g.dirs["memory"]
		mem := strconv.FormatInt(lim.MemoryBytes, 10)
		if v2 {
			if err := writeFile(dir, "memory.max", mem); err != nil {
				return err
			}
			// No swap: a memory limit that can spill into swap is not a limit.
			writeOptional(dir, "memory.swap.max", "0")
			// An OOM kills the whole sandbox, not a random member of it.
			writeOptional(dir, "memory.oom.group", "1")
		} else {
			if err := writeFile(dir, "memory.limit_in_bytes", mem); err != nil {
				return err
			}
			writeOptional(dir, "memory.memsw.limit_in_bytes", mem)
			writeOptional(dir, "memory.swappiness", "0")
		}
	}
	if lim.Pids > 0 {
		if err := writeFile(g.dirs["pids"], "pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		quota := int64(lim.CPUs * cpuPeriodUs)
		if quota < 1000 {
			quota = 1000
		}
		dir := g.dirs["cpu"]
		if v2 {
			if err := writeFile(dir, "cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriodUs)); err != nil {
				return err
			}
		} else {
			if err := writeFile(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriodUs)); err != nil {
				return err
			}
			if err := writeFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Attach moves process pid into the group. On v2 with FD() >= 0 the process
// is better born inside it (clone3 CLONE_INTO_CGROUP) and Attach is not needed.
func (g *Group) Attach(pid int) error {
	p := strconv.Itoa(pid)
	seen := map[string]bool{}
	for _, c := range Controllers {
		dir, ok := g.dirs[c]
		if !ok || seen[dir] {
			continue
		}
		seen[dir] = true
		if err := writeFile(dir, "cgroup.procs", p); err != nil {
			return fmt.Errorf("place process %d in cgroup: %w", pid, err)
		}
	}
	return nil
}

// Stats is what a sandbox's cgroup tells after (or during) a run.
type Stats struct {
	// MemoryBytes is the memory in use now.
	MemoryBytes int64
	// PeakMemoryBytes is the highest memory use seen (0 if unknown).
	PeakMemoryBytes int64
	// CPUTimeNs is the CPU time used by the group (0 if not accounted).
	CPUTimeNs int64
	// OOMKills counts processes the kernel killed for exceeding the limit.
	OOMKills int64
	// Pids is the number of processes in the group now.
	Pids int64
	// Throttled counts the CPU periods in which the group used up its
	// quota and waited (0 without a cpu controller).
	Throttled int64
}

// Stats reads peak memory, OOM kills and the current process count.
func (g *Group) Stats() Stats {
	var s Stats
	mem := g.dirs["memory"]
	if g.host.Version == V2 {
		s.MemoryBytes = readInt(mem, "memory.current")
	} else {
		s.MemoryBytes = readInt(mem, "memory.usage_in_bytes")
	}
	s.PeakMemoryBytes = g.PeakMemory()
	s.OOMKills = g.OOMKills()
	s.CPUTimeNs = g.CPUTime()
	s.Pids = g.Pids()
	s.Throttled = g.Throttled()
	return s
}

// ResetPeak starts the peak-memory figure over (v1; v2 kernels before
// 6.12 cannot, and keep the group's lifetime peak).
func (g *Group) ResetPeak() {
	if g.host.Version == V1 {
		writeOptional(g.dirs["memory"], "memory.max_usage_in_bytes", "0")
	} else {
		writeOptional(g.dirs["memory"], "memory.peak", "reset")
	}
}

// PeakMemory is Stats().PeakMemoryBytes alone: one file read. A run's
// outcome reads what it reports, not the six files of Stats, on the path
// between the command's exit and tine's.
func (g *Group) PeakMemory() int64 {
	if g.host.Version == V2 {
		return readInt(g.dirs["memory"], "memory.peak")
	}
	return readInt(g.dirs["memory"], "memory.max_usage_in_bytes")
}

// CPUTime is Stats().CPUTimeNs alone: one file read.
func (g *Group) CPUTime() int64 {
	if g.host.Version == V2 {
		return readKeyed(g.dirs["memory"], "cpu.stat", "usage_usec") * 1000
	}
	if dir, ok := g.dirs["cpuacct"]; ok {
		return readInt(dir, "cpuacct.usage")
	}
	return 0
}

// Pids is Stats().Pids alone: one file read.
func (g *Group) Pids() int64 { return readInt(g.dirs["pids"], "pids.current") }

// OOMKills is Stats().OOMKills alone: one file read.
func (g *Group) OOMKills() int64 {
	if g.host.Version == V2 {
		return readKeyed(g.dirs["memory"], "memory.events", "oom_kill")
	}
	return readKeyed(g.dirs["memory"], "memory.oom_control", "oom_kill")
}

// KillMembers is Kill for a group whose processes are in every hierarchy
// it spans (they joined all at once, as requests do): one listing, not one
// per hierarchy.
func (g *Group) KillMembers() {
	if g.host.Version == V2 && writeFile(g.dirs["memory"], "cgroup.kill", "1") == nil {
		return
	}
	killProcs(g.dirs["pids"])
}

// Throttled is Stats().Throttled alone: one file read.
func (g *Group) Throttled() int64 {
	if dir, ok := g.dirs["cpu"]; ok {
		return readKeyed(dir, "cpu.stat", "nr_throttled")
	}
	return 0
}

// Kill sends SIGKILL to every process in the group. Sandboxes die with
// their pid namespace's init; this is the belt to that pair of braces.
func (g *Group) Kill() {
	if g.host.Version == V2 {
		if writeFile(g.dirs["memory"], "cgroup.kill", "1") == nil {
			return
		}
	}
	for _, c := range Controllers {
		if dir, ok := g.dirs[c]; ok {
			killProcs(dir)
		}
	}
	// A frozen v1 task does not die of SIGKILL until it is thawed.
	if dir, ok := g.dirs["freezer"]; ok {
		thaw(dir)
	}
}

// Remove deletes the group's directories. A cgroup can only be removed once
// its last process has been reaped, which can trail the init's exit by a
// moment, so EBUSY is retried briefly.
func (g *Group) Remove() error {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	var errs []error
	for _, dir := range g.RemovalOrder() {
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemovalOrder returns the group's directories, each once, memory's last:
// Reap finds a group by its memory directory (made first), so a removal
// cut short leaves a group it still finds.
func (g *Group) RemovalOrder() []string {
	var dirs []string
	for _, c := range slices.Sorted(maps.Keys(g.dirs)) {
		if dir := g.dirs[c]; c != "memory" && dir != g.dirs["memory"] && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	if dir, ok := g.dirs["memory"]; ok && !slices.Contains(dirs, dir) {
		dirs = append(dirs, dir)
	}
	return dirs
}

// removeTree removes dir after the groups nested in it (per-request groups
// of a warm function, see Child), killing what is left in each.
func removeTree(dir string) error {
	// Most groups have none: one rmdir, not a listing of the dozens of
	// control files (EBUSY: nested groups, or a process still there).
	if err := unix.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			sub := filepath.Join(dir, e.Name())
			killProcs(sub)
			if err := removeTree(sub); err != nil {
				return err
			}
		}
	}
	return rmdirRetry(dir)
}

func rmdirRetry(dir string) error {
	delay := 100 * time.Microsecond
	for i := 0; ; i++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || i == 40 {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		if i == 20 {
			killProcs(dir)
		}
		time.Sleep(delay)
		if delay < 20*time.Millisecond {
			delay *= 2
		}
	}
}

func killProcs(dir string) {
	for _, f := range strings.Fields(readSmall(filepath.Join(dir, "cgroup.procs"))) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

func writeFile(dir, file, value string) error {
	p := filepath.Join(dir, file)
	if err := writeSmall(p, value); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}

// writeOptional writes a file that only some kernels or configurations have.
func writeOptional(dir, file, value string) {
	_ = writeSmall(filepath.Join(dir, file), value)
}

// writeSmall writes value to a cgroupfs file with plain syscalls (three,
// where os.WriteFile's poller registration makes seven): a sandbox's
// limits are written on its start path. cgroupfs takes a value in one
// write.
func writeSmall(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Write(fd, []byte(value))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		if n != len(value) {
			return &os.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
		}
		return nil
	}
}

func readInt(dir, file string) int64 {
	if dir == "" {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(readSmall(filepath.Join(dir, file))), 10, 64)
	return v
}

// readSmall reads a small cgroupfs file with plain syscalls: os.File would
// register and unregister each one with the poller, a cost paid on every
// sandbox's exit.
func readSmall(path string) string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n < 0 {
		return ""
	}
	return string(buf[:n])
}

// readKeyed reads "key value" lines such as memory.events.
func readKeyed(dir, file, key string) int64 {
	for _, line := range strings.Split(readSmall(filepath.Join(dir, file)), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// OpenAt returns the existing group at path (made by CreateAt, perhaps by
// another process): to read, freeze, kill or remove it.
func (h *Host) OpenAt(path string) (*Group, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return nil, fmt.Errorf("cgroup path %q: want a clean absolute path", path)
	}
	g := &Group{host: h, name: path, dirs: map[string]string{}, fd: -1}
	switch h.Version {
	case V2:
		dir := filepath.Join(h.V2Mount, path)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, c := range Controllers {
			g.dirs[c] = dir
		}
	case V1:
		for _, c := range Controllers {
			if m := h.V1Mounts[c]; m != "" {
				if dir := filepath.Join(m, path); isDir(dir) {
					g.dirs[c] = dir
				}
			}
		}
		if len(g.dirs) == 0 {
			return nil, fmt.Errorf("cgroup %s: %w", path, os.ErrNotExist)
		}
	default:
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, h.Why)
	}
	return g, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Members lists the processes of the group and of every group nested in
// it (an exec's tracking group, a request's), by directory relative to
// the group's ("" for its own; directories without processes are left
// out), from the pids hierarchy, which Track makes its groups in.
func (g *Group) Members() (map[string][]int, error) {
	root, ok := g.dirs["pids"]
	if !ok {
		return nil, fmt.Errorf("%w: the group has no pids directory", ErrUnavailable)
	}
	out := map[string][]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%s/cgroup.procs: %q is not a pid", path, f)
			}
			pids = append(pids, pid)
		}
		if len(pids) > 0 {
			rel, _ := filepath.Rel(root, path)
			if rel == "." {
				rel = ""
			}
			out[rel] = pids
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the members of cgroup %s: %w", g.name, err)
	}
	return out, nil
}

// Procs lists the pids in the group (its pids hierarchy's cgroup.procs).
func (g *Group) Procs() []int {
	var out []int
	for _, f := range strings.Fields(readSmall(filepath.Join(g.dirs["pids"], "cgroup.procs"))) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
