package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// Channels between requests of one function: each test below makes one
// request leave or offer something and another (concurrent or next) look
// for it, after proving within the first request that the channel works.

// heldRequest starts a request that signals readiness by naming itself
// mark (prctl PR_SET_NAME, seen from the host in /proc/*/comm) and then
// waits until the test releases it (a file the host writes into the
// function's entry directory, which the sandbox sees read-only at
// /tine/fn). wait returns its answer.
type heldRequest struct {
	t    *testing.T
	dir  string
	mark string
	wg   sync.WaitGroup
	done chan struct{}
	inv  *api.Invocation
}

// holdPrelude is the handler code heldRequest needs: ready() then held().
const holdPrelude = `
import ctypes, os, time
_libc = ctypes.CDLL(None, use_errno=True)

def ready_and_held(mark):
    _libc.prctl(15, mark.encode(), 0, 0, 0)  # PR_SET_NAME
    deadline = time.monotonic() + 50
    while not os.path.exists("/tine/fn/release-" + mark) and time.monotonic() < deadline:
        time.sleep(0.01)
`

func hold(t *testing.T, d *daemon, entry, name string, payload map[string]any) *heldRequest {
	t.Helper()
	h := &heldRequest{t: t, dir: filepath.Dir(entry), mark: "held" + marker()[:8], done: make(chan struct{})}
	payload["mark"] = h.mark
	h.wg.Go(func() { defer close(h.done); h.inv = invoke(t, d, name, payload) })
	ready := testbin.Eventually(patience, func() bool {
		select {
		case <-h.done:
			return true // answered before it was ready: a failure, shown below
		default:
		}
		return len(procsNamed(h.mark)) > 0
	})
	select {
	case <-h.done:
		ready = false
	default:
	}
	if !ready {
		inv := h.release()
		t.Fatalf("the held request never said it was ready (no process named %s); its answer: %+v", h.mark, inv)
	}
	return h
}

func (h *heldRequest) release() *api.Invocation {
	if err := os.WriteFile(filepath.Join(h.dir, "release-"+h.mark), nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.wg.Wait()
	return h.inv
}

// procsNamed returns the host pids whose comm is name.
func procsNamed(name string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == name {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

const ipcHandler = holdPrelude + `
import errno
IPC_CREAT, IPC_NOWAIT, GETVAL, SETVAL = 0o1000, 0o4000, 12, 16
KEY = 0x7e57
MQ = b"/tine-test"
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.mq_receive.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mq_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]

class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]

def fail(what):
    raise OSError(ctypes.get_errno(), what + ": " + os.strerror(ctypes.get_errno()))

def read_all(shm, msq, sem, mq, n):
    # What each object holds; reading a message takes it, so put sends two.
    out = {}
    if shm >= 0:
        out["shm"] = ctypes.string_at(_libc.shmat(shm, None, 0), n).decode(errors="replace")
    if msq >= 0:
        m = Msg()
        if _libc.msgrcv(msq, ctypes.byref(m), 64, 0, IPC_NOWAIT) >= 0:
            out["msg"] = m.mtext.decode(errors="replace")
    if sem >= 0:
        out["sem"] = _libc.semctl(sem, 0, GETVAL)
    if mq >= 0:
        buf = ctypes.create_string_buffer(8192)
        r = _libc.mq_receive(mq, buf, 8192, None)
        if r >= 0:
            out["mq"] = buf.raw[:r].decode(errors="replace")
    return out

def handler(e):
    secret = e["secret"].encode()
    if e["op"] == "put":
        shm = _libc.shmget(KEY, 4096, IPC_CREAT | 0o666)
        shm >= 0 or fail("shmget")
        ctypes.memmove(_libc.shmat(shm, None, 0), secret, len(secret))
        msq = _libc.msgget(KEY, IPC_CREAT | 0o666)
        msq >= 0 or fail("msgget")
        for _ in range(2):
            _libc.msgsnd(msq, ctypes.byref(Msg(1, secret)), 64, 0) == 0 or fail("msgsnd")
        sem = _libc.semget(KEY, 1, IPC_CREAT | 0o666)
        sem >= 0 or fail("semget")
        _libc.semctl(sem, 0, SETVAL, 42) == 0 or fail("semctl")
        # A POSIX queue is a file of the IPC namespace's mqueue mount,
        # which Landlock may not let a request create.
        mq = _libc.mq_open(MQ, os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o666, None)
        refused = None if mq >= 0 else errno.errorcode[ctypes.get_errno()]
        for _ in range(2 if mq >= 0 else 0):
            _libc.mq_send(mq, secret, len(secret), 0) == 0 or fail("mq_send")
        # Within the request, each object works: read back by a second
        # lookup of its key or name.
        mine = read_all(_libc.shmget(KEY, 0, 0), _libc.msgget(KEY, 0), _libc.semget(KEY, 0, 0),
                        _libc.mq_open(MQ, os.O_RDONLY | os.O_NONBLOCK), len(secret))
        if refused:
            mine["mq_refused"] = refused
        if e.get("mark"):
            ready_and_held(e["mark"])
        return mine  # nothing removed: left behind, for the next request to find
    # get: another request looks the objects up by key and name.
    return read_all(_libc.shmget(KEY, 0, 0), _libc.msgget(KEY, 0), _libc.semget(KEY, 0, 0),
                    _libc.mq_open(MQ, os.O_RDONLY | os.O_NONBLOCK), len(secret))
`

// Requests of one function cannot pass data through SysV shared memory,
// message queues, semaphores or POSIX message queues: neither to a
// concurrent request nor to the next one (each request has an IPC
// namespace of its own, gone with it, objects and all); nor can the
// runtime pool's scripts.
func TestFunctionRequestsShareNoSysVIPC(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	entry := writeHandler(t, ipcHandler)
	putFunction(t, d, api.FunctionSpec{Name: "ipc", Entry: entry, Concurrency: 2})
	secret := "s3cret-" + marker()
	want := map[string]any{"shm": secret, "msg": secret, "sem": float64(42)}
	checkMine := func(who string, inv *api.Invocation) {
		t.Helper()
		mine := resultOf[map[string]any](t, inv)
		for k, v := range want {
			if mine[k] != v {
				t.Errorf("%s: within the request, %s read back %v, want %v: the attempt proves nothing", who, k, mine[k], v)
			}
		}
		// A POSIX queue either works within the request or cannot be made
		// at all (Landlock refuses the file in the mqueue mount).
		if mine["mq"] != secret && mine["mq_refused"] != "EACCES" {
			t.Errorf("%s: a POSIX message queue neither worked nor was refused: %v", who, mine)
		}
	}
	checkNone := func(who string, inv *api.Invocation) {
		t.Helper()
		if found := resultOf[map[string]any](t, inv); len(found) > 0 {
			t.Errorf("%s found another request's IPC objects: %v", who, found)
		}
	}

	held := hold(t, d, entry, "ipc", map[string]any{"op": "put", "secret": secret})
	checkNone("a concurrent request", invoke(t, d, "ipc", map[string]any{"op": "get", "secret": secret}))
	checkMine("the holder", held.release())
	checkNone("the next request", invoke(t, d, "ipc", map[string]any{"op": "get", "secret": secret}))

	// The pool: one script leaves them, another looks.
	put, err := d.c.PutScript(ctx, []byte(ipcHandler))
	if err != nil {
		t.Fatal(err)
	}
	get, err := d.c.PutScript(ctx, []byte(ipcHandler+"\n# the looker\n"))
	if err != nil {
		t.Fatal(err)
	}
	payload := func(op string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"op": op, "secret": secret})
		return b
	}
	inv, err := d.c.InvokeScript(ctx, put.Digest, payload("put"))
	if err != nil {
		t.Fatal(err)
	}
	checkMine("a pool script", inv)
	if inv, err = d.c.InvokeScript(ctx, get.Digest, payload("get")); err != nil {
		t.Fatal(err)
	}
	checkNone("another pool script", inv)
}

const netHandler = holdPrelude + `
import socket, errno
PORT = 47001
ABSTRACT = "\0tine-test-net"
FILES = ["/tmp/tine-test.sock", "/dev/shm/tine-test.sock"]

def attempt(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def unix_connect(addr):
    c = socket.socket(socket.AF_UNIX)
    c.connect(addr)
    c.send(b"hello")
    c.close()
    return "connected"

def tcp_connect():
    c = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    c.send(b"hello")
    c.close()
    return "connected"

def udp_send():
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.sendto(b"hello", ("127.0.0.1", PORT))
    c.close()
    return "sent"

def connect_all():
    out = {"tcp": attempt(tcp_connect), "udp": attempt(udp_send), "abstract": attempt(lambda: unix_connect(ABSTRACT))}
    for p in FILES:
        out[p] = attempt(lambda: unix_connect(p))
    return out

def received(listeners):
    # Whatever has arrived, without waiting.
    out = {}
    for name, s in listeners.items():
        s.setblocking(False)
        try:
            if s.type == socket.SOCK_DGRAM:
                out[name] = s.recv(64).decode()
            else:
                c, _ = s.accept()
                c.settimeout(5)
                out[name] = c.recv(64).decode()
        except BlockingIOError:
            pass
    return out

def handler(e):
    if e["op"] == "connect":
        return connect_all()
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", PORT))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", PORT))
    listeners = {"tcp": tcp, "udp": udp}
    for name in [ABSTRACT] + FILES:
        s = socket.socket(socket.AF_UNIX)
        s.bind(name)
        s.listen(8)
        listeners["abstract" if name == ABSTRACT else name] = s
    # Within the request, every listener is reachable.
    mine = {"connect": connect_all(), "received": received(listeners)}
    ready_and_held(e["mark"])
    return {"mine": mine, "from_others": received(listeners)}
`

// Concurrent requests of one function cannot reach each other over
// loopback TCP or UDP, abstract unix sockets, or unix socket files: each
// request has a network namespace (and /tmp, /dev/shm) of its own, unless
// the spec says network = "shared".
func TestFunctionRequestsShareNoLoopback(t *testing.T) {
	require.Landlock(t, 6)
	d := startDaemon(t)
	entry := writeHandler(t, netHandler)
	putFunction(t, d, api.FunctionSpec{Name: "net", Entry: entry, Concurrency: 2})
	held := hold(t, d, entry, "net", map[string]any{"op": "listen"})
	tried := resultOf[map[string]string](t, invoke(t, d, "net", map[string]any{"op": "connect"}))
	type listened struct {
		Mine struct {
			Connect  map[string]string
			Received map[string]string
		}
		FromOthers map[string]string `json:"from_others"`
	}
	got := resultOf[listened](t, held.release())
	channels := []string{"tcp", "udp", "abstract", "/tmp/tine-test.sock", "/dev/shm/tine-test.sock"}
	for _, ch := range channels {
		if got.Mine.Received[ch] != "hello" {
			t.Errorf("within the request, %s did not carry a message (connect: %s): the attempt proves nothing", ch, got.Mine.Connect[ch])
		}
		if v, ok := got.FromOthers[ch]; ok {
			t.Errorf("a concurrent request reached the listener over %s: it received %q", ch, v)
		}
	}
	if tried["tcp"] == "connected" {
		t.Errorf("a concurrent request connected to the other's TCP listener on 127.0.0.1")
	}
	t.Logf("the concurrent request's attempts: %v", tried)

	// network = "shared" says they may: the same attempt then carries.
	putFunction(t, d, api.FunctionSpec{Name: "netshared", Entry: entry, Concurrency: 2, Network: "shared"})
	held = hold(t, d, entry, "netshared", map[string]any{"op": "listen"})
	tried = resultOf[map[string]string](t, invoke(t, d, "netshared", map[string]any{"op": "connect"}))
	got = resultOf[listened](t, held.release())
	for _, ch := range []string{"tcp", "udp"} {
		if got.FromOthers[ch] != "hello" {
			t.Errorf("network shared: the concurrent request's %s message did not arrive (%v, its attempts %v)", ch, got.FromOthers, tried)
		}
	}
}

// A runtime-exec request cannot leave anything outside its own /tmp and
// /dev/shm for the next one: a trojan /usr/local/bin/ls (or a file in /var,
// /etc, /root) fails with permission denied, and what it wrote where it
// may (its private /tmp, /dev/shm) the next request does not see.
func TestWarmExecRequestsShareNoRoot(t *testing.T) {
	d := startDaemon(t)
	paths := "/usr/local/bin/ls /var/planted /etc/planted /root/planted /tmp/planted /dev/shm/planted"
	putFunction(t, d, api.FunctionSpec{Name: "plant", Runtime: "exec", Command: []string{"sh", "-c", `
read mode
for p in ` + paths + `; do
  case $mode in
  plant) if err=$( { echo trojan > $p; } 2>&1 ); then echo "wrote $p $(cat $p)"; else echo "refused $p: $err"; fi ;;
  look) if [ -e $p ]; then echo "sees $p"; fi ;;
  esac
done
echo done`}})
	call := func(mode string) string {
		t.Helper()
		inv, err := d.c.InvokeRaw(context.Background(), "plant", []byte(mode+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := base64.StdEncoding.DecodeString(inv.ResultBase64)
		if inv.Status != api.StatusOK || !strings.HasSuffix(string(out), "done\n") {
			t.Fatalf("%s: status %s %+v, output %q, stderr %q", mode, inv.Status, inv.Error, out, inv.Stderr)
		}
		return string(out)
	}
	planted := call("plant")
	for _, p := range []string{"/tmp/planted", "/dev/shm/planted"} {
		if !strings.Contains(planted, "wrote "+p+" trojan\n") {
			t.Errorf("the request could not write its own %s: the attempt proves nothing:\n%s", p, planted)
		}
	}
	for _, p := range strings.Fields(paths)[:4] {
		if !strings.Contains(planted, "refused "+p+": ") || !strings.Contains(planted, "Permission denied") {
			t.Errorf("writing %s did not fail with permission denied:\n%s", p, planted)
		}
	}
	if seen := call("look"); strings.Contains(seen, "sees") {
		t.Errorf("the next request sees what the first one wrote:\n%s", seen)
	}
}

// A runtime-exec command's ending is its answer: exit code, signal, a
// command that is not there; it does not inherit Python's ignored SIGPIPE.
func TestWarmExecEndings(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		command []string
		status  string
		code    int
		stderr  string
	}{
		{"exit3", []string{"sh", "-c", "echo out; exit 3"}, api.StatusError, 3, ""},
		{"killed", []string{"sh", "-c", "kill -9 $$"}, api.StatusCrashed, 137, ""},
		{"missing", []string{"/no/such/program"}, api.StatusError, 127, "/no/such/program: No such file or directory"},
		// yes dies of SIGPIPE when head has its line; with SIGPIPE ignored
		// it would complain of a broken pipe.
		{"sigpipe", []string{"sh", "-c", "yes | head -1"}, api.StatusOK, 0, ""},
	} {
		putFunction(t, d, api.FunctionSpec{Name: c.name, Runtime: "exec", Command: c.command})
		inv, err := d.c.InvokeRaw(ctx, c.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if inv.Status != c.status || inv.ExitCode == nil || *inv.ExitCode != c.code || !strings.Contains(inv.Stderr, c.stderr) {
			code := -1
			if inv.ExitCode != nil {
				code = *inv.ExitCode
			}
			t.Errorf("%s: status %s, exit code %d, error %+v, stderr %q; want %s, %d, stderr with %q", c.name, inv.Status, code, inv.Error, inv.Stderr, c.status, c.code, c.stderr)
		}
		if c.name == "sigpipe" && inv.Stderr != "" {
			t.Errorf("yes | head: stderr %q (SIGPIPE ignored in the command?)", inv.Stderr)
		}
	}
	// Its environment is the sandbox's default, nothing of the Python that
	// spawned it (which sets LC_CTYPE when it coerces the C locale).
	putFunction(t, d, api.FunctionSpec{Name: "env", Runtime: "exec", Command: []string{"env"}})
	inv, err := d.c.InvokeRaw(ctx, "env", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := base64.StdEncoding.DecodeString(inv.ResultBase64)
	var keys []string
	for line := range strings.Lines(string(out)) {
		k, _, _ := strings.Cut(line, "=")
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"HOME", "HOSTNAME", "PATH"}) {
		t.Errorf("the command's environment:\n%s", out)
	}
}

// A pool script cannot read another registered script: the scripts are
// not in the pool's sandbox; each request is handed its own.
func TestScriptsCannotReadEachOther(t *testing.T) {
	d := startDaemon(t, "--pool-preload", "json")
	ctx := context.Background()
	secret := "secret-" + marker()
	victim, err := d.c.PutScript(ctx, []byte("SECRET = '"+secret+"'\ndef handler(e):\n    return SECRET\n"))
	if err != nil {
		t.Fatal(err)
	}
	snoop, err := d.c.PutScript(ctx, []byte(`import os
def handler(e):
    # Every mount point, and a scripts directory beneath it: where the
    # victim's <digest>.py (or .pyc) could be.
    looked, found = [], {}
    for line in open("/proc/self/mountinfo"):
        mp = line.split()[4]
        for d in (mp, os.path.join(mp, "scripts")):
            looked.append(d)
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                if n.startswith(e["digest"]):
                    try:
                        found[os.path.join(d, n)] = open(os.path.join(d, n), "rb").read().decode(errors="replace")
                    except OSError as x:
                        found[os.path.join(d, n)] = repr(x)
    return {"looked": looked, "found": found}
`))
	if err != nil {
		t.Fatal(err)
	}
	// The victim runs (and has its code cached) first.
	inv, err := d.c.InvokeScript(ctx, victim.Digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultOf[string](t, inv); got != secret {
		t.Fatalf("the victim script answered %q", got)
	}
	b, _ := json.Marshal(map[string]string{"digest": victim.Digest})
	if inv, err = d.c.InvokeScript(ctx, snoop.Digest, b); err != nil {
		t.Fatal(err)
	}
	r := resultOf[struct {
		Looked []string
		Found  map[string]string
	}](t, inv)
	if len(r.Looked) < 4 {
		t.Fatalf("the snoop looked only in %v: the attempt proves nothing", r.Looked)
	}
	for path, content := range r.Found {
		t.Errorf("a script read another's %s: %q", path, content)
	}
}

const ptyHandler = holdPrelude + `
import errno

def handler(e):
    if e["op"] == "read":
        found = {}
        for n in os.listdir("/dev/pts"):
            if not n.isdigit():
                continue
            try:
                fd = os.open("/dev/pts/" + n, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
                found[n] = os.read(fd, 64).decode(errors="replace")
            except OSError as x:
                found[n] = errno.errorcode.get(x.errno, str(x.errno))
        return found
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    _libc.grantpt(master)
    _libc.unlockpt(master)
    _libc.ptsname.restype = ctypes.c_char_p
    name = _libc.ptsname(master).decode()
    os.write(master, ((e["secret"] + "\n") * 2).encode())
    # Within the request its terminal works: one line read back, one left.
    fd = os.open(name, os.O_RDWR | os.O_NOCTTY)
    mine = os.read(fd, 64).decode()
    ready_and_held(e["mark"])
    return {"pts": name, "mine": mine}
`

// A request cannot read (or type into) another's pseudo-terminal: each
// request has a devpts instance of its own.
func TestFunctionRequestsShareNoPTY(t *testing.T) {
	d := startDaemon(t)
	entry := writeHandler(t, ptyHandler)
	putFunction(t, d, api.FunctionSpec{Name: "pty", Entry: entry, Concurrency: 2})
	secret := "s3cret-" + marker()
	held := hold(t, d, entry, "pty", map[string]any{"op": "open", "secret": secret})
	found := resultOf[map[string]string](t, invoke(t, d, "pty", map[string]any{"op": "read"}))
	mine := resultOf[map[string]string](t, held.release())
	if mine["mine"] != secret+"\n" {
		t.Errorf("within the request, its terminal %s read back %q: the attempt proves nothing", mine["pts"], mine["mine"])
	}
	for n, v := range found {
		if strings.Contains(v, secret) {
			t.Errorf("a concurrent request read the other's /dev/pts/%s: %q", n, v)
		}
	}
}

const procHandler = holdPrelude + `
def handler(e):
    open("/tmp/mine", "w").write("private")
    if e["op"] == "hold":
        ready_and_held(e["mark"])
        return os.getpid()
    def attempt(path):
        try:
            if path.endswith("/tmp"):
                return sorted(os.listdir(path))
            return open(path, "rb").read(64).decode(errors="replace")
        except OSError as x:
            return x.strerror
    # Its own, through /proc/self: the way in works.
    out = {"self": {p: attempt("/proc/self/" + p) for p in ("root/tmp", "environ")}}
    sib = "/proc/%d/" % e["pid"]
    out["sibling"] = {p: attempt(sib + p) for p in ("root/tmp", "cwd/tmp", "environ", "mem", "maps", "ns/net", "ns/ipc")}
    return out
`

// A request cannot get at a concurrent one's private /tmp, memory,
// environment or namespaces through /proc/<pid> (the zygote and its
// requests are undumpable, and Landlock scopes ptrace).
func TestFunctionRequestsCannotReachSiblingsThroughProc(t *testing.T) {
	d := startDaemon(t)
	entry := writeHandler(t, procHandler)
	putFunction(t, d, api.FunctionSpec{Name: "proc", Entry: entry, Concurrency: 2})
	held := hold(t, d, entry, "proc", map[string]any{"op": "hold"})
	pids := procsNamed(held.mark)
	if len(pids) != 1 {
		held.release()
		t.Fatalf("processes named %s: %v, want the held request", held.mark, pids)
	}
	// The sandbox's pid for it: its NSpid's last field.
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/status")
	var inner string
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "NSpid:" {
			inner = f[len(f)-1]
		}
	}
	n, _ := strconv.Atoi(inner)
	r := resultOf[struct{ Self, Sibling map[string]any }](t, invoke(t, d, "proc", map[string]any{"op": "look", "pid": n}))
	held.release()
	if tmp, _ := r.Self["root/tmp"].([]any); len(tmp) != 1 || tmp[0] != "mine" {
		t.Errorf("the request could not list its own /proc/self/root/tmp (%v): the attempt proves nothing", r.Self)
	}
	for path, v := range r.Sibling {
		if v != "Permission denied" {
			t.Errorf("/proc/<sibling %d>/%s: %v, want permission denied", n, path, v)
		}
	}
}

// A runtime-exec request cannot read a concurrent one's environment or
// memory map (dumpable after its execve, as every command is, but in a
// Landlock domain of its own, which scopes ptrace and /proc access).
func TestWarmExecRequestsCannotReadEachOther(t *testing.T) {
	d := startDaemon(t)
	mark := marker()
	putFunction(t, d, api.FunctionSpec{Name: "peek", Runtime: "exec", Concurrency: 2, Limits: api.FunctionLimits{TimeoutSeconds: 30}, Command: []string{"sh", "-c", `
read mode
if [ "$mode" = hold ]; then exec ` + strings.Join(sleeper(mark)[2:], " ") + `; fi
for p in /proc/[0-9]*; do
  if grep -q ` + sleeperArg(mark) + ` $p/cmdline 2>/dev/null && [ "$(cat $p/comm)" = sleep ]; then
    for f in environ maps; do
      if out=$(head -c 40 $p/$f 2>&1); then echo "read $f"; else echo "refused $f: $out"; fi
    done
  fi
done
# Its own, for comparison: the way in works.
head -c 40 /proc/self/environ >/dev/null && echo "own environ"
echo done`}})
	var wg sync.WaitGroup
	wg.Go(func() { d.c.InvokeRaw(context.Background(), "peek", []byte("hold\n")) })
	if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) > 0 }) {
		t.Fatal("the holding request never started its sleep")
	}
	inv, err := d.c.InvokeRaw(context.Background(), "peek", []byte("look\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range hostProcs(sleeperArg(mark)) {
		syscall.Kill(pid, syscall.SIGKILL) // the holder is done
	}
	wg.Wait()
	out, _ := base64.StdEncoding.DecodeString(inv.ResultBase64)
	s := string(out)
	if !strings.Contains(s, "own environ\n") || !strings.Contains(s, " environ: ") && !strings.Contains(s, "read environ") {
		t.Fatalf("the look did not run or did not find the holder:\n%s", s)
	}
	if strings.Contains(s, "read ") {
		t.Errorf("a request read a concurrent one's /proc files:\n%s", s)
	}
}
