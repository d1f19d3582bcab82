package security

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// hostListener counts what reaches a host listener.
type hostListener struct {
	addr     string
	accepted atomic.Int32
}

// listenHost starts a host stream listener on network/address and counts
// its connections until the test ends.
func listenHost(t *testing.T, network, address string) *hostListener {
	t.Helper()
	l, err := net.Listen(network, address)
	if err != nil {
		t.Fatalf("listen on the host (%s %s): %v", network, address, err)
	}
	t.Cleanup(func() { l.Close() })
	h := &hostListener{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Close()
		}
	}()
	return h
}

// connectProbe tries each "family address" line of its argv and prints
// "connected ADDR" or "refused ADDR errno".
const connectProbe = `import socket, sys
for spec in sys.argv[1:]:
    fam, addr = spec.split(" ", 1)
    if fam == "unix":
        s, a = socket.socket(socket.AF_UNIX), addr.replace("@", "\0", 1)
    elif fam == "udp":
        host, port = addr.rsplit(":", 1)
        s, a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), (host, int(port))
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        a = (host.strip("[]"), int(port))
    s.settimeout(5)
    try:
        if fam == "udp":
            s.sendto(b"tine-escape", a)
            s.recv(16)
        else:
            s.connect(a)
        print("connected", spec)
    except OSError as e:
        print("refused", spec, e.errno)
`

// TestHostListenersUnreachable connects from inside to listeners the test
// opens on the host: TCP on the host's own external address, TCP on ::1, UDP on 127.0.0.1 (an echo), an abstract
// unix socket, a unix socket at a path the sandbox sees through its
// read-only base (/var/tmp), and the daemon's own socket placed there too.
// The control: the same probe on the host
// reaches every one of them; inside, none (each sandbox has its own network
// namespace, so its own abstract names; a socket file seen through the
// overlay is not the host's socket). test/integration's
// TestHostLoopbackUnreachable does TCP on 127.0.0.1.
func TestHostListenersUnreachable(t *testing.T) {
	gate(t)
	t.Parallel()
	// /var/tmp is on the host's root, which every sandbox sees read-only.
	shared, err := os.MkdirTemp("/var/tmp", "tine-security-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	d := startDaemonAt(t, filepath.Join(shared, "tine.sock"))
	abstract := "@tine-security-" + marker()
	pathSock := filepath.Join(shared, "host.sock")
	listeners := map[string]*hostListener{
		"unix " + abstract: listenHost(t, "unix", abstract),
		"unix " + pathSock: listenHost(t, "unix", pathSock),
	}
	var specs []string
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		l.Close()
		v6 := listenHost(t, "tcp6", "[::1]:0")
		listeners["tcp "+v6.addr] = v6
	} else {
		t.Logf("no ::1 on this host (%v): the IPv6 loopback attempt is not made", err)
	}
	// The host's own non-loopback address, where a listener on all
	// addresses answers: only lo exists inside, so it is unreachable.
	if ip := hostAddress(); ip != "" {
		all := listenHost(t, "tcp4", "0.0.0.0:0")
		_, port, _ := net.SplitHostPort(all.addr)
		listeners["tcp "+ip+":"+port] = all
	} else {
		t.Logf("no non-loopback IPv4 address on this host: that attempt is not made")
	}
	udp := udpEcho(t)
	specs = append(specs, "udp "+udp.addr, "unix "+d.sock)
	for spec := range listeners {
		specs = append(specs, spec)
	}
	out, err := hostPython(append([]string{"-c", connectProbe}, specs...)...)
	if err != nil {
		t.Fatalf("the probe on the host: %v\n%s", err, out)
	}
	for _, spec := range specs {
		if want := "connected " + spec + "\n"; !strings.Contains(out, want) {
			t.Errorf("control: on the host, %s is not reachable:\n%s", spec, out)
		}
	}
	// The control's connections may still be on their way to Accept: the
	// counts are taken once every listener has seen its own.
	if !testbin.Eventually(patience, func() bool {
		for _, l := range listeners {
			if l.accepted.Load() == 0 {
				return false
			}
		}
		return udp.received.Load() > 0
	}) {
		t.Fatalf("control: a host listener did not accept the host's own connection within %s", patience)
	}
	hostHits := map[string]int32{}
	for spec, l := range listeners {
		hostHits[spec] = l.accepted.Load()
	}
	udpHits := udp.received.Load()

	r := tineRun(t, append([]string{"--", python, "-c", connectProbe}, specs...)...)
	for _, spec := range specs {
		if !strings.Contains(r.Stdout, "refused "+spec+" ") {
			t.Errorf("inside, %s: want refused\n%s", spec, r)
		}
	}
	for spec, l := range listeners {
		if l.accepted.Load() != hostHits[spec] {
			t.Errorf("the host listener %s accepted a connection from inside", spec)
		}
	}
	if udp.received.Load() != udpHits {
		t.Errorf("the host's UDP socket %s received a datagram from inside", udp.addr)
	}
}

// udpListener is a host UDP echo that counts datagrams.
type udpListener struct {
	addr     string
	received atomic.Int32
}

func udpEcho(t *testing.T) *udpListener {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	u := &udpListener{addr: c.LocalAddr().String()}
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			u.received.Add(1)
			c.WriteTo(buf[:n], from)
		}
	}()
	return u
}

// hostPython runs python3 on the host.
func hostPython(args ...string) (string, error) {
	out, err := execCombined(python, args...)
	return out, err
}

// TestDesktopsApart attacks one desktop from another: desktop A lists the
// windows of the X server it reaches at :0 (its X socket path and the
// abstract @/tmp/.X11-unix/X0), B's SysV shared memory (where X clients
// share pixels with the server), and writes the guest binary that every desktop runs
// (bound from the host at /tine/bin/tine). The control: from B, the same
// listing shows B's window and B's segment; the guest binary exists in A.
func TestDesktopsApart(t *testing.T) {
	gate(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "xterm")
	require.Binary(t, "xwininfo")
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	title := "only-in-b-" + marker()
	a, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480})
	if err != nil {
		t.Fatalf("create desktop a: %v", err)
	}
	b, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480, Apps: [][]string{{"xterm", "-title", title}}})
	if err != nil {
		t.Fatalf("create desktop b: %v", err)
	}
	probe := `for dpy in :0 unix:0 unix:/tmp/.X11-unix/X0; do echo "== $dpy"; xwininfo -display $dpy -root -tree 2>&1; done
python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0/tmp/.X11-unix/X0"); print("abstract-x0 connected")
except OSError as e:
    print("abstract-x0", e)
EOF
ipcs -m | awk '$1 ~ /^0x/ && $1 != "0x00000000" {print "shm-key", $1}'
ls -la /tine/bin/tine && echo guest-exists
(echo '#!/bin/sh' > /tine/bin/tine) 2>/dev/null && echo GUEST-WRITTEN
true`
	run := func(id string) string {
		res, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", probe}})
		if err != nil {
			t.Fatalf("exec in %s: %v", id, err)
		}
		return string(res.Stdout) + string(res.Stderr)
	}
	// B makes a SysV shared memory segment with a key of its own.
	if res, err := d.c.Exec(ctx, b.ID, &api.ExecRequest{Argv: []string{"ipcmk", "-M", "4096"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("control: ipcmk in desktop b: %v %+v", err, res)
	}
	inB, inA := run(b.ID), run(a.ID)
	var keyB string
	for _, l := range strings.Split(inB, "\n") {
		if k, ok := strings.CutPrefix(l, "shm-key "); ok {
			keyB = k
		}
	}
	if !strings.Contains(inB, title) || keyB == "" {
		t.Fatalf("control: desktop b does not see its own window %q and its shared memory segment:\n%s", title, inB)
	}
	if strings.Contains(inA, "shm-key "+keyB) {
		t.Errorf("desktop a sees desktop b's SysV shared memory (key %s):\n%s", keyB, inA)
	}
	if !strings.Contains(inA, "guest-exists") || !strings.Contains(inA, "Root window id") || !strings.Contains(inA, "abstract-x0 connected") {
		t.Fatalf("control: in desktop a the probe did not run, or reached no X server at all (its own):\n%s", inA)
	}
	if strings.Contains(inA, title) {
		t.Errorf("desktop a reaches desktop b's X server (its window %q):\n%s", title, inA)
	}
	for _, out := range []string{inA, inB} {
		if strings.Contains(out, "GUEST-WRITTEN") {
			t.Errorf("a desktop overwrote the guest binary every desktop runs:\n%s", out)
		}
	}
	if guest, err := os.ReadFile(filepath.Join(filepath.Dir(tineBin), "tine-guest")); err == nil && strings.HasPrefix(string(guest), "#!") {
		t.Errorf("the host's tine-guest was overwritten")
	}
}

// execCombined runs a host command and returns its combined output.
func execCombined(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestSandboxesApartOnTheNetwork: a sandbox listens on an abstract unix
// socket and on TCP 127.0.0.1; another sandbox of the same daemon tries
// both. The control: inside the listening sandbox both connect; from the
// other, neither (each has its own network namespace).
func TestSandboxesApartOnTheNetwork(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	a, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := "@tine-neighbour-" + marker()
	listen := `import socket, os
u = socket.socket(socket.AF_UNIX); u.bind("` + strings.Replace(name, "@", `\0`, 1) + `"); u.listen()
s = socket.socket(); s.bind(("127.0.0.1", 47113)); s.listen()
open("/tmp/listening", "w").close()
while True:
    for l in (u, s):
        l.settimeout(0.05)
        try: l.accept()[0].close()
        except OSError: pass`
	go d.c.Exec(ctx, a.ID, &api.ExecRequest{Argv: []string{python, "-c", listen}})
	if !testbin.Eventually(patience, func() bool {
		_, err := d.c.Stat(ctx, a.ID, "/tmp/listening")
		return err == nil
	}) {
		t.Fatal("the listener in sandbox a never started")
	}
	specs := []string{"unix " + name, "tcp 127.0.0.1:47113"}
	try := func(id string) string {
		res, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: append([]string{python, "-c", connectProbe}, specs...)})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout) + string(res.Stderr)
	}
	inA, inB := try(a.ID), try(b.ID)
	for _, spec := range specs {
		if !strings.Contains(inA, "connected "+spec) {
			t.Errorf("control: inside sandbox a, its own %s does not connect:\n%s", spec, inA)
		}
		if !strings.Contains(inB, "refused "+spec+" ") {
			t.Errorf("sandbox b reached sandbox a's %s:\n%s", spec, inB)
		}
	}
}

// hostAddress is the host's first non-loopback IPv4 address, or "".
func hostAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}
