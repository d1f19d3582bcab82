package api_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/testbin"
)

// TestDaemonKilledWhileFrozen kills the daemon while a sandbox's cgroup is
// frozen, as a snapshot leaves it for a moment: a frozen task does not die
// of SIGKILL (its PID 1's parent-death signal stays pending), so unless the
// next daemon thaws what it reaps, that sandbox stays behind for good, in
// uninterruptible sleep.
func TestDaemonKilledWhileFrozen(t *testing.T) {
	d := startDaemon(t, "--pool", "0")
	sb, err := d.c.Create(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, start := sb.Pid, startTimeOf(sb.Pid)
	if pid <= 0 || start == 0 {
		t.Fatalf("sandbox %s: no PID 1 to watch (pid %d)", sb.ID, pid)
	}
	state, frozen := freezerOf(t, pid)
	if state == "" {
		t.Skip("no cgroup freezer for the sandbox (v1 without freezer, or v2 without cgroup.freeze)")
	}
	if err := os.WriteFile(state, []byte(frozen), 0); err != nil {
		t.Fatalf("freeze the sandbox: %v", err)
	}
	// Whatever happens, this test leaves no frozen task on the host.
	t.Cleanup(func() { os.WriteFile(state, []byte(thawedValue(frozen)), 0) })
	if !testbin.Eventually(patience, func() bool { return isFrozen(state) }) {
		t.Fatalf("the sandbox never froze: PID 1 state %q, %s reads %q", procState(pid), state, readTrim(state))
	}

	d.kill()
	// The negative control: the kill alone does not end the frozen PID 1.
	if startTimeOf(pid) != start {
		t.Fatalf("PID 1 (%d) died of its daemon's death while frozen: the premise of this test is gone", pid)
	}
	startDaemonIn(t, d.dir, "--pool", "0")
	if !testbin.Eventually(patience, func() bool { return startTimeOf(pid) != start }) {
		t.Fatalf("the restarted daemon left the frozen sandbox's PID 1 (%d, state %s) alive", pid, procState(pid))
	}
	if left := testbin.CgroupsOf(d.pid()); len(left) > 0 && !testbin.Eventually(patience, func() bool { return len(testbin.CgroupsOf(d.pid())) == 0 }) {
		t.Errorf("cgroups of the killed daemon remain: %v", testbin.CgroupsOf(d.pid()))
	}
}

// freezerOf returns the file that freezes pid's cgroup and the value that
// freezes it: v1's freezer.state, or v2's cgroup.freeze.
func freezerOf(t *testing.T, pid int) (file, frozen string) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",freezer,"):
			p := filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state")
			if _, err := os.Stat(p); err == nil {
				return p, "FROZEN"
			}
		case parts[0] == "0" && strings.HasPrefix(parts[2], "/tine/"):
			v2 = parts[2]
		}
	}
	if v2 != "" {
		for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			p := filepath.Join(m, v2, "cgroup.freeze")
			if _, err := os.Stat(p); err == nil {
				return p, "1"
			}
		}
	}
	return "", ""
}

func thawedValue(frozen string) string {
	if frozen == "1" {
		return "0"
	}
	return "THAWED"
}

func isFrozen(file string) bool {
	v := readTrim(file)
	if filepath.Base(file) == "cgroup.freeze" {
		ev, _ := os.ReadFile(filepath.Join(filepath.Dir(file), "cgroup.events"))
		return strings.Contains(string(ev), "frozen 1")
	}
	return v == "FROZEN"
}

func readTrim(file string) string {
	b, _ := os.ReadFile(file)
	return strings.TrimSpace(string(b))
}

// procState is the one-letter state of pid ("" once it is gone).
func procState(pid int) string {
	f := procstat.Fields(pid)
	if len(f) < 1 {
		return ""
	}
	return f[0]
}
