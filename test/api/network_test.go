package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/network/nettest"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// netDaemon is a daemon with an egress network of the test's own name and
// pool, whose resolver asks a DNS server in a test host; a.test (and
// b.test) is a test host with an HTTP server.
type netDaemon struct {
	*daemon
	name string
	a    *nettest.Host
	args []string
}

func startNetDaemon(t *testing.T) *netDaemon {
	t.Helper()
	require.Root(t)
	require.Feature(t, "nftables")
	require.Binary(t, "curl")
	require.Binary(t, "python3")
	name := "t" + nettest.RandTag(4)
	sub := byte(64 + rand.IntN(60)*2) // a /31-ish pair of 203.0.113.0/24 per peer
	host := func(link string, i byte) *nettest.Host {
		h, err := nettest.NewHost(name+link, netip.AddrFrom4([4]byte{203, 0, 113, 1}), netip.AddrFrom4([4]byte{203, 0, 113, sub + i}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	dnsHost, a := host("d", 0), host("a", 1)
	// b.test is the same server under a name that policies leave out.
	if err := dnsHost.ServeDNS(map[string]string{"a.test": a.Addr.String(), "b.test": a.Addr.String()}); err != nil {
		t.Fatal(err)
	}
	if err := a.ServeHTTP("a"); err != nil {
		t.Fatal(err)
	}
	pool := fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256))
	args := []string{"--net-name", name, "--net-pool", pool, "--net-upstream", dnsHost.Addr.String() + ":53"}
	return &netDaemon{daemon: startDaemon(t, args...), name: name, a: a, args: args}
}

// vethOf is the host-side veth of the sandbox at addr (the daemon's pool
// is a /24: the index is the last byte).
func (nd *netDaemon) vethOf(addr string) string {
	a := netip.MustParseAddr(addr).As4()
	return fmt.Sprintf("%s-%d", nd.name, a[3])
}

// links lists the host's links of the daemon's network.
func (nd *netDaemon) links() []string {
	ls, _ := netlink.LinkList()
	var names []string
	for _, l := range ls {
		if strings.HasPrefix(l.Attrs().Name, nd.name+"-") {
			names = append(names, l.Attrs().Name)
		}
	}
	return names
}

// table says whether the daemon's nftables table exists.
func (nd *netDaemon) table() bool {
	c, err := nftables.New()
	if err != nil {
		return false
	}
	t, err := c.ListTableOfFamily("tine_"+nd.name, nftables.TableFamilyINet)
	return err == nil && t != nil
}

func (nd *netDaemon) sh(t *testing.T, id, script string) (string, int) {
	t.Helper()
	res, err := nd.c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, TimeoutMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// A published port reaches the sandbox's server on that port and nothing
// else; inspect lists it; the policy follows a live change; nothing is
// left after the sandbox.
func TestNetworkEgressPublishAndLiveChange(t *testing.T) {
	nd := startNetDaemon(t)
	ctx := context.Background()
	sb, err := nd.c.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"a.test"},
		Publish: []api.Port{{Port: 8080}, {Port: 5353, Protocol: "udp"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network == nil || sb.Network.Mode != "egress" || len(sb.Network.Ports) != 2 || sb.Network.Ports[0].HostPort == 0 {
		t.Fatalf("inspect: network %+v; want egress with two published ports bound", sb.Network)
	}
	out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 http://a.test/")
	if code != 0 || out != "hello from a" {
		t.Fatalf("the allowed name from inside: exit %d %q", code, out)
	}
	// Servers inside: 8080 (published) and 8081 (not).
	out, code = nd.sh(t, sb.ID, "cd /tmp && echo published > index.html && (python3 -m http.server 8080 >/dev/null 2>&1 &) && mkdir -p o && echo other > o/index.html && (cd o && python3 -m http.server 8081 >/dev/null 2>&1 &) && "+
		"(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"0.0.0.0\",5353))\nwhile True:\n d,a=s.recvfrom(100); s.sendto(b\"echo:\"+d,a)' >/dev/null 2>&1 &) && "+
		"for i in $(seq 100); do curl -s http://127.0.0.1:8080/ >/dev/null && curl -s http://127.0.0.1:8081/ >/dev/null && break; sleep 0.1; done; echo up")
	if code != 0 {
		t.Fatalf("servers inside: %d %q", code, out)
	}
	hp := sb.Network.Ports[0].HostPort
	if got := get(t, fmt.Sprintf("http://127.0.0.1:%d/", hp)); strings.TrimSpace(got) != "published" {
		t.Fatalf("the published port reached %q", got)
	}
	uc, err := net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", sb.Network.Ports[1].HostPort))
	if err != nil {
		t.Fatal(err)
	}
	uc.SetDeadline(time.Now().Add(patience))
	uc.Write([]byte("ping"))
	buf := make([]byte, 64)
	n, err := uc.Read(buf)
	uc.Close()
	if err != nil || string(buf[:n]) != "echo:ping" {
		t.Fatalf("published UDP port: %q, %v", buf[:n], err)
	}
	// The sandbox's address answers the host (a negative control that the
	// unpublished server is up) but nothing beyond it: a peer on another
	// namespace reaches neither port.
	addr := sb.Network.Address
	if got := get(t, "http://"+addr+":8081/"); strings.TrimSpace(got) != "other" {
		t.Fatalf("the unpublished server from the host: %q", got)
	}
	for _, port := range []string{"8080", "8081"} {
		var err error
		ierr := nettest.InNS(nd.a.NS(), func() error {
			var c net.Conn
			c, err = net.DialTimeout("tcp4", addr+":"+port, 5*time.Second)
			if err == nil {
				c.Close()
			}
			return nil
		})
		if ierr != nil {
			t.Fatal(ierr)
		}
		if err == nil {
			t.Errorf("a peer beyond the host connected to the sandbox's %s:%s", addr, port)
		}
	}

	// A live change: a.test goes, and with it its address.
	n2, err := nd.c.SetNetwork(ctx, sb.ID, api.NetworkPolicy{Allow: []string{"b.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(n2.Allow) != 1 || n2.Allow[0] != "b.test" {
		t.Fatalf("after the change: %+v", n2)
	}
	if out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 http://"+nd.a.Addr.String()+"/"); code == 0 {
		t.Fatalf("a.test's address after the change: %q", out)
	}
	if out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 http://b.test/"); code != 0 || out != "hello from a" {
		t.Fatalf("b.test (the same server) after the change: %d %q", code, out)
	}
	if _, err := nd.c.SetNetwork(ctx, sb.ID, api.NetworkPolicy{Allow: []string{"bad rule!"}}); err == nil || !strings.Contains(err.Error(), "bad rule!") {
		t.Fatalf("a bad rule: %v", err)
	}

	own := nd.vethOf(sb.Network.Address)
	if l := nd.links(); !slices.Contains(l, own) || !nd.table() {
		t.Fatalf("while running: links %v (want %s), table %v", l, own, nd.table())
	}
	if err := nd.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// The kernel unregisters a veth in the background.
	if !testbin.Eventually(patience, func() bool { return !slices.Contains(nd.links(), own) }) {
		t.Fatalf("after the sandbox: links %v; %s is left", nd.links(), own)
	}
	if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", hp), 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("the published port still listens after the sandbox")
	}
	nd.stop()
	if l := nd.links(); len(l) != 0 || nd.table() {
		t.Fatalf("after the daemon: links %v, table %v", l, nd.table())
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: patience}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A daemon killed -9 leaves no veth (the pairs go with the sandboxes'
// namespaces); its nftables table and gateway link are reaped by the next
// daemon of the name, at its start.
func TestNetworkReapedAfterKill(t *testing.T) {
	nd := startNetDaemon(t)
	ctx := context.Background()
	sb, err := nd.c.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 http://a.test/"); code != 0 {
		t.Fatalf("egress before the kill: %d %q", code, out)
	}
	if l := nd.links(); !slices.Contains(l, nd.vethOf(sb.Network.Address)) || !nd.table() {
		t.Fatalf("while running: links %v, table %v", l, nd.table())
	}
	nd.kill()
	if !testbin.Eventually(patience, func() bool { return len(nd.links()) == 1 }) {
		t.Fatalf("after kill -9: links %v; want only the gateway link left", nd.links())
	}
	if !nd.table() {
		t.Fatal("after kill -9 the table is gone: then this test no longer proves the reaping")
	}
	next := startDaemonIn(t, t.TempDir(), nd.args...)
	if l := nd.links(); len(l) != 0 || nd.table() {
		t.Fatalf("after the next daemon's start: links %v, table %v", l, nd.table())
	}
	b, _ := os.ReadFile(next.log)
	for _, what := range []string{"link " + nd.name + "-gw", "nftables table inet tine_" + nd.name} {
		if !strings.Contains(string(b), what) {
			t.Errorf("the next daemon did not say it reaped %s:\n%s", what, b)
		}
	}
	// And the name is the new daemon's: egress works again.
	sb2, err := next.c.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := next.c.Exec(ctx, sb2.ID, &api.ExecRequest{Argv: []string{"curl", "-sS", "--max-time", "10", "http://a.test/"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello from a" {
		t.Fatalf("egress after the restart: %+v %v", res, err)
	}
}

// Headers the proxy injects reach the test host, replace what the sandbox
// sends under the same name, and are never visible inside (environment,
// files, responses) nor in inspect.
func TestNetworkProxyInjectsCredentials(t *testing.T) {
	nd := startNetDaemon(t)
	ctx := context.Background()
	secret := "sk-" + marker() + marker()
	sb, err := nd.c.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"a.test"},
		Inject: []api.Injection{{Host: "a.test", Headers: map[string]string{"X-Api-Key": secret}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 -H 'X-Api-Key: mine' http://a.test/")
	if code != 0 || out != "hello from a" {
		t.Fatalf("through the proxy: exit %d %q", code, out)
	}
	hs := nd.a.Headers()
	if len(hs) == 0 || hs[len(hs)-1].Get("X-Api-Key") != secret || len(hs[len(hs)-1].Values("X-Api-Key")) != 1 {
		t.Fatalf("the test host got X-Api-Key %q; want the injected one alone", hs[len(hs)-1].Values("X-Api-Key"))
	}
	// Look for it inside: the search finds what is there (a planted
	// marker), and not the secret.
	plant := marker()
	dirs := " /tmp /run /etc /root /home /proc/1/environ /proc/self/environ 2>/dev/null"
	out, _ = nd.sh(t, sb.ID, "echo "+plant+" > /tmp/plant; echo planted:; grep -rsl "+plant+dirs+"; echo secret:; grep -rsl "+secret+dirs+"; env; curl -sv --max-time 10 http://a.test/ 2>&1")
	planted, found, ok := strings.Cut(out, "secret:\n")
	if !ok || !strings.Contains(planted, "/tmp/plant") {
		t.Fatalf("the search inside did not run: %q", out)
	}
	if strings.Contains(found, secret) || strings.HasPrefix(found, "/") {
		t.Fatalf("the secret is visible inside:\n%s", found)
	}
	info, err := nd.c.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Spec.Inject) != 1 || info.Spec.Inject[0].Headers["X-Api-Key"] != api.Redacted {
		t.Fatalf("inspect shows %+v; want the value redacted", info.Spec.Inject)
	}
	// The proxy keeps to the policy: another name is refused there too.
	out, _ = nd.sh(t, sb.ID, "curl -s -o /dev/null -w '%{http_code}' --max-time 10 -x http://"+info.Network.Resolver+":3128 http://b.test/")
	if out != "403" {
		t.Fatalf("a name outside the policy through the proxy: HTTP %q; want 403", out)
	}
}

// A second daemon of a live daemon's --net-name touches nothing of it and
// refuses egress with a clear error; the first keeps working.
func TestNetworkNameHeldByLiveDaemon(t *testing.T) {
	nd := startNetDaemon(t)
	ctx := context.Background()
	sb, err := nd.c.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	second := startDaemonIn(t, t.TempDir(), nd.args...)
	_, err = second.c.Create(ctx, &api.SandboxSpec{Network: "egress"})
	if err == nil || !strings.Contains(err.Error(), "another live tine daemon uses the network name") {
		t.Fatalf("egress on a second daemon of the name: %v", err)
	}
	if out, code := nd.sh(t, sb.ID, "curl -sS --max-time 10 http://a.test/"); code != 0 || out != "hello from a" {
		t.Fatalf("the first daemon's sandbox after the second started: %d %q", code, out)
	}
}

// headerEcho serves on port (inside a sandbox) every request's headers
// back as its body.
const headerEcho = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("path " + self.path + "\n" + str(self.headers)).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
`

// A port published with proxy is reached through the daemon's TCP
// listener by the Tine-Port header, under the token, which the sandbox
// never sees; an unpublished port of the same sandbox is not reachable
// that way.
func TestNetworkPortsBehindTheListener(t *testing.T) {
	require.Root(t)
	require.Binary(t, "python3")
	addr := freePort(t)
	d := startDaemon(t, "--listen", addr)
	raw, err := os.ReadFile(filepath.Join(d.dir, "data", "token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	ctx := context.Background()
	sb, err := d.c.Create(ctx, &api.SandboxSpec{Publish: []api.Port{{Port: 8080, Proxy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := sb.Network.Ports; len(p) != 1 || !p[0].Proxy || p[0].Port != 8080 {
		t.Fatalf("inspect: ports %+v", p)
	}
	script := strings.ReplaceAll(headerEcho, "'", `'"'"'`)
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"(python3 -c '" + script + "' 8080 >/dev/null 2>&1 &); (python3 -c '" + script + "' 8081 >/dev/null 2>&1 &); " +
			"for i in $(seq 100); do curl -s http://127.0.0.1:8080/ >/dev/null && curl -s http://127.0.0.1:8081/ >/dev/null && exit 0; sleep 0.1; done; exit 1"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("servers inside: %+v %v", res, err)
	}
	get := func(port string, withToken bool) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/some/path?q=1", nil)
		req.Header.Set("Tine-Port", sb.ID+":"+port)
		req.Header.Set("X-Mine", "kept")
		if withToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: patience}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("8080", true)
	if code != 200 || !strings.Contains(body, "path /some/path?q=1") || !strings.Contains(body, "X-Mine: kept") {
		t.Fatalf("through the listener: %d %q", code, body)
	}
	if strings.Contains(body, token) || strings.Contains(strings.ToLower(body), "authorization") || strings.Contains(body, "Tine-Port") {
		t.Fatalf("the sandbox saw the token or the routing header:\n%s", body)
	}
	if code, body := get("8081", true); code != 404 || !strings.Contains(body, "no port 8081 published") {
		t.Fatalf("an unpublished port: %d %q", code, body)
	}
	if code, _ := get("8080", false); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
}

// An egress function's requests reach an allowed name and nothing else;
// its network goes when the function does.
func TestNetworkEgressFunction(t *testing.T) {
	nd := startNetDaemon(t)
	ctx := context.Background()
	entry := writeHandler(t, `import urllib.request
def handler(event):
    try:
        return urllib.request.urlopen(event, timeout=10).read().decode()
    except Exception as e:
        return "failed: " + type(e).__name__
`)
	if _, err := nd.c.PutFunction(ctx, &api.FunctionSpec{Name: "fetch", Entry: entry, Network: "egress", Allow: []string{"a.test"}}); err != nil {
		t.Fatal(err)
	}
	call := func(url string) string {
		b, _ := json.Marshal(url)
		inv, err := nd.c.Invoke(ctx, "fetch", b)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if inv.Status != "ok" || json.Unmarshal(inv.Result, &s) != nil {
			t.Fatalf("invoke %s: %+v", url, inv)
		}
		return s
	}
	if got := call("http://a.test/"); got != "hello from a" {
		t.Fatalf("the allowed name from a request: %q", got)
	}
	if got := call("http://b.test/"); !strings.HasPrefix(got, "failed") {
		t.Fatalf("a name not allowed (for the same server): %q", got)
	}
	if !testbin.Eventually(patience, func() bool { return len(nd.links()) >= 2 }) {
		t.Fatalf("no veth for the function: %v", nd.links())
	}
	if err := nd.c.DeleteFunction(ctx, "fetch"); err != nil {
		t.Fatal(err)
	}
	if _, err := nd.c.PutFunction(ctx, &api.FunctionSpec{Name: "bad", Entry: entry, Allow: []string{"a.test"}}); err == nil || !strings.Contains(err.Error(), "need network") {
		t.Fatalf("allow without egress: %v", err)
	}
}

// network none has no usable interface, not even lo; loopback's lo works
// (the negative control).
func TestNetworkNoneHasNoLoopback(t *testing.T) {
	require.Binary(t, "python3")
	d := startDaemon(t)
	ctx := context.Background()
	probe := `import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.socket(); c.settimeout(5)
try:
    c.connect(s.getsockname()); print("connected")
except OSError as e:
    print("failed", e.errno)`
	for mode, want := range map[string]string{"loopback": "connected", "none": "failed"} {
		sb, err := d.c.Create(ctx, &api.SandboxSpec{Network: mode})
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"python3", "-c", probe}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(res.Stdout), want) {
			t.Errorf("network %s: %q %q; want %s", mode, res.Stdout, res.Stderr, want)
		}
	}
}
