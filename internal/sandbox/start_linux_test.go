package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
)

// TestStartRefusedPlanLeavesNoGroup: Start makes the sandbox's cgroup while
// it makes the plan; a plan refused (here: set-user-ID programs with a
// user namespace) must leave no group of this process behind.
func TestStartRefusedPlanLeavesNoGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	h, err := hostOnce()
	if err != nil || h.cgroup.Version == cgroup.None {
		t.Skip("no cgroups")
	}
	dir := h.cgroup.V2Mount
	if h.cgroup.Version == cgroup.V1 {
		dir = h.cgroup.V1Mounts["memory"]
	}
	dir += "/" + cgroup.Parent
	mine := func() []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), strconv.Itoa(os.Getpid())+".") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	before := mine()
	for range 3 {
		_, err := Start(&Spec{Args: []string{"true"}, Setuid: true, UserNS: true})
		if !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("Start: %v, want ErrInvalidSpec", err)
		}
	}
	// A group left would be made by now.
	time.Sleep(200 * time.Millisecond)
	if after := mine(); len(after) != len(before) {
		t.Fatalf("groups of this process before %v, after %v", before, after)
	}
}

// TestStartChecksACachedViewBeforeTheCommand: Start plans from the host
// view's cache without checking it and checks it once PID 1 is cloned
// (Plan.viewCheck). A cached view whose directories changed must never
// reach a command: here the cache says nothing is hidden (no entries) and
// that /etc has another change time, so the check fails, PID 1 is killed
// and the sandbox made again from a fresh view, where /etc/shadow is
// empty. Without the check the command would read the host's.
func TestStartChecksACachedViewBeforeTheCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root: running as uid %d", os.Geteuid())
	}
	if st, err := os.Stat("/etc/shadow"); err != nil || st.Size() == 0 {
		t.Skipf("needs a non-empty /etc/shadow on the host: %v", err)
	}
	t.Cleanup(func() {
		hostViewMemo.Lock()
		hostViewMemo.scan = nil
		hostViewMemo.Unlock()
	})
	probe := []string{"/bin/sh", "-c", "test -s /etc/shadow"}
	for _, stale := range []bool{false, true} {
		hostViewEntries(true) // a fresh view in memory
		hostViewMemo.Lock()
		hostViewMemo.scan = &hostViewScan{Built: time.Now(), Perms: true, Dirs: map[string]int64{"/etc": dirCtime("/etc") - 1}}
		if !stale {
			hostViewMemo.scan = nil // the control: the view as it is
		}
		hostViewMemo.Unlock()
		o, err := Run(&Spec{Args: probe, Seccomp: seccomp.Default})
		if err != nil {
			t.Fatal(err)
		}
		if o.ExitCode != 1 {
			t.Fatalf("stale cache %v: test -s /etc/shadow exited %d (%s), want 1: the host's shadow file is readable in the sandbox", stale, o.ExitCode, o.Reason)
		}
		hostViewMemo.Lock()
		sc := hostViewMemo.scan
		hostViewMemo.Unlock()
		if sc == nil || len(sc.Entries) == 0 || !sc.fresh() {
			t.Fatalf("stale cache %v: after the run the view in memory is %+v, want a fresh one", stale, sc)
		}
	}
}

// TestDeferredViewCheckGatesTheCommand: a plan whose host view is still to
// be checked (Plan.viewCheck) makes PID 1 wait for the parent's answer
// after its walls and before it forks the command, so the check cannot
// lose a race with the command; a plan checked already has no such wait.
func TestDeferredViewCheckGatesTheCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root: running as uid %d", os.Geteuid())
	}
	const gate = "wait for the host view's check"
	for _, deferred := range []bool{false, true} {
		p, err := newPlan(&Spec{Args: []string{"true"}, Seccomp: seccomp.Default}, false, deferred)
		if err != nil {
			t.Fatal(err)
		}
		if deferred && p.viewCheck == nil {
			p.viewCheck = func() bool { return true } // the view was scanned now: force the case
		}
		pg, err := compileBoot(p, inputs{ruleset: -1, target: -1, launch: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, last := count(pg.what, gate), len(pg.setup) > 0 && pg.what[len(pg.setup)-1] == gate
		switch {
		case deferred && (n != 1 || !last):
			t.Fatalf("deferred check: PID 1 waits for it %d times, last step %v; want once, as its last setup step", n, last)
		case !deferred && n != 0:
			t.Fatalf("checked plan: PID 1 waits for a check %d times, want none", n)
		}
	}
}
