package network

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/network/nettest"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/vishvananda/netlink"
)

// testNet is a daemon's network under a name and pool of the test's own,
// with peers: a DNS server, hosts A and B, and a link-local "metadata"
// host, all in namespaces the test made.
type testNet struct {
	m        *Manager
	dnsHost  *nettest.Host
	a, b     *nettest.Host
	metadata *nettest.Host
	tag      string
}

// newHost makes a test host for t's lifetime.
func newHost(t *testing.T, link string, hostSide, addr netip.Addr) *nettest.Host {
	t.Helper()
	h, err := nettest.NewHost(link, hostSide, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	require.Root(t)
	require.Feature(t, "nftables")
	require.Binary(t, "curl")
	tag := "t" + nettest.RandTag(4)
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256)), 0}), 24)
	sub := byte(rand.IntN(60)) * 4 // a /30 of 203.0.113.0/24 per peer
	peer := func(i byte) (hostSide, addr netip.Addr) {
		return netip.AddrFrom4([4]byte{203, 0, 113, sub + 1}), netip.AddrFrom4([4]byte{203, 0, 113, sub + 2 + i})
	}
	tn := &testNet{tag: tag}
	hs, da := peer(0)
	tn.dnsHost = newHost(t, tag+"d", hs, da)
	hs, aa := peer(1)
	tn.a = newHost(t, tag+"a", hs, aa)
	tn.b = newHost(t, tag+"b", netip.AddrFrom4([4]byte{198, 51, 100, sub + 1}), netip.AddrFrom4([4]byte{198, 51, 100, sub + 2}))
	// Link-local like cloud metadata (169.254.169.254 itself may be the
	// real one here: never routed by a test).
	tn.metadata = newHost(t, tag+"m", netip.AddrFrom4([4]byte{169, 254, 77, 1}), netip.MustParseAddr("169.254.77.77"))
	must(t, tn.dnsHost.ServeDNS(map[string]string{
		"a.test": tn.a.Addr.String(), "b.test": tn.b.Addr.String(), "www.b.test": tn.b.Addr.String(),
		"meta.test": tn.metadata.Addr.String(), "priv.test": "10.1.2.3",
	}))
	must(t, tn.a.ServeHTTP("a"))
	must(t, tn.b.ServeHTTP("b"))
	must(t, tn.metadata.ServeHTTP("metadata"))
	m, err := NewManager(Config{Name: tag, Pool: pool, Upstream: tn.dnsHost.Addr.String() + ":53",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tn.m = m
	t.Cleanup(m.Close)
	return tn
}

// egressBox is a live sandbox on an attachment.
type egressBox struct {
	sb  *sandbox.Sandbox
	att *Attachment
}

func (tn *testNet) sandbox(t *testing.T, allow, deny []string) *egressBox {
	t.Helper()
	p, err := ParsePolicy(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	att, err := tn.m.Attach(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Create(&sandbox.Spec{Seccomp: seccomp.Default, NetNS: att.NetNS()})
	if err != nil {
		att.Detach()
		t.Fatal(err)
	}
	// As the daemon does (through internal/inroot).
	must(t, os.WriteFile(sb.Root()+"/etc/resolv.conf", att.ResolvConf(), 0o644))
	eb := &egressBox{sb: sb, att: att}
	t.Cleanup(func() { sb.Destroy(); att.Detach() })
	return eb
}

// run runs a shell command in the sandbox: its output and exit code.
func (eb *egressBox) run(t *testing.T, script string) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := eb.sb.Exec(&sandbox.ExecSpec{Args: []string{"/bin/sh", "-c", script}, Stdio: [3]*os.File{nil, w, w}, Timeout: 30 * time.Second})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	o, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(out), o.ExitCode
}

// curl fetches url from inside; curl's exit code says how it failed (6:
// not resolved, 7: could not connect). --max-time only keeps a broken
// test from hanging: a refusal is a reset or ICMP error, at once.
func (eb *egressBox) curl(t *testing.T, url string) (string, int) {
	t.Helper()
	return eb.run(t, "curl -sS --max-time 10 "+url)
}

// hostGet fetches url from the host: the negative control that the peer
// is there.
func hostGet(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("from the host, %s: %v (the test's peer is not up)", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func wantOK(t *testing.T, what, out string, code int, body string) {
	t.Helper()
	if code != 0 || !strings.Contains(out, body) {
		t.Fatalf("%s: exit %d, %q; want %q", what, code, out, body)
	}
}

func wantFail(t *testing.T, what, out string, code int, wantCode int) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("%s: exit %d, %q; want curl's exit %d", what, code, out, wantCode)
	}
}

func TestEgressAllowlist(t *testing.T) {
	tn := newTestNet(t)
	eb := tn.sandbox(t, []string{"a.test", "meta.test", "priv.test"}, nil)
	aURL, bURL := "http://"+tn.a.Addr.String()+"/", "http://"+tn.b.Addr.String()+"/"
	if got := hostGet(t, bURL); got != "hello from b" {
		t.Fatalf("host to B: %q", got)
	}
	out, code := eb.curl(t, "http://a.test/")
	wantOK(t, "allowed name", out, code, "hello from a")
	out, code = eb.curl(t, aURL)
	wantOK(t, "an address the allowed name resolved to", out, code, "hello from a")

	out, code = eb.curl(t, "http://b.test/")
	wantFail(t, "a name not allowed", out, code, 6)
	out, code = eb.curl(t, bURL)
	wantFail(t, "a raw address never resolved", out, code, 7)

	// An allowed name whose answer points at a refused range (DNS
	// rebinding onto metadata or the host's networks) answers nothing.
	hostGet(t, "http://"+tn.metadata.Addr.String()+"/")
	out, code = eb.curl(t, "http://meta.test/")
	wantFail(t, "an allowed name resolving to link-local", out, code, 6)
	out, code = eb.curl(t, "http://"+tn.metadata.Addr.String()+"/")
	wantFail(t, "link-local raw", out, code, 7)
	out, code = eb.run(t, "getent hosts priv.test")
	if code == 0 {
		t.Fatalf("an allowed name resolving into 10/8 was answered: %q", out)
	}

	// Port rules: the name is answered, only the port opens.
	ep := tn.sandbox(t, []string{"b.test:81"}, nil)
	out, code = ep.curl(t, "http://b.test/")
	wantFail(t, "an allowed name on another port", out, code, 7)
	if out, code := ep.run(t, "getent hosts b.test"); code != 0 || !strings.Contains(out, tn.b.Addr.String()) {
		t.Fatalf("b.test:81 is allowed, so b.test resolves: exit %d %q", code, out)
	}
}

func TestEgressRefusesHostSandboxesAndMetadata(t *testing.T) {
	tn := newTestNet(t)
	open := tn.sandbox(t, nil, []string{"www.b.test"})
	other := tn.sandbox(t, nil, nil)

	// A host service on every address, the gateway's too.
	ln, err := net.Listen("tcp4", ":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host service") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// A service in the other sandbox: a socket in its namespace.
	var sln net.Listener
	must(t, nettest.InNS(other.att.NetNS(), func() (err error) { sln, err = net.Listen("tcp4", ":8080"); return err }))
	ssrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other sandbox") })}
	go ssrv.Serve(sln)
	defer ssrv.Close()

	// Negative controls: the open policy does reach the outside, by name
	// and raw; the host reaches its service and the other sandbox's.
	out, code := open.curl(t, "http://b.test/")
	wantOK(t, "open policy, by name", out, code, "hello from b")
	out, code = open.curl(t, "http://"+tn.a.Addr.String()+"/")
	wantOK(t, "open policy, raw address", out, code, "hello from a")
	for _, a := range []string{tn.m.Gateway().String(), "127.0.0.1"} {
		if got := hostGet(t, fmt.Sprintf("http://%s:%d/", a, port)); got != "host service" {
			t.Fatalf("host service at %s: %q", a, got)
		}
	}
	if got := hostGet(t, fmt.Sprintf("http://%s:8080/", other.att.Addr())); got != "other sandbox" {
		t.Fatalf("the other sandbox's service from the host: %q", got)
	}

	out, code = open.curl(t, "http://www.b.test/")
	wantFail(t, "a denied name", out, code, 6)
	targets := map[string]string{
		"the gateway (the host)": fmt.Sprintf("http://%s:%d/", tn.m.Gateway(), port),
		"the other sandbox":      fmt.Sprintf("http://%s:8080/", other.att.Addr()),
		"link-local metadata":    "http://" + tn.metadata.Addr.String() + "/",
	}
	for _, a := range hostAddrs() {
		targets["the host at "+a.Addr().String()] = fmt.Sprintf("http://%s:%d/", a.Addr(), port)
	}
	for what, url := range targets {
		out, code := open.curl(t, url)
		if code == 0 {
			t.Errorf("%s (%s) was reached: %q", what, url, out)
		}
	}
}

func TestEgressLivePolicyChange(t *testing.T) {
	tn := newTestNet(t)
	eb := tn.sandbox(t, []string{"a.test"}, nil)
	aURL := "http://" + tn.a.Addr.String() + "/"
	out, code := eb.curl(t, "http://a.test/")
	wantOK(t, "before the change", out, code, "hello from a")
	out, code = eb.curl(t, "http://b.test/")
	wantFail(t, "b before the change", out, code, 6)

	p, _ := ParsePolicy([]string{"b.test", tn.metadata.Addr.String()}, nil)
	if err := eb.att.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	out, code = eb.curl(t, "http://b.test/")
	wantOK(t, "b after the change", out, code, "hello from b")
	out, code = eb.curl(t, "http://a.test/")
	wantFail(t, "a after the change", out, code, 6)
	out, code = eb.curl(t, aURL)
	wantFail(t, "a's address, answered before the change", out, code, 7)
	// An explicit range opens even an always-refused address.
	out, code = eb.curl(t, "http://"+tn.metadata.Addr.String()+"/")
	wantOK(t, "an explicitly allowed link-local address", out, code, "hello from metadata")
}

// Nothing of a sandbox's network outlives it, nor the daemon's of the
// manager.
func TestEgressLeavesNothing(t *testing.T) {
	tn := newTestNet(t)
	eb := tn.sandbox(t, []string{"a.test"}, nil)
	out, code := eb.curl(t, "http://a.test/")
	wantOK(t, "allowed name", out, code, "hello from a")
	links := func() []string {
		ls, _ := netlink.LinkList()
		var names []string
		for _, l := range ls {
			if strings.HasPrefix(l.Attrs().Name, tn.tag+"-") {
				names = append(names, l.Attrs().Name)
			}
		}
		return names
	}
	chains := func() []string {
		c, _ := nftables.New()
		cs, _ := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		var names []string
		for _, ch := range cs {
			if ch.Table.Name == tn.m.tableName() {
				names = append(names, ch.Name)
			}
		}
		return names
	}
	own := eb.att.ifname
	if l, c := links(), chains(); !slices.Contains(l, own) || !slices.Contains(l, tn.tag+"-gw") || len(c) != 4 {
		t.Fatalf("while running: links %v, chains %v; want the gateway, %s (and spares), input/forward/postnat and the sandbox's", l, c, own)
	}
	eb.sb.Destroy()
	must(t, eb.att.Detach())
	if c := chains(); len(c) != 3 {
		t.Fatalf("after the sandbox: chains %v; want the base chains", c)
	}
	// The kernel unregisters the veth in the background.
	for deadline := time.Now().Add(time.Minute); slices.Contains(links(), own); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's veth %s outlived it: links %v", own, links())
		}
	}
	tn.m.Close()
	if l, c := links(), chains(); len(l) != 0 || len(c) != 0 {
		t.Fatalf("after the manager: links %v, chains %v", l, c)
	}
}

// forgeDNS sends, from inside, one DNS query for name to the resolver
// with the IP source address src, by a raw socket (NET_RAW is in the
// sandbox's default capabilities).
const forgeDNS = `import socket, struct, sys
src, dst, name = sys.argv[1:4]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
udp = struct.pack(">HHHH", 40000, 53, 8 + len(q), 0) + q
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.sendto(ip + udp, (dst, 0))
print("sent")
`

// A query with another sandbox's source address never reaches the
// resolver, so it cannot open addresses in the other's set.
func TestEgressForgedSourceDropped(t *testing.T) {
	tn := newTestNet(t)
	attacker := tn.sandbox(t, []string{"a.test", "b.test"}, nil)
	victim := tn.sandbox(t, []string{"a.test"}, nil)
	setHas := func(eb *egressBox, a netip.Addr) bool {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		elems, err := c.GetSetElements(eb.att.rules.any)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range elems {
			if ip, ok := netip.AddrFromSlice(e.Key); ok && ip == a {
				return true
			}
		}
		return false
	}
	wait := func(what string, cond func() bool) {
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen", what)
			}
		}
	}
	send := func(src netip.Addr, name string) {
		out, code := attacker.run(t, fmt.Sprintf("python3 -c '%s' %s %s %s", strings.ReplaceAll(forgeDNS, "'", `'"'"'`), src, tn.m.Gateway(), name))
		if code != 0 || !strings.Contains(out, "sent") {
			t.Fatalf("raw send from inside: exit %d %q", code, out)
		}
	}
	// Negative control: the raw query with the attacker's own address
	// is answered, and opens a.test's address in its own set.
	send(attacker.att.Addr(), "a.test")
	wait("the raw query with the sandbox's own address opening a.test", func() bool { return setHas(attacker, tn.a.Addr) })
	// The forged one, then one more of its own: once that one's effect is
	// seen, the forged one (sent before it, on the same path) was dealt with.
	send(victim.att.Addr(), "a.test")
	send(attacker.att.Addr(), "b.test")
	wait("the second raw query with the sandbox's own address", func() bool { return setHas(attacker, tn.b.Addr) })
	if setHas(victim, tn.a.Addr) {
		t.Fatal("a query with the victim's forged source address opened a.test in the victim's set")
	}
}

// streamer connects to a.test:9000 from inside, says "connected", then
// sends a byte every 20 ms for up to 30 s; it prints how the stream ended.
const streamer = `import socket, sys, time
s = socket.create_connection(("a.test", 9000), timeout=10)
print("connected", flush=True)
for i in range(1500):
    try:
        s.send(b"x")
    except OSError as e:
        print("cut", i, e.errno, flush=True)
        sys.exit(0)
    if i == 5:
        print("streaming", flush=True)
    time.sleep(0.02)
print("never cut", flush=True)
`

// A live change cuts a connection that is already open: the check is per
// packet, not at connect.
func TestEgressLivePolicyChangeCutsOpenConnections(t *testing.T) {
	tn := newTestNet(t)
	require.Binary(t, "python3")
	must(t, tn.a.ServeDiscard(9000))
	eb := tn.sandbox(t, []string{"a.test"}, nil)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := eb.sb.Exec(&sandbox.ExecSpec{Args: []string{"python3", "-c", streamer}, Stdio: [3]*os.File{nil, w, w}, Timeout: time.Minute})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := bufio.NewScanner(r)
	var out []string
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the stream inside ended: %q", out)
		}
		out = append(out, lines.Text())
		return lines.Text()
	}
	// The negative control: the stream runs under the old policy.
	if l := next(); l != "connected" {
		t.Fatalf("the stream did not start: %q", out)
	}
	if l := next(); l != "streaming" {
		t.Fatalf("the stream was not sending: %q", out)
	}
	np, _ := ParsePolicy([]string{"b.test"}, nil)
	must(t, eb.att.SetPolicy(np))
	if l := next(); !strings.HasPrefix(l, "cut ") {
		t.Fatalf("after the change: %q; want the open stream cut", out)
	}
	p.Wait()
}
