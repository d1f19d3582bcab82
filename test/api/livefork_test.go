package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// cellJSON runs code whose last line is an expression of JSON text
// (json.dumps(...)) and decodes that into v.
func cellJSON(t *testing.T, s *client.Session, code string, v any) {
	t.Helper()
	i := strings.LastIndexByte(code, '\n')
	ex, err := s.Run(context.Background(), code[:i+1]+"print("+code[i+1:]+")")
	if err != nil || ex.Status != api.ExecOK {
		if ex != nil && ex.Error != nil {
			t.Fatalf("cell %q: %s: %s\n%s", code, ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
		}
		t.Fatalf("cell %q: %+v %v", code, ex, err)
	}
	if err := json.Unmarshal([]byte(ex.Stdout), v); err != nil {
		t.Fatalf("cell %q: output %q is not JSON: %v", code, ex.Stdout, err)
	}
}

// The live fork of a session: each child sandbox holds a copy of the
// session's state at the fork (a variable, an import, the working
// directory, an open file re-opened at its offset), the parent goes on,
// and each child is a sandbox of its own: its own processes, /tmp and
// writable layer, its own random draws, the walls of an exec, and no way
// to reach the parent or a sibling.
func TestLiveForkCarriesStateIntoIsolatedChildren(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mark := "TINE_LIVEFORK_TEST=" + marker()
	parent, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{mark}, Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	setup := `import json, os, random, colorsys
x = 41
os.makedirs('/lfdata', exist_ok=True)
os.chdir('/lfdata')
f = open('/lfdata/data.txt', 'w+')
f.write('hello world\n')
f.flush()
f.seek(6)
json.dumps({"pid": os.getpid(), "fd": f.fileno()})`
	var before struct{ Pid, Fd int }
	cellJSON(t, parent, setup, &before)

	const n = 3
	kids, res, err := parent.Fork(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != n || len(res.Sandboxes) != n {
		t.Fatalf("fork made %d sessions and %d sandboxes, want %d", len(kids), len(res.Sandboxes), n)
	}
	// The parent goes on, its file where it was.
	var after struct {
		X    int    `json:"x"`
		Rest string `json:"rest"`
	}
	cellJSON(t, parent, `json.dumps({"x": x + 1, "rest": f.read()})`, &after)
	if after.X != 42 || after.Rest != "world\n" {
		t.Fatalf("the parent after the fork: %+v", after)
	}

	type state struct {
		X      int    `json:"x"`
		Mod    string `json:"mod"`
		Cwd    string `json:"cwd"`
		Tell   int    `json:"tell"`
		Rest   string `json:"rest"`
		PidNS  string `json:"pidns"`
		Draw   float64
		FDs    []string `json:"fds"`
		Others []string `json:"others"`
	}
	probe := `import sys
st = {"x": x, "mod": colorsys.__name__, "cwd": os.getcwd(), "tell": f.tell(), "rest": f.read(),
      "pidns": os.readlink('/proc/self/ns/pid'), "Draw": random.random()}
st["fds"] = []
for fd in os.listdir('/proc/self/fd'):
    try:
        st["fds"].append(os.readlink('/proc/self/fd/%s' % fd))
    except OSError:
        pass  # the listing's own
st["others"] = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            nspid = [l for l in open('/proc/%s/status' % p) if l.startswith('NSpid:')][0].split()[1:]
        except (OSError, IndexError):
            continue
        if len(nspid) > 1:  # a process of a pid namespace nested in this one
            st["others"].append(p + " " + " ".join(nspid))
json.dumps(st)`
	var parentState state
	cellJSON(t, parent, probe, &parentState)
	if len(parentState.Others) < n {
		// The negative control of "cannot see": nested pid namespaces are
		// listed in the parent's /proc (docs/security.md), so the listing
		// finds the copies there.
		t.Fatalf("the parent sees %d processes of other pid namespaces, want at least the %d copies: %v", len(parentState.Others), n, parentState.Others)
	}
	seenNS := map[string]string{parentState.PidNS: "parent"}
	draws := map[float64]string{parentState.Draw: "parent"}
	for i, k := range kids {
		var st state
		cellJSON(t, k, probe, &st)
		if st.X != 41 || st.Mod != "colorsys" || st.Cwd != "/lfdata" || st.Tell != 6 || st.Rest != "world\n" {
			t.Errorf("child %d did not carry the state: %+v", i, st)
		}
		if who, ok := seenNS[st.PidNS]; ok {
			t.Errorf("child %d shares its pid namespace with %s", i, who)
		}
		seenNS[st.PidNS] = fmt.Sprint("child ", i)
		if who, ok := draws[st.Draw]; ok {
			t.Errorf("child %d drew the same random number as %s", i, who)
		}
		draws[st.Draw] = fmt.Sprint("child ", i)
		if len(st.Others) > 0 {
			t.Errorf("child %d sees processes of other pid namespaces: %v", i, st.Others)
		}
		// Nothing of the parent's descriptors: its control socket and
		// pipes are the copy's own, the file is re-opened, /dev/null too.
		var sockets, pipes int
		for _, l := range st.FDs {
			switch {
			case strings.HasPrefix(l, "socket:"):
				sockets++
			case strings.HasPrefix(l, "pipe:"):
				pipes++
			case l == "/lfdata/data.txt", l == "/dev/null", strings.HasPrefix(l, "/proc/"):
			default:
				t.Errorf("child %d holds an undocumented descriptor: %s", i, l)
			}
		}
		if sockets != 1 || pipes != 2 {
			t.Errorf("child %d holds %d sockets and %d pipes, want its control socket and its stdout and stderr: %v", i, sockets, pipes, st.FDs)
		}
	}
	if hosts := unparked(withEnv(mark)); len(hosts) != n+1 {
		t.Fatalf("want the parent interpreter and %d copies as distinct host processes, found %v", n, hosts)
	}

	// Private layers and /tmp: what one child writes, nobody else sees.
	ex, err := kids[0].Run(ctx, "open('/tmp/mine', 'w').write('0'); open('/lfdata/mine', 'w').write('0'); f.seek(0); f.write('CHILD'); f.flush()")
	if err != nil || ex.Status != api.ExecOK {
		t.Fatalf("child 0 writes: %+v %v", ex, err)
	}
	for name, s := range map[string]*client.Session{"parent": parent, "child 1": kids[1], "child 2": kids[2]} {
		var seen struct {
			Tmp, Layer bool
			Head       string
		}
		cellJSON(t, s, `json.dumps({"Tmp": os.path.exists('/tmp/mine'), "Layer": os.path.exists('/lfdata/mine'), "Head": open('/lfdata/data.txt').read(5)})`, &seen)
		if seen.Tmp || seen.Layer || seen.Head != "hello" {
			t.Errorf("%s sees child 0's writes: %+v", name, seen)
		}
	}

	// Signals, ptrace and memory: the parent's interpreter is pid P in the
	// parent's namespace; in a child that number is absent or one of the
	// child's own processes. The same calls work on the child itself (the
	// negative control: they ran).
	reach := fmt.Sprintf(`import ctypes, signal
libc = ctypes.CDLL(None, use_errno=True)
def attempts(pid):
    out = {}
    try:
        mine = os.readlink('/proc/%%d/ns/pid' %% pid) == os.readlink('/proc/self/ns/pid')
    except OSError:
        mine = None
    out["mine"] = mine
    try:
        os.kill(pid, 0); out["kill"] = "ok"
    except OSError as e:
        out["kill"] = e.__class__.__name__
    try:
        with open('/proc/%%d/mem' %% pid, 'rb') as m:
            out["mem"] = "ok"
    except OSError as e:
        out["mem"] = e.__class__.__name__
    r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    out["ptrace"] = "ok" if r == 0 else os.strerror(ctypes.get_errno())
    if r == 0:
        libc.ptrace(17, pid, None, None)
    return out
json.dumps({"parent": attempts(%d), "self": attempts(os.getpid())})`, before.Pid)
	for i, k := range kids {
		var got struct{ Parent, Self map[string]any }
		cellJSON(t, k, reach, &got)
		if got.Self["kill"] != "ok" || got.Self["mem"] != "ok" {
			t.Fatalf("child %d: the calls do not work on itself (negative control): %v", i, got.Self)
		}
		if got.Parent["mine"] == false || (got.Parent["mine"] == nil && (got.Parent["kill"] == "ok" || got.Parent["mem"] == "ok" || got.Parent["ptrace"] == "ok")) {
			t.Errorf("child %d reached the parent's pid %d: %v", i, before.Pid, got.Parent)
		}
	}

	// The walls of an exec in the child: capabilities, no_new_privs,
	// seccomp, and Landlock by its effect: making a device node, which
	// tine's Landlock rules grant nowhere (EACCES, checked before the
	// kernel's own refusal in a user namespace, EPERM). The parent's
	// interpreter, with no domain and CAP_MKNOD, makes one: the negative
	// control that the probe sees Landlock.
	const devProbe = `
import stat
try:
    os.mknod('/tmp/tine-lf-probe', stat.S_IFCHR | 0o600, os.makedev(1, 3)); os.unlink('/tmp/tine-lf-probe'); dev = 'created'
except OSError as e:
    dev = '%s %s' % (e.__class__.__name__, e.errno)
`
	status := "''.join(l for l in open('/proc/self/status') if l.split(':')[0] in ('CapEff', 'CapBnd', 'NoNewPrivs', 'Seccomp'))"
	var parentWalls struct{ Status, Dev string }
	cellJSON(t, parent, devProbe+"json.dumps({'Status': "+status+", 'Dev': dev})", &parentWalls)
	if parentWalls.Dev != "created" {
		t.Fatalf("the forkable parent cannot make a device node (negative control of the Landlock check): %s", parentWalls.Dev)
	}
	for i, k := range kids {
		r, err := d.c.Exec(ctx, res.Sandboxes[i].ID, &api.ExecRequest{Argv: []string{"python3", "-c", "import os, json\n" + devProbe + "print(json.dumps({'Status': " + status + ", 'Dev': dev}), end='')"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec in child %d: %+v %v", i, r, err)
		}
		var execWalls, copyWalls struct{ Status, Dev string }
		if err := json.Unmarshal(r.Stdout, &execWalls); err != nil {
			t.Fatalf("exec in child %d: %q", i, r.Stdout)
		}
		cellJSON(t, k, devProbe+"json.dumps({'Status': "+status+", 'Dev': dev})", &copyWalls)
		if !strings.Contains(execWalls.Status, "Seccomp:\t2") || execWalls.Dev != "PermissionError 13" {
			t.Fatalf("the exec's walls in child %d are not what this test expects: %+v", i, execWalls)
		}
		if copyWalls != execWalls {
			t.Errorf("child %d's session walls differ from an exec's:\nsession %+v\nexec    %+v", i, copyWalls, execWalls)
		}
	}

	// Each child is a sandbox like any other: listed, exec, files, new
	// sessions.
	list, err := d.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range res.Sandboxes {
		if !slices.ContainsFunc(list, func(s api.Sandbox) bool { return s.ID == c.ID }) {
			t.Errorf("child %d (%s) is not listed", i, c.ID)
		}
		rc, err := d.c.ReadFile(ctx, c.ID, "/lfdata/data.txt")
		if err != nil {
			t.Fatalf("files of child %d: %v", i, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if want := map[bool]string{true: "CHILD world\n", false: "hello world\n"}[i == 0]; string(b) != want {
			t.Errorf("child %d's file through the files API: %q, want %q", i, b, want)
		}
		fresh, err := d.c.CreateSession(ctx, c.ID, nil)
		if err != nil {
			t.Fatalf("a new session in child %d: %v", i, err)
		}
		if ex, err := fresh.Run(ctx, "1 + 1"); err != nil || ex.Text() != "2" {
			t.Errorf("a new session in child %d: %+v %v", i, ex, err)
		}
	}

	// A child's files fork too: a replica of child 0 has what it wrote.
	rep, err := d.c.ForkSandbox(ctx, res.Sandboxes[0].ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork of child 0's files: %v", err)
	}
	if got := strings.TrimSpace(sh(t, d.c, rep.Sandboxes[0].ID, "cat /lfdata/mine")); got != "0" {
		t.Errorf("the replica of child 0 has /lfdata/mine = %q, want 0", got)
	}
	if err := d.c.Delete(ctx, rep.Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}

	// The parent cannot go while its forks live: they would die with it.
	err = d.c.Delete(ctx, sb.ID)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 409 || !strings.Contains(ae.Message, res.Sandboxes[0].ID) {
		t.Fatalf("deleting the parent with live forks: %v, want 409 naming them", err)
	}
	for _, c := range res.Sandboxes {
		if err := d.c.Delete(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if left := withEnv(mark); len(left) > 0 {
		t.Fatalf("interpreters left after their sandboxes went: %v", left)
	}
}

// A live fork that cannot happen is refused before anything is made: a
// session not created forkable, a running cell (not queued), what the
// interpreter holds that a copy cannot carry (named), a count over the
// daemon's capacity; each leaves no sandbox, snapshot or process behind.
func TestLiveForkRefusalsLeaveNothingBehind(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes=3")
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mark := "TINE_LIVEFORK_REFUSED=" + marker()
	plain, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{mark}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{mark}, Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	nothingMade := func(what string) {
		t.Helper()
		list, err := d.c.List(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: sandboxes after the refusal: %v %v", what, list, err)
		}
		if snaps, err := d.c.Snapshots(ctx); err != nil || len(snaps) != 0 {
			t.Fatalf("%s: snapshots after the refusal: %v %v", what, snaps, err)
		}
		if procs := unparked(withEnv(mark)); len(procs) != 2 {
			t.Fatalf("%s: processes with the mark after the refusal: %v, want the two interpreters", what, procs)
		}
	}
	refused := func(what string, sess *client.Session, count, status int, says string) {
		t.Helper()
		_, _, err := sess.Fork(ctx, count)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != status || !strings.Contains(e.Message, says) {
			t.Fatalf("%s: %v, want HTTP %d saying %q", what, err, status, says)
		}
		nothingMade(what)
	}
	refused("a session not created forkable", plain, 1, 409, "forkable")
	refused("over capacity", s, 3, 429, "")

	// A running cell: 409 at once.
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, "import os, time\nwhile not os.path.exists('/tmp/go'): time.sleep(0.01)")
		done <- err
	}()
	go func() {
		for {
			if info, err := s.Info(ctx); err == nil && info.State == api.SessionBusy {
				close(started)
				return
			}
		}
	}()
	<-started
	refused("a running cell", s, 1, 409, "running a cell")
	// Let the cell end (an interrupt could come before it runs, and be ignored).
	if r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"touch", "/tmp/go"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("touch /tmp/go: %+v %v", r, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ what, hold, says, release string }{
		{"a thread", "import threading\nev = threading.Event()\nth = threading.Thread(target=ev.wait)\nth.start()", "thread", "ev.set(); th.join()"},
		{"a socket", "import socket\nsk = socket.socket()", "socket", "sk.close()"},
		{"a child process", "import subprocess\npr = subprocess.Popen(['sleep', '60'])", "child process", "pr.kill(); pr.wait()"},
		{"anonymous shared memory", "import mmap\nsh = mmap.mmap(-1, 4096)", "shared memory", "sh.close()"},
		{"a private mapping of a file in /tmp", "import mmap\nopen('/tmp/p', 'wb').write(b'p' * 4096)\npf = open('/tmp/p', 'rb')\npm = mmap.mmap(pf.fileno(), 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)", "/tmp/p", "pm.close(); pf.close()"},
		{"a read-only shared mapping of a file in /tmp", "import mmap\nopen('/tmp/m', 'wb').write(b'm' * 4096)\nmf = open('/tmp/m', 'rb')\nsh = mmap.mmap(mf.fileno(), 4096, prot=mmap.PROT_READ)", "/tmp/m", "sh.close(); mf.close()"},
	} {
		if ex, err := s.Run(ctx, c.hold); err != nil || ex.Status != api.ExecOK {
			t.Fatalf("%s: %+v %v", c.what, ex, err)
		}
		_, _, err := s.Fork(ctx, 1)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 409 || !strings.Contains(e.Message, c.says) {
			t.Fatalf("fork holding %s: %v, want 409 naming it", c.what, err)
		}
		if ex, err := s.Run(ctx, c.release); err != nil || ex.Status != api.ExecOK {
			t.Fatalf("%s: %+v %v", c.what, ex, err)
		}
		nothingMade("holding " + c.what)
	}
	// Released, the same session forks (the refusals were about what it held).
	kids, _, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatalf("the fork once nothing is held: %v", err)
	}
	if ex, err := kids[0].Run(ctx, "1 + 1"); err != nil || ex.Text() != "2" {
		t.Fatalf("the child: %+v %v", ex, err)
	}
	// A fork that went through is no pass for the next once a cell ran
	// (the daemon skips the check between forks without one): a thread
	// started since refuses it.
	hold := "import threading\nev = threading.Event()\nth = threading.Thread(target=ev.wait)\nth.start()"
	if ex, err := s.Run(ctx, hold); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("a thread after the fork: %+v %v", ex, err)
	}
	var e *client.Error
	if _, _, err := s.Fork(ctx, 1); !errors.As(err, &e) || e.Status != 409 || !strings.Contains(e.Message, "thread") {
		t.Fatalf("a fork after a cell that started a thread: %v, want 409 naming it", err)
	}
	if ex, err := s.Run(ctx, "ev.set(); th.join()"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("the thread's end: %+v %v", ex, err)
	}
	// The CLI: tine session fork prints each child's ID/SID.
	sock := "--socket=" + d.sock
	if _, err := s.Run(ctx, "y = 6 * 7"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tineBin, "session", "fork", sock, "-n", "1", s.ID).CombinedOutput()
	child := strings.TrimSpace(string(out))
	if err != nil || strings.Count(child, "/") != 1 {
		t.Fatalf("tine session fork: %v %q", err, out)
	}
	if out, err := exec.Command(tineBin, "session", "run", sock, child, "-c", "y").CombinedOutput(); err != nil || string(out) != "42\n" {
		t.Fatalf("tine session run in the CLI's fork: %v %q", err, out)
	}
}

// A fork that fails halfway is all or none: with a pids limit that leaves
// the first copy no room for its second fork, the fork fails saying why,
// and no child sandbox, snapshot or copy is left; the parent goes on.
func TestLiveForkFailingHalfwayLeavesNothing(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	// PID 1, the interpreter's reaper and the interpreter: one pid left.
	sb, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{Pids: 4}})
	if err != nil {
		t.Fatal(err)
	}
	mark := "TINE_LIVEFORK_HALFWAY=" + marker()
	s, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{mark}, Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := s.Run(ctx, "x = 41"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	_, _, err = s.Fork(ctx, 2)
	var e *client.Error
	if !errors.As(err, &e) || e.Status < 400 || !strings.Contains(e.Message, "fork") {
		t.Fatalf("the fork with no pids left: %v, want it refused saying why", err)
	}
	if list, err := d.c.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("sandboxes after the failed fork: %v %v", list, err)
	}
	if snaps, err := d.c.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots after the failed fork: %v %v", snaps, err)
	}
	if procs := unparked(withEnv(mark)); len(procs) != 1 {
		t.Fatalf("processes with the mark after the failed fork: %v, want the parent interpreter only", procs)
	}
	if ex, err := s.Run(ctx, "x + 1"); err != nil || ex.Text() != "42" {
		t.Fatalf("the parent after the failed fork: %+v %v", ex, err)
	}
}
