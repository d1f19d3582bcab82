package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/tine-run/tine/internal/kernel/osthread"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// testHost is a peer the test makes: a network namespace on this machine
// joined to the host by a veth pair, with the host routing addr to it.
// Nothing of it reaches a real external address.
type testHost struct {
	addr netip.Addr
	ns   *os.File
	link string

	mu      sync.Mutex
	headers []http.Header // what the HTTP server received
}

func randTag(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// newTestHost makes a peer at addr (routed from the host as addr/32; the
// host side of its link has hostSide).
func newTestHost(t *testing.T, linkName string, hostSide, addr netip.Addr) *testHost {
	t.Helper()
	ns, err := NewNetNS(true)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHost{addr: addr, ns: ns, link: linkName}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(linkName); err == nil {
			netlink.LinkDel(l)
		}
		ns.Close()
	})
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: linkName}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("test host link: %v", err)
	}
	host, err := netlink.LinkByName(linkName)
	if err != nil {
		t.Fatal(err)
	}
	must(t, netlink.AddrAdd(host, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(hostSide, 32)), Peer: ipnet(netip.PrefixFrom(addr, 32))}))
	must(t, netlink.LinkSetUp(host))
	h, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	must(t, h.AddrAdd(eth0, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(addr, 32)), Peer: ipnet(netip.PrefixFrom(hostSide, 32))}))
	must(t, h.LinkSetUp(eth0))
	must(t, h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: hostSide.AsSlice()}))
	return th
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// inNS runs fn on a thread in the host's namespace: sockets it opens stay
// there.
func (th *testHost) inNS(t *testing.T, fn func()) {
	t.Helper()
	var err error
	osthread.Throwaway(func() {
		if err = unix.Setns(int(th.ns.Fd()), unix.CLONE_NEWNET); err == nil {
			fn()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// serveHTTP answers GET / on port 80 with "hello from <name>" and records
// the request headers.
func (th *testHost) serveHTTP(t *testing.T, name string) {
	t.Helper()
	var ln net.Listener
	var err error
	th.inNS(t, func() { ln, err = net.Listen("tcp4", ":80") })
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.mu.Lock()
		th.headers = append(th.headers, r.Header.Clone())
		th.mu.Unlock()
		fmt.Fprintf(w, "hello from %s", name)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// serveDNS answers A queries from zone (name → address) on port 53.
func (th *testHost) serveDNS(t *testing.T, zone map[string]string) {
	t.Helper()
	var pc net.PacketConn
	var err error
	th.inNS(t, func() { pc, err = net.ListenPacket("udp4", ":53") })
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		a, ok := zone[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(a)})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
}
