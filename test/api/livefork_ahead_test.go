package api_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/testbin"
)

// parked is a copy of a forkable session's interpreter forked ahead of
// its next live fork: its host pid and its pid in the sandbox.
type parked struct {
	host, inSandbox int
}

// procInfo is what /proc/PID/stat and cmdline say of a host process.
func procInfo(pid int) (state string, ppid int, agent bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	fmt.Sscan(f[1], &ppid)
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return f[0], ppid, strings.Contains(string(cmd), "code-interpreter agent")
}

// parkedCopies are the daemon's parked copies: live interpreters below
// it whose parent is an interpreter (a fork's copies, once ready, are
// their child sandbox's PID 1's).
func parkedCopies(t *testing.T, d *daemon) []parked {
	t.Helper()
	var out []parked
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		state, ppid, agent := procInfo(pid)
		if !agent || state == "Z" {
			continue
		}
		if _, _, parentAgent := procInfo(ppid); !parentAgent {
			continue
		}
		below := false
		for p := ppid; p > 1; {
			if p == d.pid() {
				below = true
				break
			}
			_, p, _ = procInfo(p)
		}
		if !below {
			continue
		}
		hp := hostProcOf(t, fmt.Sprint(pid))
		var in int
		fmt.Sscan(hp.nspid[len(hp.nspid)-1], &in)
		out = append(out, parked{host: pid, inSandbox: in})
	}
	return out
}

// awaitParked waits until the daemon holds exactly one parked copy.
func awaitParked(t *testing.T, d *daemon) parked {
	t.Helper()
	var got []parked
	if !testbin.Eventually(30*time.Second, func() bool { got = parkedCopies(t, d); return len(got) == 1 }) {
		t.Fatalf("the daemon holds %d parked copies, want 1: %v", len(got), got)
	}
	return got[0]
}

// assertGone checks that no process has the host pid (a zombie is one).
func assertGone(t *testing.T, what string, pid int, wait time.Duration) {
	t.Helper()
	if !testbin.Eventually(wait, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }) {
		state, _, _ := procInfo(pid)
		t.Errorf("the parked copy %d is still there (state %q) %s", pid, state, what)
	}
}

// forkedAhead counts the daemon's "session forked" log lines whose first
// copy was forked ahead.
func forkedAhead(t *testing.T, d *daemon) int {
	t.Helper()
	b, err := os.ReadFile(d.log)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "session forked") && strings.Contains(line, "ahead=true") {
			n++
		}
	}
	return n
}

func forkChildren(t *testing.T, s *client.Session, n int) []*client.Session {
	t.Helper()
	kids, _, err := s.Fork(context.Background(), n)
	if err != nil {
		t.Fatalf("fork into %d: %v", n, err)
	}
	return kids
}

// A copy forked ahead while the session idles is the session as of the
// fork that claims it: a cell run after it was forked kills it before
// the cell runs (it is gone, to the cell and to the host, when the cell
// answers), so a fork after that cell sees the cell's state; a fork
// that claims one (the log says so) carries the state, and every child,
// the claimed copy's included, draws random numbers of its own, unlike
// the parent's.
func TestLiveForkAheadCopyIsTheStateAsOfTheFork(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	_, s := sandboxWithForkable(t, d)
	if ex, err := s.Run(ctx, "import json, os, random\nx = 1"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	p := awaitParked(t, d)
	var seen bool
	cellJSON(t, s, fmt.Sprintf("x = 2\njson.dumps(os.path.exists('/proc/%d'))", p.inSandbox), &seen)
	if seen {
		t.Errorf("the cell after the copy forked ahead sees it (pid %d in the sandbox), want it killed and reaped first", p.inSandbox)
	}
	assertGone(t, "after a cell", p.host, 0)
	for _, k := range forkChildren(t, s, 1) {
		var x int
		cellJSON(t, k, "json.dumps(x)", &x)
		if x != 2 {
			t.Errorf("a child forked after the cell x = 2 has x = %d: it is a copy from before the cell", x)
		}
	}

	p = awaitParked(t, d)
	before := forkedAhead(t, d)
	kids := forkChildren(t, s, 3)
	if n := forkedAhead(t, d) - before; n != 1 {
		t.Fatalf("the fork after a copy was parked: %d log lines say it used one, want 1", n)
	}
	draws := map[float64]string{}
	var r float64
	cellJSON(t, s, "json.dumps(random.random())", &r)
	draws[r] = "the parent"
	for i, k := range kids {
		var got struct {
			X int     `json:"x"`
			R float64 `json:"r"`
		}
		cellJSON(t, k, "json.dumps({'x': x, 'r': random.random()})", &got)
		if got.X != 2 {
			t.Errorf("child %d has x = %d, want 2", i, got.X)
		}
		if who, dup := draws[got.R]; dup {
			t.Errorf("child %d draws %v, as %s does", i, got.R, who)
		}
		draws[got.R] = fmt.Sprintf("child %d", i)
	}
	assertGone(t, "after the fork that claimed it (it hopped into its child)", p.host, 5*time.Second)
}

// A parked copy goes (no process is left) with a restart and the delete
// of its session, the delete of its sandbox, and the daemon's shutdown;
// an interrupt between cells kills it too (it is reaped at the next
// request).
func TestLiveForkAheadCopyGoesWithItsSession(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := forkableWithCell(t, d, sb.ID)
	p := awaitParked(t, d)
	if err := s.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	// Killed; the interpreter, idle, reaps it at its next request.
	if !testbin.Eventually(5*time.Second, func() bool { state, _, _ := procInfo(p.host); return state == "Z" || state == "" }) {
		state, _, _ := procInfo(p.host)
		t.Errorf("the parked copy %d is in state %q after an interrupt, want killed", p.host, state)
	}

	run := func(s *client.Session) {
		if ex, err := s.Run(ctx, "y = 1"); err != nil || ex.Status != api.ExecOK {
			t.Fatalf("cell: %+v %v", ex, err)
		}
	}
	run(s)
	p = awaitParked(t, d)
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "after a restart", p.host, 5*time.Second)

	run(s)
	p = awaitParked(t, d)
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "after the session's delete", p.host, 5*time.Second)

	s = forkableWithCell(t, d, sb.ID)
	p = awaitParked(t, d)
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "after the sandbox's delete", p.host, 5*time.Second)

	sb, err = d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	forkableWithCell(t, d, sb.ID)
	p = awaitParked(t, d)
	d.stop()
	assertGone(t, "after the daemon's shutdown", p.host, 5*time.Second)
}

// A parked copy is undumpable: a process the session started earlier
// (detached, so it is no child of the interpreter's and the copy was
// forked), with the interpreter's walls and no Landlock domain, can
// ptrace a sleep it started (the control) but not the parked copy.
func TestLiveForkAheadCopyIsUndumpable(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, s := sandboxWithForkable(t, d)
	// The prober waits for /tmp/go holding a pid, then attaches to it and
	// to a sleep of its own, and writes what it got to /tmp/got.
	prober := `import ctypes, json, os, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
def attach(pid):
    if libc.ptrace(16, pid, None, None) == 0:
        os.waitpid(pid, 0)
        libc.ptrace(17, pid, None, None)
        return "ok"
    return os.strerror(ctypes.get_errno())
while not os.path.exists('/tmp/go'):
    time.sleep(0.02)
pid = int(open('/tmp/go').read())
ctl = subprocess.Popen(['sleep', '60'])
got = {'control': attach(ctl.pid), 'parked': attach(pid)}
ctl.kill()
open('/tmp/got.tmp', 'w').write(json.dumps(got))
os.rename('/tmp/got.tmp', '/tmp/got')
`
	// Detached: the first process exits at once, its child goes on.
	code := fmt.Sprintf(`import os, subprocess
if os.fork() == 0:
    os.setsid()
    subprocess.Popen(['python3', '-c', %q], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os._exit(0)
os.wait()
`, prober)
	if ex, err := s.Run(ctx, code); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	p := awaitParked(t, d)
	if r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > /tmp/go.tmp && mv /tmp/go.tmp /tmp/go", p.inSandbox)}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	}
	var out string
	if !testbin.Eventually(30*time.Second, func() bool {
		r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", "/tmp/got"}})
		if err == nil && r.ExitCode == 0 {
			out = string(r.Stdout)
			return true
		}
		return false
	}) {
		t.Fatal("the prober wrote nothing")
	}
	if !strings.Contains(out, `"control": "ok"`) {
		t.Fatalf("the negative control: the prober could not ptrace its own sleep (%s), so the check proves nothing", out)
	}
	if !strings.Contains(out, `"parked": "Operation not permitted"`) {
		t.Errorf("the prober ptraced the parked copy: %s", out)
	}
	if got := parkedCopies(t, d); len(got) != 1 || got[0] != p {
		t.Errorf("the parked copy is %v, want %v still (the check must be of it)", got, p)
	}
}

// unparked drops the parked copies from host pids (a forkable session's
// interpreter forks one ahead while it idles: a process of its own).
func unparked(pids []string) []string {
	var out []string
	for _, p := range pids {
		var pid int
		fmt.Sscan(p, &pid)
		state, ppid, agent := procInfo(pid)
		if _, _, parentAgent := procInfo(ppid); agent && parentAgent && state != "Z" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Output a process of the session writes between cells reaches the next
// cell, as without a copy forked ahead: the fork ahead reads the
// interpreter's pipes while it waits for its answer and keeps what it
// read.
func TestLiveForkAheadKeepsOutputBetweenCells(t *testing.T) {
	// The copy is forked 2 s after the cell; the write comes after the
	// cell has ended (0.5 s), before the fork ahead reads the pipes.
	d := startDaemon(t, "--fork-ahead-delay=2s")
	ctx := context.Background()
	_, s := sandboxWithForkable(t, d)
	// Detached (no child of the interpreter's, so the copy is forked), it
	// writes to the session's stdout once the cell has ended.
	code := `import os, time
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(0.5)
        os.write(1, b"between cells\n")
    os._exit(0)
os.wait()
`
	if ex, err := s.Run(ctx, code); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	awaitParked(t, d)
	ex, err := s.Run(ctx, "print('next')")
	if err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	if !strings.Contains(ex.Stdout, "between cells") {
		t.Errorf("the cell after the fork ahead has stdout %q, want what was written between the cells too", ex.Stdout)
	}
}
