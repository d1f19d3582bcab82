package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// reachProbe is Python that tries, against each pid of PIDS, what one
// sandbox must not do to another's processes: see it in /proc, signal it
// (kill(pid, 0) asks the kernel the same permission as SIGKILL), open
// its memory, read its environment, open its mount namespace (what setns
// would take) and PTRACE_ATTACH it. Before that it makes the same attempts
// against a sleep it started itself: the negative control, proving each
// attempt works where it may. It prints JSON {"control": {...}, "pids":
// {pid: {...}}}.
const reachProbe = `import ctypes, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def attempts(pid):
    out = {"listed": str(pid) in os.listdir("/proc")}
    try:
        out["foreign"] = os.readlink("/proc/%d/ns/pid" % pid) != os.readlink("/proc/self/ns/pid")
    except OSError:
        pass
    try:
        os.kill(pid, 0); out["kill"] = "ok"
    except OSError as e:
        out["kill"] = e.__class__.__name__
    for name in ("mem", "environ", "ns/mnt"):
        try:
            fd = os.open("/proc/%d/%s" % (pid, name), os.O_RDONLY)
            if name == "environ":
                out["environ_text"] = os.read(fd, 1 << 16).decode(errors="replace")
            os.close(fd); out[name] = "ok"
        except OSError as e:
            out[name] = e.__class__.__name__
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        out["ptrace"] = "ok"
        os.waitpid(pid, os.__dict__.get("WALL", 0x40000000))
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    else:
        out["ptrace"] = os.strerror(ctypes.get_errno())
    return out
ctl = subprocess.Popen(["sleep", "60"])
res = {"control": attempts(ctl.pid), "pids": {p: attempts(p) for p in PIDS}}
ctl.kill(); ctl.wait()
print(json.dumps(res))
`

// reach is one probe's answer.
type reach struct {
	Control map[string]any            `json:"control"`
	Pids    map[string]map[string]any `json:"pids"`
}

// reached lists what an attempt got through to (nothing listed, signalled,
// opened or attached), and checks the control got through everywhere.
func (r reach) reached(t *testing.T, who string) map[string][]string {
	t.Helper()
	for _, k := range []string{"kill", "mem", "environ", "ns/mnt", "ptrace"} {
		if r.Control[k] != "ok" {
			t.Fatalf("%s: the negative control: %s of its own sleep failed (%v), so the probe proves nothing", who, k, r.Control[k])
		}
	}
	if r.Control["listed"] != true {
		t.Fatalf("%s: the negative control: its own sleep is not in its /proc", who)
	}
	got := map[string][]string{}
	for pid, a := range r.Pids {
		for _, k := range []string{"kill", "mem", "environ", "ns/mnt", "ptrace"} {
			if a[k] == "ok" {
				got[pid] = append(got[pid], k)
			}
		}
		if a["listed"] == true {
			got[pid] = append(got[pid], "listed")
		}
	}
	return got
}

// hostProc is what the host's /proc says of a process: its pid in each
// pid namespace from the host's down (NSpid), and its pid namespace.
type hostProc struct {
	host  string
	nspid []string
	pidns string
}

func hostProcOf(t *testing.T, pid string) hostProc {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("status of host pid %s: %v", pid, err)
	}
	p := hostProc{host: pid}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
			p.nspid = strings.Fields(rest)
		}
	}
	p.pidns, _ = os.Readlink("/proc/" + pid + "/ns/pid")
	return p
}

// probeFrom runs reachProbe against pids, as an exec in sandbox id (sess
// nil) or as a cell of sess.
func probeFrom(t *testing.T, d *daemon, id string, sess *client.Session, pids []string) reach {
	t.Helper()
	code := strings.Replace(reachProbe, "PIDS", "["+strings.Join(pids, ", ")+"]", 1)
	var out string
	if sess == nil {
		r, err := d.c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"python3", "-c", code}, TimeoutMs: 30000})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("the probe as an exec in %s: %+v %v", id, r, err)
		}
		out = string(r.Stdout)
	} else {
		ex, err := sess.Run(context.Background(), code)
		if err != nil || ex.Status != api.ExecOK {
			t.Fatalf("the probe as a cell: %+v %v", ex, err)
		}
		out = ex.Stdout
	}
	var r reach
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("the probe's output %q: %v", out, err)
	}
	return r
}

// A live fork's children are sandboxes like any other: no process of the
// parent sandbox (an exec there, the forkable session itself) can see,
// signal, ptrace, or read the memory, environment or namespaces of a
// child's processes (its session's copy, a process the copy started, a
// session the child started afresh), though the children's pid namespaces
// are nested in the parent's; nor can a child reach a sibling's, by the
// numbers they have in the parent's namespace or in their own.
func TestLiveForkChildrenUnreachableFromParentAndSiblings(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := marker()
	parent, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{"TINE_LF_PARENT=" + m}, Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := parent.Run(ctx, "x = 41"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	const n = 2
	kids, res, err := parent.Fork(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	// Each child's targets: the copy, a sleep it started, a fresh session's
	// interpreter; the last two carry the child's mark.
	targets := make([][]hostProc, n)
	for i, k := range kids {
		mark := fmt.Sprintf("TINE_LF_CHILD=%s-%d", m, i)
		key, val, _ := strings.Cut(mark, "=")
		if ex, err := k.Run(ctx, fmt.Sprintf("import subprocess\nsub = subprocess.Popen(['sleep', '600'], env={%q: %q})", key, val)); err != nil || ex.Status != api.ExecOK {
			t.Fatalf("child %d starts a sleep: %+v %v", i, ex, err)
		}
		if _, err := d.c.CreateSession(ctx, res.Sandboxes[i].ID, &api.SessionSpec{Env: []string{mark}}); err != nil {
			t.Fatalf("a fresh session in child %d: %v", i, err)
		}
		marked := withEnv(mark)
		if len(marked) != 2 {
			t.Fatalf("child %d: host processes with its mark: %v, want its sleep and its fresh session", i, marked)
		}
		for _, pid := range marked {
			targets[i] = append(targets[i], hostProcOf(t, pid))
		}
		for _, pid := range withEnv("TINE_LF_PARENT=" + m) {
			if p := hostProcOf(t, pid); p.pidns == targets[i][0].pidns {
				targets[i] = append(targets[i], p) // the copy
			}
		}
		if len(targets[i]) != 3 {
			t.Fatalf("child %d: found %d targets, want the copy, its sleep and the fresh session", i, len(targets[i]))
		}
		for _, p := range targets[i] {
			if len(p.nspid) != 3 {
				t.Fatalf("child %d: host pid %s has NSpid %v, want host, parent and child levels", i, p.host, p.nspid)
			}
		}
	}
	// At the parent's level: the pids its processes would use.
	var inParent []string
	for _, ts := range targets {
		for _, p := range ts {
			inParent = append(inParent, p.nspid[1])
		}
	}
	// What the parent still gets, and why (docs/security.md): its pid
	// namespace nests the children's, so their numbers are in its /proc
	// (a listing, /proc/PID/status and cmdline), and an exec, root with
	// CAP_KILL and an unscoped Landlock domain, may signal them.
	known := map[string]map[string]bool{
		"an exec in the parent":       {"listed": true, "kill": true},
		"the forkable parent session": {"listed": true},
	}
	for who, sess := range map[string]*client.Session{"an exec in the parent": nil, "the forkable parent session": parent} {
		for pid, what := range probeFrom(t, d, sb.ID, sess, inParent).reached(t, who) {
			for _, w := range what {
				if !known[who][w] {
					t.Errorf("%s reached child process %s (parent's pid): %s", who, pid, w)
				}
			}
		}
	}
	// A second fork puts a second layer on the parent: its copy, which
	// inherited the first, is outside the second, and out of reach too.
	seen := map[string]bool{}
	for _, ts := range targets {
		seen[ts[0].pidns] = true
	}
	again, res2, err := parent.Fork(ctx, 1)
	if err != nil {
		t.Fatalf("a second fork: %v", err)
	}
	if ex, err := again[0].Run(ctx, "x + 1"); err != nil || ex.Text() != "42" {
		t.Fatalf("the second fork's copy: %+v %v", ex, err)
	}
	var second []string
	for _, pid := range withEnv("TINE_LF_PARENT=" + m) {
		if p := hostProcOf(t, pid); !seen[p.pidns] && len(p.nspid) == 3 { // not the parent (2 levels)
			second = append(second, p.nspid[1])
		}
	}
	if len(second) != 1 {
		t.Fatalf("the second fork's copy among the host's processes: %v", second)
	}
	for pid, what := range probeFrom(t, d, sb.ID, parent, second).reached(t, "the parent after its second fork") {
		for _, w := range what {
			if w != "listed" {
				t.Errorf("the parent reached its second fork's copy %s: %s", pid, w)
			}
		}
	}
	if err := d.c.Delete(ctx, res2.Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}
	// Siblings: child 0 tries child 1's processes by their numbers in the
	// parent's namespace and in their own; a number that exists in child 0
	// is one of its own processes, which must not be child 1's (its
	// environment carries no mark of child 1).
	var sibling []string
	for _, p := range targets[1] {
		sibling = append(sibling, p.nspid[1], p.nspid[2])
	}
	for who, sess := range map[string]*client.Session{"an exec in child 0": nil, "child 0's session": kids[0]} {
		r := probeFrom(t, d, res.Sandboxes[0].ID, sess, sibling)
		r.reached(t, who)
		for pid, a := range r.Pids {
			env, _ := a["environ_text"].(string)
			if a["foreign"] == true || strings.Contains(env, m+"-1") {
				t.Errorf("%s reached a process of child 1 by the number %s: %v", who, pid, a)
			}
		}
	}
	for _, c := range res.Sandboxes {
		if err := d.c.Delete(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// Each fork walls the parent interpreter off from its copies with a
// Landlock layer, and Landlock stacks 16: a session forks 16 times (each
// child answering), the 17th is refused with 409 saying so and making
// nothing, and a restart starts over.
func TestLiveForkSixteenTimesPerInterpreter(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	_, s := sandboxWithForkable(t, d)
	forkOnce := func(i int) error {
		kids, res, err := s.Fork(ctx, 1)
		if err != nil {
			return err
		}
		if ex, err := kids[0].Run(ctx, "1 + 1"); err != nil || ex.Text() != "2" {
			t.Fatalf("fork %d: the child: %+v %v", i, ex, err)
		}
		return d.c.Delete(ctx, res.Sandboxes[0].ID)
	}
	for i := 1; i <= 16; i++ {
		if err := forkOnce(i); err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
	}
	err := forkOnce(17)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 409 || !strings.Contains(e.Message, "16") {
		t.Fatalf("the 17th fork: %v, want 409 naming the limit", err)
	}
	if list, err := d.c.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("sandboxes after the refused fork: %v %v", list, err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := forkOnce(1); err != nil {
		t.Fatalf("a fork after a restart: %v", err)
	}
}

// A copy is the interpreter, whole, in its child: libc's idea of its own
// thread (what pthread_kill, raise and abort use) names it, there.
func TestLiveForkCopyKnowsItsOwnThread(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	_, s := sandboxWithForkable(t, d)
	const code = "import signal, threading\nsignal.pthread_kill(threading.main_thread().ident, 0)\nsignal.raise_signal(0)\n'ok'"
	if ex, err := s.Run(ctx, code); err != nil || ex.Text() != "'ok'" {
		t.Fatalf("in the parent (the control): %+v %v", ex, err)
	}
	kids, _, err := s.Fork(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range kids {
		if ex, err := k.Run(ctx, code); err != nil || ex.Text() != "'ok'" {
			t.Errorf("in child %d: %+v %v", i, ex.Error, err)
		}
	}
}

// A live fork's child outlives what ends its parent's interpreter: its
// copy is in no process group or session of the parent's (the daemon
// kills the interpreter's process group at a timeout, a restart and the
// session's delete), and answers after each.
func TestLiveForkChildOutlivesItsParentsInterpreter(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	_, parent := sandboxWithForkable(t, d)
	if ex, err := parent.Run(ctx, "x = 41"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	kids, _, err := parent.Fork(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	answers := func(when string) {
		t.Helper()
		for i, k := range kids {
			if ex, err := k.Run(ctx, "x + 1"); err != nil || ex.Status != api.ExecOK || ex.Text() != "42" {
				t.Fatalf("child %d after %s: %+v %v", i, when, ex, err)
			}
		}
	}
	ex, err := parent.Run(ctx, "import os\nos.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid()")
	if err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	for i, k := range kids {
		got, err := k.Run(ctx, "import os\nos.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid()")
		if err != nil || got.Status != api.ExecOK || got.Text() != "(True, True)" {
			t.Errorf("child %d: its own session and process group: %+v %v, want (True, True) (the parent's: %s)", i, got, err, ex.Text())
		}
	}
	if err := parent.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	answers("the parent's restart")
	if err := parent.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	answers("the parent's delete")
}
