package api_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

// `tine serve` gives the Go runtime's sysmon thread a 1 ms timer slack,
// which a thread sysmon starts inherits, and a process cloned from that
// thread too (internal/kernel/sysmon). No sandboxed process may get it:
// with every thread of the daemon given that slack (as one sysmon started
// would have), a new sandbox's PID 1 and an exec'd command still have the
// daemon's own, from before.
func TestSandboxesDoNotInheritSysmonsTimerSlack(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	slackOf := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	own := slackOf("/proc/" + strconv.Itoa(d.pid()) + "/timerslack_ns")
	const sysmons = "1000000"
	if own == sysmons {
		t.Fatalf("the daemon's own timer slack is already %s ns: the check would prove nothing", own)
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(d.pid()) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		// Negative control: every thread has it, read back.
		p := "/proc/" + e.Name() + "/timerslack_ns"
		if err := os.WriteFile(p, []byte(sysmons), 0); err != nil {
			t.Fatal(err)
		}
		if got := slackOf(p); got != sysmons {
			t.Fatalf("thread %s: timer slack %s after writing %s", e.Name(), got, sysmons)
		}
	}
	sb, err := d.c.Create(ctx, &api.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	// PID 1, read from the host: a child of the daemon (a sandbox may not
	// read another process's slack). Every child is checked.
	children := 0
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(d.pid()) {
			continue
		}
		children++
		if got := slackOf("/proc/" + e.Name() + "/timerslack_ns"); got != own {
			t.Errorf("the daemon's child %s (a sandbox's PID 1) has a timer slack of %s ns, want %s (the daemon's own; its threads had %s)", e.Name(), got, own, sysmons)
		}
	}
	if children == 0 {
		t.Fatal("no child of the daemon after creating a sandbox: no PID 1 to check")
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", "/proc/self/timerslack_ns"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("cat exited %d: %s", res.ExitCode, res.Stderr)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != own {
		t.Errorf("an exec'd command has a timer slack of %s ns, want %s (the daemon's own; its threads had %s)", got, own, sysmons)
	}
}
