package cgroup_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/require"
)

func testHost(t *testing.T) *Host {
	t.Helper()
	require.Root(t)
	require.Feature(t, "cgroup")
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The conformance suite every driver version passes: limits are enforced
// on a real process, usage is read back, and nothing is left behind.
func TestGroupEnforcesPidsLimit(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{Pids: 4, MemoryBytes: 64 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	// A shell that tries to start 10 background sleeps inside the group.
	cmd := exec.Command("/bin/sh", "-c", `read go; n=0; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & n=$((n+1)); done 2>/dev/null; echo started; wait`)
	stdin, _ := cmd.StdinPipe()
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	deadline := time.Now().Add(5 * time.Second)
	for g.Stats().Pids < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := g.Stats().Pids; got != 4 {
		t.Fatalf("group holds %d processes, want exactly the limit 4", got)
	}
	g.Kill()
	cmd.Wait()
	if !strings.Contains(out.String(), "started") && !strings.Contains(out.String(), "fork") && !strings.Contains(out.String(), "resource") {
		t.Logf("shell output: %q", out.String())
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range g.Dirs() {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s still exists after Remove", dir)
		}
	}
}

func TestGroupEnforcesMemoryLimit(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{MemoryBytes: 32 << 20}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	// Allocate and touch 128 MiB in a process placed in the group.
	cmd := exec.Command("/usr/bin/python3", "-c", "import sys; sys.stdin.readline(); b = bytearray(128 << 20); print('survived')")
	stdin, _ := cmd.StdinPipe()
	out := &strings.Builder{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	err = cmd.Wait()
	if strings.Contains(out.String(), "survived") {
		t.Fatal("a 128 MiB allocation survived a 32 MiB limit")
	}
	if err == nil {
		t.Fatal("the process exited 0 over its memory limit")
	}
	st := g.Stats()
	if st.OOMKills < 1 {
		t.Fatalf("want an OOM kill recorded, got %+v", st)
	}
	if st.PeakMemoryBytes < 16<<20 || st.PeakMemoryBytes > 40<<20 {
		t.Fatalf("peak memory %d is not near the 32 MiB limit", st.PeakMemoryBytes)
	}
}

func TestReapRemovesGroupsOfDeadOwners(t *testing.T) {
	h := testHost(t)
	// A group named after a pid that cannot be alive, holding a process.
	dead := "999999999.1-1"
	g, err := h.Create(dead, Limits{Pids: 10}, false)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	mine, err := h.Create(NewName(), Limits{Pids: 10}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Remove()

	removed, err := h.Reap()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // reaped means killed: this returns
	if len(removed) == 0 {
		t.Fatal("nothing reaped")
	}
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s survived the reap", d)
		}
	}
	for _, d := range mine.Dirs() {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the reap removed a live owner's group %s: %v", d, err)
		}
	}
}

// Reap lists one hierarchy (v1: memory's), so a removal cut short must
// leave the memory directory to the last: a dead owner's group that is
// left only there (its other directories removed) is still reaped.
func TestReapFindsAGroupLeftInMemoryOnly(t *testing.T) {
	h := testHost(t)
	g, err := h.Create("999999998.1-1", Limits{Pids: 10, CPUs: 0.5}, true)
	if err != nil {
		t.Fatal(err)
	}
	order := g.RemovalOrder()
	if len(order) == 0 || order[len(order)-1] != g.Dirs()["memory"] {
		t.Fatalf("removal order %v: want memory's directory last", order)
	}
	for _, d := range order[:len(order)-1] {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Reap(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dirs()["memory"]); !os.IsNotExist(err) {
		t.Fatalf("the reap left %s (%v)", g.Dirs()["memory"], err)
	}
}

// A Watch reads its open files again on every call: the counts follow a
// process that joins and is killed.
func TestWatchFollowsTheGroup(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{Pids: 8, MemoryBytes: 64 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	w, err := g.Watch(true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := w.Pids(); n != 0 {
		t.Fatalf("an empty group counts %d processes", n)
	}
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	if n := w.Pids(); n != 1 {
		cmd.Process.Kill()
		t.Fatalf("after a process joined, the group counts %d", n)
	}
	w.KillMembers()
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("sleep ended with %v, want killed", err)
	}
	for deadline := time.Now().Add(5 * time.Second); w.Pids() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group still counts %d processes after its member was killed and reaped", w.Pids())
		}
	}
	if n := w.OOMKills(); n != 0 {
		t.Fatalf("%d OOM kills counted in a group that never ran out of memory", n)
	}
	if n := w.Throttled(); n != 0 {
		t.Fatalf("%d throttled periods in a group without a CPU quota", n)
	}
}
