package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// make build installs tine as the small front, which runs `tine run` in
// its own process, and tine-full, which it execs for every other command
// (ADR 0023): a run must not pay the full program's start, and every
// other command must still be there.
func TestFrontRunsRunItselfAndExecsTheRest(t *testing.T) {
	h := setup(t)
	full := tineBin + "-full"
	// The front is the small binary, the file tine-run is too.
	small, err := os.Stat(tineBin + "-run")
	if err != nil {
		t.Fatal(err)
	}
	p := h.start(runConfig{}, "run", "--in-process", "--", "sh", "-c", "echo ready-"+h.marker+"; sleep 100")
	p.waitStdout("ready-"+h.marker, 20*time.Second)
	if exe, err := os.Stat("/proc/" + strconv.Itoa(p.pid()) + "/exe"); err != nil || !os.SameFile(exe, small) {
		target, _ := os.Readlink("/proc/" + strconv.Itoa(p.pid()) + "/exe")
		t.Errorf("tine run's process runs %s (%v), want the small front (the file %s-run is)", target, err, tineBin)
	}
	p.cmd.Process.Kill()
	p.wait()

	// The front cannot print the full command list itself: that it does
	// is the exec of tine-full (negative control: the full program prints
	// the same).
	for _, bin := range []string{tineBin, full} {
		r := h.runWith(runConfig{bin: bin}, "--help")
		if r.Code != 0 || !strings.Contains(r.Stdout, "serve") || !strings.Contains(r.Stdout, "snapshot") {
			t.Errorf("%s --help: want tine's command list, got:\n%s", bin, r)
		}
	}
	// The daemon that `tine serve` starts is the full program's process.
	dir := t.TempDir()
	d := h.start(runConfig{}, "serve", "--socket", filepath.Join(dir, "s.sock"), "--data-dir", filepath.Join(dir, "data"), "--pool", "0")
	var exe string
	if !testbin.Eventually(20*time.Second, func() bool {
		exe, _ = os.Readlink("/proc/" + strconv.Itoa(d.pid()) + "/exe")
		return exe == full
	}) {
		t.Errorf("tine serve's process runs %q, want %s", exe, full)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait()
}

// A front installed without tine-full still runs `tine run`, and says for
// every other command what is missing and what to do.
func TestFrontWithoutTheFullProgram(t *testing.T) {
	h := setup(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	raw, err := os.ReadFile(tineBin)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "tine")
	if err := os.WriteFile(lone, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	r := h.runWith(runConfig{bin: lone}, "run", "--in-process", "--", "sh", "-c", "exit 7")
	if r.Code != 7 {
		t.Errorf("a lone front's tine run: exit %d, want the command's 7\n%s", r.Code, r)
	}
	r = h.runWith(runConfig{bin: lone, env: []string{"PATH=/usr/bin:/bin"}}, "ps")
	if r.Code != 1 || !strings.Contains(r.Stderr, "tine-full") || !strings.Contains(r.Stderr, "make build") ||
		strings.Count(strings.TrimSuffix(r.Stderr, "\n"), "\n") != 0 {
		t.Errorf("a lone front's tine ps: want exit 1 and one line naming tine-full and make build, got:\n%s", r)
	}
}

// tine run exits as soon as its command's status is known and leaves the
// end of the sandbox (PID 1's exit, the cgroup's removal) to a cleanup
// process (ADR 0023, sixth session), as bwrap leaves its PID 1's. The
// cleanup holds none of tine's descriptors (a reader of tine's output sees
// EOF when tine exits); when it is SIGKILLed before it removed the group,
// the next run's reap removes it (its owner, the tine that made it, is
// gone); and nothing of either run outlives them (checkLeftovers).
func TestRunLeavesItsEndToACleanup(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	// A host process put into the run's cgroup keeps it busy: the cleanup
	// then retries its rmdir for a while, long enough to be found.
	stray := startHostProcess(t, "sleep", "100")
	in, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer feed.Close()
	p := h.start(runConfig{stdin: in}, "run", "--in-process", "--", "sh", "-c", "echo ready-"+h.marker+"; read x || true")
	in.Close()
	p.waitStdout("ready-"+h.marker, 20*time.Second)
	dirs := testbin.CgroupsOf(p.pid())
	if len(dirs) == 0 {
		t.Fatalf("no cgroup of tine pid %d while it runs", p.pid())
	}
	pid1 := childOf(p.pid())
	if pid1 <= 0 {
		t.Fatalf("no PID 1 under tine pid %d", p.pid())
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(stray.Process.Pid)), 0); err != nil {
			t.Fatalf("move the stray into %s: %v", dir, err)
		}
	}
	feed.Close() // the command ends
	// p.wait returns once tine has exited and its stdout reached EOF.
	if r := p.wait(); r.Code != 0 {
		t.Fatalf("tine run: want exit 0, got:\n%s", r)
	}
	var cleanup int
	if !testbin.Eventually(5*time.Second, func() bool { cleanup = pidfdHolder(pid1); return cleanup > 0 }) {
		t.Fatalf("no cleanup process holding a pidfd of PID 1 (%d) after tine exited; its cgroups: %v", pid1, testbin.CgroupsOf(p.pid()))
	}
	if fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cleanup)); len(fds) != 1 {
		t.Errorf("the cleanup process holds %d descriptors, want only its pidfd", len(fds))
	}
	if err := syscall.Kill(cleanup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(5*time.Second, func() bool { return !alive(cleanup) }) {
		t.Fatalf("the cleanup process %d survived SIGKILL", cleanup)
	}
	if left := testbin.CgroupsOf(p.pid()); len(left) != len(dirs) {
		t.Fatalf("control: the killed cleanup should have left all of %v (the stray holds them), left %v", dirs, left)
	}
	stray.Process.Kill()
	stray.Wait()
	if !testbin.Eventually(5*time.Second, func() bool { return !alive(pid1) }) {
		t.Errorf("PID 1 (%d) of the run still exists", pid1)
	}
	if r := h.run("run", "--in-process", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("the next run: want exit 0, got:\n%s", r)
	}
	if left := testbin.CgroupsOf(p.pid()); len(left) > 0 {
		t.Errorf("the next run's reap left the groups of the dead run: %v", left)
	}
}

// Runs one after another leave nothing: each run's cgroup goes, and no
// process of it (PID 1, the cleanup, both copies of tine carrying its
// argv and so the marker) outlives it for long (checkLeftovers).
func TestRunsLeaveNothing(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	for i := 0; i < 10; i++ {
		p := h.start(runConfig{}, "run", "--in-process", "--memory", "512m", "--pids", "256", "--cpus", "1", "--", "/bin/sh", "-c", "exit 3", h.marker)
		if r := p.wait(); r.Code != 3 {
			t.Fatalf("run %d: want exit 3, got:\n%s", i, r)
		}
		if !testbin.Eventually(3*time.Second, func() bool { return len(testbin.CgroupsOf(p.pid())) == 0 }) {
			t.Errorf("run %d: cgroups remain: %v", i, testbin.CgroupsOf(p.pid()))
		}
	}
}

// childOf returns a child of pid (its first), or 0.
func childOf(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if f := strings.Fields(string(raw)); len(f) > 0 {
			c, _ := strconv.Atoi(f[0])
			return c
		}
	}
	return 0
}

// pidfdHolder returns a process holding a pidfd of pid, or 0.
func pidfdHolder(pid int) int {
	procs, _ := os.ReadDir("/proc")
	want := fmt.Sprintf("Pid:\t%d\n", pid)
	for _, e := range procs {
		holder, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", holder))
		for _, fd := range fds {
			if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", holder, fd.Name())); target != "anon_inode:[pidfd]" {
				continue
			}
			if info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", holder, fd.Name())); strings.Contains(string(info), want) {
				return holder
			}
		}
	}
	return 0
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
