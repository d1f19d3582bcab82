package cgroup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/tine-run/tine/internal/kernel/cgroup"
)

// trackedTree starts, in a tracking group of g, a shell that starts a
// process in a session of its own (which writes its pid to pidFile) and
// waits; it returns the shell and the detached process's pid.
func trackedTree(t *testing.T, tr *Group, pidFile string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `read go; setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 3600' & wait`)
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	var pid int
	for deadline := time.Now().Add(time.Minute); pid == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatal("the detached process never started")
	}
	return cmd, pid
}

func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// KillAll kills what left the tracked process's session; Release leaves it
// running, in the parent group, and removes the tracking group.
func TestTrack(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{Pids: 16, MemoryBytes: 64 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	dir := t.TempDir()

	tr, err := g.Track("exec-1")
	if err != nil {
		t.Fatal(err)
	}
	cmd, detached := trackedTree(t, tr, filepath.Join(dir, "killed.pid"))
	if err := tr.KillAll(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(time.Minute); running(detached) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if running(detached) {
		t.Fatalf("the detached process %d survived KillAll", detached)
	}
	if err := tr.Remove(); err != nil {
		t.Fatal(err)
	}

	tr, err = g.Track("exec-2")
	if err != nil {
		t.Fatal(err)
	}
	cmd, detached = trackedTree(t, tr, filepath.Join(dir, "released.pid"))
	defer syscall.Kill(detached, syscall.SIGKILL)
	cmd.Process.Kill()
	cmd.Wait()
	if err := tr.Release(); err != nil {
		t.Fatal(err)
	}
	if !running(detached) {
		t.Fatal("Release killed the detached process")
	}
	for _, d := range tr.Dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s remains after Release", d)
		}
		procs, _ := os.ReadFile(filepath.Join(filepath.Dir(d), "cgroup.procs"))
		if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(detached)+" ") {
			t.Errorf("the released process %d is not in the parent group %s: %q", detached, filepath.Dir(d), procs)
		}
	}
}
