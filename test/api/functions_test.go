package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// writeHandler writes a handler file into a fresh directory and returns
// its path.
func writeHandler(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "handler.py")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func putFunction(t *testing.T, d *daemon, spec api.FunctionSpec) {
	t.Helper()
	if _, err := d.c.PutFunction(context.Background(), &spec); err != nil {
		t.Fatalf("put function %s: %v", spec.Name, err)
	}
}

func invoke(t *testing.T, d *daemon, name string, payload any) *api.Invocation {
	t.Helper()
	b, _ := json.Marshal(payload)
	inv, err := d.c.Invoke(context.Background(), name, b)
	if err != nil {
		t.Fatalf("invoke %s: %v", name, err)
	}
	return inv
}

func resultOf[T any](t *testing.T, inv *api.Invocation) T {
	t.Helper()
	var v T
	if inv.Status != api.StatusOK {
		t.Fatalf("status %s: %+v (stderr %q)", inv.Status, inv.Error, inv.Stderr)
	}
	if err := json.Unmarshal(inv.Result, &v); err != nil {
		t.Fatalf("result %s: %v", inv.Result, err)
	}
	return v
}

const hygieneHandler = `
import os, random, uuid, signal, ctypes, time, errno

def handler(event):
    me = os.getpid()
    mine = "/tmp/req-%s" % event["tag"]
    open(mine, "w").write("x")
    time.sleep(event.get("sleep", 0))
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass
    # Every other process in the sandbox: the zygote, PID 1, siblings.
    others, signalled, traced = [], [], []
    libc = ctypes.CDLL(None, use_errno=True)
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == me:
            continue
        others.append(int(p))
        try:
            os.kill(int(p), signal.SIGCONT)
            signalled.append(int(p))
        except PermissionError:
            pass
        except ProcessLookupError:
            pass
        if libc.ptrace(16, int(p), 0, 0) == 0:  # PTRACE_ATTACH
            traced.append(int(p))
    walls = {}
    # The sandbox's root outlives the request: writing there would reach
    # the next request (a planted module). Only /tmp and /dev/shm are its.
    for path in ("/usr/lib/planted.py", "/etc/planted", "/run/planted"):
        try:
            open(path, "w").write("x")
            walls["write " + path] = 0
        except OSError as e:
            walls["write " + path] = e.errno
    open("/dev/shm/mine", "w").write("x")
    walls["unshare"] = libc.unshare(0x00020000) == 0 or ctypes.get_errno()
    walls["mount"] = libc.mount(b"tmpfs", b"/mnt", b"tmpfs", 0, None) == 0 or ctypes.get_errno()
    return {
        "pid": me, "ppid": os.getppid(), "tmp": sorted(os.listdir("/tmp")),
        "random": random.random(), "uuid": str(uuid.uuid4()), "urandom": os.urandom(16).hex(),
        "fds": fds, "others": others, "signalled": signalled, "traced": traced, "walls": walls,
    }
`

type hygiene struct {
	Pid, Ppid         int
	Tmp               []string
	Random            float64
	UUID, Urandom     string
	Fds               map[string]string
	Others, Signalled []int
	Traced            []int
	Walls             map[string]any
}

// Sibling hygiene: concurrent and consecutive requests of one function get
// distinct pids, private /tmp, fresh random state, none of the zygote's
// descriptors, and cannot signal or ptrace the zygote, PID 1 or a sibling.
func TestFunctionHygiene(t *testing.T) {
	require.Landlock(t, 6) // signal scoping keeps a request from signalling the zygote
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "hyg", Entry: writeHandler(t, hygieneHandler), Preload: []string{"json", "random", "uuid"}})

	var wg sync.WaitGroup
	res := make([]hygiene, 2)
	for i := range res {
		wg.Go(func() {
			res[i] = resultOf[hygiene](t, invoke(t, d, "hyg", map[string]any{"tag": i, "sleep": 0.5}))
		})
	}
	wg.Wait()
	next := resultOf[hygiene](t, invoke(t, d, "hyg", map[string]any{"tag": "next"}))
	all := append(res, next)
	a, b := res[0], res[1]
	if t.Failed() {
		return
	}
	if a.Pid == b.Pid || a.Pid == next.Pid {
		t.Errorf("pids not distinct: %d %d %d", a.Pid, b.Pid, next.Pid)
	}
	for i, r := range all {
		tag := fmt.Sprint(i)
		if i == 2 {
			tag = "next"
		}
		if len(r.Tmp) != 1 || r.Tmp[0] != "req-"+tag {
			t.Errorf("request %s sees /tmp %v, want only its own file", tag, r.Tmp)
		}
		for fd, target := range r.Fds {
			if strings.HasPrefix(target, "socket:") || (fd != "0" && fd != "1" && fd != "2" && fd != "3" && !strings.HasPrefix(target, "/proc/")) {
				t.Errorf("request %s holds fd %s -> %s (a zygote descriptor?)", tag, fd, target)
			}
		}
		// The negative checks ran: the zygote (its parent) was in sight.
		if !contains(r.Others, r.Ppid) {
			t.Errorf("request %s did not see its zygote %d among %v: the signal check proves nothing", tag, r.Ppid, r.Others)
		}
		if len(r.Signalled) > 0 {
			t.Errorf("request %s could signal %v (zygote %d)", tag, r.Signalled, r.Ppid)
		}
		if len(r.Traced) > 0 {
			t.Errorf("request %s could ptrace %v", tag, r.Traced)
		}
		for k, v := range r.Walls {
			want := float64(syscall.EPERM)
			if strings.HasPrefix(k, "write ") {
				want = float64(syscall.EACCES) // Landlock's answer
			}
			if v != want {
				t.Errorf("request %s: %s gave %v, want %v", tag, k, v, want)
			}
		}
	}
	// The concurrent two overlapped: each saw the other.
	if !contains(a.Others, b.Pid) && !contains(b.Others, a.Pid) {
		t.Errorf("the concurrent requests never saw each other (%d, %d): sibling checks prove nothing", a.Pid, b.Pid)
	}
	seen := map[string]bool{}
	for _, r := range all {
		for _, v := range []string{fmt.Sprint(r.Random), r.UUID, r.Urandom} {
			if seen[v] {
				t.Errorf("random draw %s repeated across requests", v)
			}
			seen[v] = true
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A handler's exception, a timeout, an OOM and a crash each come back as
// their status, and the function keeps working after each.
func TestFunctionFailures(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "f", Entry: writeHandler(t, `
import os, time
def handler(e):
    kind = e["kind"]
    if kind == "raise":
        raise ValueError("bad value %d" % 42)
    if kind == "sleep":
        time.sleep(30)
    if kind == "hog":
        b = bytearray(512 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
    if kind == "crash":
        os._exit(3)
    if kind == "print":
        print("to stdout")
        import sys; print("to stderr", file=sys.stderr)
    return kind
`), Limits: api.FunctionLimits{MemoryBytes: 64 << 20, TimeoutSeconds: 1}})
	ok := func() {
		t.Helper()
		if r := resultOf[string](t, invoke(t, d, "f", map[string]string{"kind": "print"})); r != "print" {
			t.Fatalf("after a failure: result %q", r)
		}
	}
	ok()
	inv := invoke(t, d, "f", map[string]string{"kind": "raise"})
	if inv.Status != api.StatusError || inv.Error == nil || inv.Error.Type != "ValueError" || !strings.Contains(inv.Error.Traceback, "handler.py\", line 6") {
		t.Errorf("raise: %+v %+v", inv.Status, inv.Error)
	}
	ok()
	if inv := invoke(t, d, "f", map[string]string{"kind": "sleep"}); inv.Status != api.StatusTimeout {
		t.Errorf("sleep past the timeout: status %s", inv.Status)
	}
	ok()
	if inv := invoke(t, d, "f", map[string]string{"kind": "hog"}); inv.Status != api.StatusOOM {
		t.Errorf("512 MiB under a 64 MiB limit: status %s %+v", inv.Status, inv.Error)
	}
	ok()
	if inv := invoke(t, d, "f", map[string]string{"kind": "crash"}); inv.Status != api.StatusCrashed {
		t.Errorf("os._exit in the handler: status %s", inv.Status)
	}
	inv = invoke(t, d, "f", map[string]string{"kind": "print"})
	if inv.Stdout != "to stdout\n" || inv.Stderr != "to stderr\n" {
		t.Errorf("output: %q %q", inv.Stdout, inv.Stderr)
	}

	// The zygote killed from outside: the next call warms it again.
	f, err := d.c.Function(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	zygotes := childrenOf(f.Pid)
	if len(zygotes) != 1 {
		t.Fatalf("the function's PID 1 (%d) has children %v, want its one zygote", f.Pid, zygotes)
	}
	// Its spares: children forked and walled in ahead, waiting for requests.
	var spares []int
	if !testbin.Eventually(patience, func() bool { spares = childrenOf(zygotes[0]); return len(spares) == 2 }) {
		t.Fatalf("the zygote %d has children %v, want 2 spares waiting", zygotes[0], spares)
	}
	syscall.Kill(zygotes[0], syscall.SIGKILL)
	// A spare dies with its zygote rather than wait forever.
	if !testbin.Eventually(patience, func() bool {
		for _, pid := range spares {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return false
			}
		}
		return true
	}) {
		t.Errorf("spares %v outlived their zygote", spares)
	}
	var again *api.Invocation
	testbin.Eventually(patience, func() bool {
		again = invoke(t, d, "f", map[string]string{"kind": "print"})
		return again.Status == api.StatusOK
	})
	if again.Status != api.StatusOK || !again.Timings.Cold {
		t.Errorf("after the zygote died: status %s, cold %v", again.Status, again.Timings.Cold)
	}

	// Bad input, each its own error; the function stays usable.
	bad := []struct {
		name string
		call func() error
		code api.ErrorCode
		says string
	}{
		{"missing handler", func() error {
			_, err := d.c.PutFunction(context.Background(), &api.FunctionSpec{Name: "g", Entry: writeHandler(t, "def other(e):\n    pass\n")})
			return err
		}, api.CodeInvalidArgument, "no function 'handler'"},
		{"syntax error", func() error {
			_, err := d.c.PutFunction(context.Background(), &api.FunctionSpec{Name: "g", Entry: writeHandler(t, "x = 1\ndef handler(e)\n    pass\n")})
			return err
		}, api.CodeInvalidArgument, "line 2"},
		{"a thread started at import", func() error {
			_, err := d.c.PutFunction(context.Background(), &api.FunctionSpec{Name: "g", Entry: writeHandler(t, "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\ndef handler(e):\n    pass\n")})
			return err
		}, api.CodeInvalidArgument, "started 1 threads"},
		{"a socket left open at import", func() error {
			_, err := d.c.PutFunction(context.Background(), &api.FunctionSpec{Name: "g", Entry: writeHandler(t, "import socket\nS = socket.socket()\ndef handler(e):\n    pass\n")})
			return err
		}, api.CodeInvalidArgument, "left a socket open"},
		{"unknown spec field", func() error {
			return callRaw(d, "PUT", "/v1/functions/g", `{"name":"g","entry":"/x.py","colour":"red"}`)
		}, api.CodeInvalidArgument, "colour"},
		{"malformed payload", func() error {
			return callRaw(d, "POST", "/v1/functions/f/invoke", `{"kind":`)
		}, api.CodeInvalidArgument, "not valid JSON"},
		{"payload over the limit", func() error {
			_, err := d.c.Invoke(context.Background(), "f", json.RawMessage(`"`+strings.Repeat("x", 17<<20)+`"`))
			return err
		}, api.CodeTooLarge, ""},
		{"unknown function", func() error {
			_, err := d.c.Invoke(context.Background(), "nope", nil)
			return err
		}, api.CodeNotFound, "nope"},
		{"unknown digest", func() error {
			_, err := d.c.InvokeScript(context.Background(), strings.Repeat("ab", 32), nil)
			return err
		}, api.CodeNotFound, "no script"},
	}
	for _, c := range bad {
		err := c.call()
		if client.ErrorCode(err) != c.code || !strings.Contains(fmt.Sprint(err), c.says) {
			t.Errorf("%s: got %v, want %s saying %q", c.name, err, c.code, c.says)
		}
	}
	ok()
}

// callRaw sends a body as is over the daemon's socket and returns its
// error answer as a *client.Error (nil for a 2xx).
func callRaw(d *daemon, method, path, body string) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	req, _ := http.NewRequest(method, "http://tine"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	return &client.Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
}

// childrenOf lists the host pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var p int
		if _, err := fmt.Sscan(e.Name(), &p); err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == fmt.Sprint(pid) {
			out = append(out, p)
		}
	}
	return out
}

// The runtime pool runs scripts registered by content; a syntax error is
// the call's error with its line, and the pool stays usable.
// A request's output: more than a pipe holds (the daemon reads it while
// the request runs, keeps the first MiB and says it cut the rest), and
// output a process the request left behind still holds when the reply
// comes (the answer does not wait for it: the process is killed).
func TestFunctionOutput(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "out", Entry: writeHandler(t, `
import os, subprocess, sys, time
def handler(e):
    if e == "flood":
        chunk = "x" * 65536
        for _ in range(48):  # 3 MiB, written as fast as the pipe takes it
            sys.stdout.write(chunk)
        sys.stdout.flush()
        print("done", file=sys.stderr)
    if e == "left":
        subprocess.Popen(["/bin/sh", "-c", "echo early; sleep 30; echo late"])
        time.sleep(0.2)
    return e
`), Limits: api.FunctionLimits{TimeoutSeconds: 5}})
	t0 := time.Now()
	inv := invoke(t, d, "out", "flood")
	if r := resultOf[string](t, inv); r != "flood" {
		t.Fatalf("flood: result %q", r)
	}
	if len(inv.Stdout) != 1<<20 || !inv.Truncated || inv.Stderr != "done\n" {
		t.Errorf("flood: %d bytes of stdout, truncated %v, stderr %q; want the first 1 MiB, truncated, \"done\"", len(inv.Stdout), inv.Truncated, inv.Stderr)
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("flood: took %s", took)
	}
	t0 = time.Now()
	inv = invoke(t, d, "out", "left")
	if r := resultOf[string](t, inv); r != "left" {
		t.Fatalf("left: result %q", r)
	}
	if inv.Stdout != "early\n" {
		t.Errorf("left: stdout %q, want what the leftover process wrote before the reply", inv.Stdout)
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("left: took %s: the answer waited for the leftover process", took)
	}
	if r := resultOf[string](t, invoke(t, d, "out", "plain")); r != "plain" {
		t.Fatalf("after: result %q", r)
	}
}

// A request that forks with a thread of its own running: its child has
// threading's state reset as Python's own fork hook does (only the forking
// thread left), though the zygote's children skip that hook's work.
func TestFunctionRequestForksWithAThread(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "fk", Entry: writeHandler(t, `
import os, threading
def handler(e):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        names = [x.name for x in threading.enumerate()]
        ok = names == [threading.main_thread().name] and not t.is_alive() and threading.current_thread() is threading.main_thread()
        os.write(w, ("%s %s" % (ok, names)).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 4096).decode()
    os.waitpid(pid, 0)
    stop.set()
    return {"child": got, "threads": len(threading.enumerate())}
`)})
	got := resultOf[struct {
		Child   string
		Threads int
	}](t, invoke(t, d, "fk", nil))
	if !strings.HasPrefix(got.Child, "True ") || got.Threads != 2 {
		t.Errorf("the request's child saw threading as %q (the request had %d threads): want only its own thread", got.Child, got.Threads)
	}
}

func TestScriptPool(t *testing.T) {
	d := startDaemon(t, "--pool-preload", "json,decimal")
	ctx := context.Background()
	var digests []string
	for i := range 3 {
		s, err := d.c.PutScript(ctx, fmt.Appendf(nil, "import decimal\ndef handler(e):\n    return str(decimal.Decimal(e) * %d)\n", i+1))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, s.Digest)
	}
	for i, dg := range digests {
		inv, err := d.c.InvokeScript(ctx, dg, json.RawMessage(`"1.5"`))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resultOf[string](t, inv), fmt.Sprint(1.5*float64(i+1)); !strings.HasPrefix(got, strings.TrimSuffix(want, ".0")) {
			t.Errorf("script %d: %s, want %s", i, got, want)
		}
	}
	// Compiled code is cached next to the script, handed over before any of
	// the script ran: the script finds the cache's descriptor closed.
	forger, err := d.c.PutScript(ctx, []byte("import os\ntry:\n    os.write(5, b'forged')\n    WROTE = True\nexcept OSError:\n    WROTE = False\ndef handler(e):\n    return WROTE\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		inv, err := d.c.InvokeScript(ctx, forger.Digest, nil)
		if err != nil {
			t.Fatal(err)
		}
		if wrote := resultOf[bool](t, inv); wrote {
			t.Errorf("call %d: the script wrote to the code cache's descriptor", i)
		}
		pyc := filepath.Join(d.dir, "data", "scripts", forger.Digest+".pyc")
		if !testbin.Eventually(patience, func() bool { _, err := os.Stat(pyc); return err == nil }) {
			t.Fatalf("no compiled code cached at %s: the check proves nothing", pyc)
		}
		if b, _ := os.ReadFile(pyc); bytes.HasPrefix(b, []byte("forged")) || len(b) < 16 {
			t.Errorf("the cache holds %q, not compiled code", b)
		}
	}

	s, err := d.c.PutScript(ctx, []byte("x = 1\n\ndef handler(e)\n    return 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := d.c.InvokeScript(ctx, s.Digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Status != api.StatusError || inv.Error == nil || inv.Error.Type != "SyntaxError" || inv.Error.Line != 3 {
		t.Errorf("syntax error: %s %+v", inv.Status, inv.Error)
	}
	if inv, _ := d.c.InvokeScript(ctx, digests[0], json.RawMessage(`"2"`)); inv == nil || inv.Status != api.StatusOK {
		t.Errorf("the pool after a bad script: %+v", inv)
	}
}

// Warm-exec: each request is a fresh process of the command, born in its
// own request cgroup; the payload is its stdin.
func TestWarmExec(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "cat", Runtime: "exec", Command: []string{"sh", "-c", "cat; echo; echo $$; grep memory /proc/self/cgroup"}})
	seen := map[string]bool{}
	for i := range 3 {
		inv, err := d.c.InvokeRaw(context.Background(), "cat", fmt.Appendf(nil, "payload %d", i))
		if err != nil {
			t.Fatal(err)
		}
		if inv.Status != api.StatusOK {
			t.Fatalf("status %s %+v", inv.Status, inv.Error)
		}
		out, _ := base64.StdEncoding.DecodeString(inv.ResultBase64)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 3 || lines[0] != fmt.Sprintf("payload %d", i) {
			t.Fatalf("output %q", out)
		}
		// The cgroup namespace is rooted at the function's cgroup: the
		// request's own group shows as /rN.
		if !requestCgroup.MatchString(lines[2]) {
			t.Errorf("request %d ran in cgroup %q, not a request group", i, lines[2])
		}
		if seen[lines[2]] {
			t.Errorf("request %d reused cgroup %s", i, lines[2])
		}
		seen[lines[2]] = true
	}
}

var requestCgroup = regexp.MustCompile(`:memory:/r[0-9]+$`)

// An idle function drops to cold after cold_after; the next call warms
// it again and says so.
func TestColdAfter(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "c", Entry: writeHandler(t, "def handler(e):\n    return e\n"), ColdAfterSeconds: 0.5})
	if inv := invoke(t, d, "c", 1); inv.Timings.Cold {
		t.Errorf("the first call after fn up says cold")
	}
	if !testbin.Eventually(patience, func() bool {
		f, err := d.c.Function(context.Background(), "c")
		return err == nil && f.State == "cold"
	}) {
		t.Fatal("the function never went cold")
	}
	inv := invoke(t, d, "c", 2)
	if !inv.Timings.Cold || inv.Timings.WarmMs <= 0 || resultOf[int](t, inv) != 2 {
		t.Errorf("the call after cold: cold %v, warm %.1f ms", inv.Timings.Cold, inv.Timings.WarmMs)
	}
}

// Node: workers started ahead serve one request each, with the same walls
// as a Python request (own cgroup, private /tmp, no signal to the zygote).
func TestNodeFunction(t *testing.T) {
	require.Binary(t, "node")
	d := startDaemon(t)
	dir := t.TempDir()
	entry := filepath.Join(dir, "handler.js")
	os.WriteFile(entry, []byte(`const fs = require("fs");
exports.handler = async (e) => {
  if (e.throw) throw new RangeError("bad " + e.throw);
  const before = fs.readdirSync("/tmp");
  fs.writeFileSync("/tmp/mine", "x");
  let signalled = true;
  try { process.kill(process.ppid, "SIGCONT"); } catch (err) { signalled = err.code; }
  console.log("hello");
  return { pid: process.pid, ppid: process.ppid, before, signalled, twice: e.n * 2 };
};
`), 0o644)
	putFunction(t, d, api.FunctionSpec{Name: "js", Runtime: "node", Entry: entry, Concurrency: 2})
	type reply struct {
		Pid, Ppid, Twice int
		Before           []string
		Signalled        any
	}
	var pids []int
	for i := range 3 {
		inv := invoke(t, d, "js", map[string]int{"n": i})
		r := resultOf[reply](t, inv)
		if r.Twice != 2*i || inv.Stdout != "hello\n" {
			t.Errorf("call %d: %+v stdout %q", i, r, inv.Stdout)
		}
		if len(r.Before) != 0 {
			t.Errorf("call %d sees /tmp %v from an earlier request", i, r.Before)
		}
		if r.Signalled != "EPERM" {
			t.Errorf("call %d signalling its zygote %d: %v, want EPERM", i, r.Ppid, r.Signalled)
		}
		pids = append(pids, r.Pid)
	}
	if pids[0] == pids[1] || pids[1] == pids[2] {
		t.Errorf("workers reused: pids %v", pids)
	}
	inv := invoke(t, d, "js", map[string]any{"throw": 7})
	if inv.Status != api.StatusError || inv.Error == nil || inv.Error.Type != "RangeError" || inv.Error.Line != 3 {
		t.Errorf("a throwing handler: %s %+v", inv.Status, inv.Error)
	}
	os.WriteFile(filepath.Join(dir, "other.js"), []byte("exports.nothere = 1;\n"), 0o644)
	_, err := d.c.PutFunction(context.Background(), &api.FunctionSpec{Name: "js2", Runtime: "node", Entry: filepath.Join(dir, "other.js")})
	if client.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `exports no function "handler"`) {
		t.Errorf("an entry without the handler: %v", err)
	}
}

// A function's sandbox counts against the host budget like any other:
// while it is warm it holds its share, cold or removed it gives it back.
func TestFunctionsCountAgainstTheBudget(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "1")
	ctx := context.Background()
	putFunction(t, d, api.FunctionSpec{Name: "b", Entry: writeHandler(t, "def handler(e):\n    return e\n"), ColdAfterSeconds: 1})
	_, err := d.c.Create(ctx, nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 429 || ce.Code != api.CodeCapacity || ce.RetryAfter <= 0 {
		t.Fatalf("a sandbox beside the warm function, budget 1: got %v, want 429 capacity", err)
	}
	// Cold, the function gives its share back.
	if !testbin.Eventually(patience, func() bool { f, err := d.c.Function(ctx, "b"); return err == nil && f.State == "cold" }) {
		t.Fatal("the function never went cold")
	}
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatalf("a sandbox once the function is cold: %v", err)
	}
	// Now the function cannot warm: its call says so, 429 with Retry-After.
	_, err = d.c.Invoke(ctx, "b", []byte("1"))
	if !errors.As(err, &ce) || ce.Status != 429 || ce.Code != api.CodeCapacity || ce.RetryAfter <= 0 {
		t.Fatalf("a call that must warm past the budget: got %v, want 429 capacity", err)
	}
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if inv := invoke(t, d, "b", 7); inv.Status != api.StatusOK || !inv.Timings.Cold {
		t.Fatalf("the call after the sandbox went: %+v", inv)
	}
	if err := d.c.DeleteFunction(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool { sb, err := d.c.Create(ctx, nil); return err == nil && d.c.Delete(ctx, sb.ID) == nil }) {
		t.Fatal("the removed function still holds its share")
	}
}

// The daemon starts the zygote with LD_BIND_NOW (so the dynamic linker
// binds every function there, not in each request); the agent drops it
// before the function's code runs: neither a request nor a program it
// starts has it, and the zygote's own environment is left as it was.
func TestFunctionEnvironmentHasNoneOfTheZygotes(t *testing.T) {
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "env", Entry: writeHandler(t, `import os, subprocess

def handler(e):
    child = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    return {"own": sorted(os.environ), "child": sorted(l.split("=", 1)[0] for l in child.splitlines())}
`)})
	got := resultOf[map[string][]string](t, invoke(t, d, "env", nil))
	for _, who := range []string{"own", "child"} {
		if len(got[who]) == 0 || slices.ContainsFunc(got[who], func(k string) bool { return strings.HasPrefix(k, "LD_") }) {
			t.Errorf("the request's %s environment: %v", who, got[who])
		}
	}
}

// The zygote gives random's fork hook a fast path (Random.seed with no
// argument on a plain Random); every other seeding is the original's: a
// request draws what python3 draws outside tine from the same seeds, and
// a generator reseeded from entropy forgets its pending gauss value.
func TestFunctionRandomSeedsAsPythonDoes(t *testing.T) {
	require.Binary(t, "python3")
	const draws = `import random

class Sub(random.Random):
    pass

def draws():
    random.seed(7)
    out = [random.random(), random.Random(42).random(), random.Random("abc").random(), Sub(5).random()]
    r = random.Random(3)
    r.seed(11, version=1)
    out.append(r.random())
    r.gauss(0, 1)
    r.seed()
    out.append(r.gauss_next is None)
    s = Sub(1)
    s.gauss(0, 1)
    s.seed()
    out.append(s.gauss_next is None)
    return out
`
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "rnd", Entry: writeHandler(t, draws+"\ndef handler(e):\n    return draws()\n")})
	got, err := json.Marshal(resultOf[[]any](t, invoke(t, d, "rnd", nil)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command("python3", "-I", "-c", draws+"\nimport json\nprint(json.dumps(draws()))\n").Output()
	if err != nil {
		t.Fatal(err)
	}
	var w []any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if wb, _ := json.Marshal(w); string(got) != string(wb) {
		t.Errorf("a request drew %s; python3 draws %s", got, wb)
	}
}
