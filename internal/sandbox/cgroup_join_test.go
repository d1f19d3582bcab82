package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// waitingShell is a command that says "ready" and waits for its stdin to
// close; it returns the spec's stdio and the ends the test keeps.
func waitingShell(t *testing.T) (stdio [3]*os.File, stdinW *os.File, ready func()) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() })
	return [3]*os.File{inR, outW, outW}, inW, func() {
		t.Helper()
		line, err := bufio.NewReader(outR).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("the command did not start: %q %v", line, err)
		}
	}
}

var waitArgs = []string{"/bin/sh", "-c", "echo ready; read x; exit 0"}

// inGroup fails the test unless every pid of want is listed in each of
// dirs, and the test's own process in none (the child moved, not tine).
func inGroup(t *testing.T, what string, dirs map[string]string, want ...int) {
	t.Helper()
	if len(dirs) == 0 {
		t.Fatalf("%s: the group has no directories", what)
	}
	for ctl, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		procs := strings.Fields(string(b))
		for _, pid := range want {
			if !slices.Contains(procs, strconv.Itoa(pid)) {
				t.Errorf("%s: pid %d is not in its %s group %s (holds %v)", what, pid, ctl, dir, procs)
			}
		}
		if slices.Contains(procs, strconv.Itoa(os.Getpid())) {
			t.Errorf("%s: tine itself (pid %d) is in the sandbox's %s group", what, os.Getpid(), ctl)
		}
	}
}

// childOf returns the one child of process pid (a sandbox's PID 1 has
// only its command).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("pid %d has children %v, want the command alone", pid, f)
	}
	child, _ := strconv.Atoi(f[0])
	return child
}

// A one-shot sandbox's PID 1 and its command are in the sandbox's group in
// every hierarchy, with and without a user namespace: since the child
// places itself (v1: its first step; v2: born there), nothing else moves
// it, and this is what shows it got there.
func TestSandboxJoinsItsGroup(t *testing.T) {
	require.Root(t)
	require.Feature(t, "cgroup")
	for _, userns := range []bool{false, true} {
		t.Run("userns="+strconv.FormatBool(userns), func(t *testing.T) {
			if userns {
				require.Feature(t, "userns")
			}
			stdio, stdinW, ready := waitingShell(t)
			p, err := Start(&Spec{Args: waitArgs, Stdio: stdio, UserNS: userns, Seccomp: seccomp.Default,
				Limits: cgroup.Limits{Pids: 64, MemoryBytes: 128 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			ready()
			inGroup(t, "one-shot", p.group.Dirs(), p.Pid(), childOf(t, p.Pid()))
			stdinW.Close()
			if o, err := p.Wait(); err != nil || o.ExitCode != 0 {
				t.Fatalf("wait: %+v %v", o, err)
			}
		})
	}
}

// An exec into a live sandbox joins the sandbox's group and its own
// tracking group (v1: the child writes both, first thing).
func TestExecJoinsItsGroups(t *testing.T) {
	require.Root(t)
	require.Feature(t, "cgroup")
	sb, err := Create(&Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64, MemoryBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	stdio, stdinW, ready := waitingShell(t)
	p, err := sb.Exec(&ExecSpec{Args: waitArgs, Stdio: stdio})
	if err != nil {
		t.Fatal(err)
	}
	ready()
	dirs := map[string]string{}
	for ctl, dir := range sb.init.group.Dirs() {
		if ctl != "pids" { // the tracking group nests in the pids hierarchy
			dirs[ctl] = dir
		}
	}
	inGroup(t, "exec", dirs, p.Pid(), p.cmdPid)
	inGroup(t, "exec tracking", p.track.Dirs(), p.Pid(), p.cmdPid)
	stdinW.Close()
	if o, err := p.Wait(); err != nil || o.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", o, err)
	}
}

// ownGroups lists the cgroups this process owns in every hierarchy.
func ownGroups(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/tine/%d.*", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/tine/%d.*", os.Getpid()))
	return append(dirs, more...)
}

// The group is made while the plan is (beginGroup): a start that fails
// after that, on a spec the plan accepted, leaves no group behind. The
// control: the same spec with a usable stdin runs, in a group of its own.
func TestFailedStartLeavesNoGroup(t *testing.T) {
	require.Root(t)
	require.Feature(t, "cgroup")
	before := ownGroups(t)
	dir, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	spec := func(stdin *os.File) *Spec {
		return &Spec{Args: []string{"/bin/true"}, Stdio: [3]*os.File{stdin, nil, nil}, Seccomp: seccomp.Default,
			Limits: cgroup.Limits{Pids: 64, MemoryBytes: 128 << 20}}
	}
	// A directory as stdin is refused at the start (a way into the host).
	if _, err := Start(spec(dir)); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("a directory as stdin: %v, want ErrInvalidSpec", err)
	}
	if after := ownGroups(t); len(after) != len(before) {
		t.Errorf("the failed start left groups: %v (before: %v)", after, before)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	p, err := Start(spec(devnull))
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	if len(p.group.Dirs()) == 0 || len(ownGroups(t)) <= len(before) {
		t.Errorf("control: the run has no group of its own")
	}
	if o, err := p.Wait(); err != nil || o.ExitCode != 0 {
		t.Fatalf("control: %+v %v", o, err)
	}
}
