package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/miekg/dns"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/network/nettest"
)

// NetTargets are the bars for egress networking.
var NetTargets = struct {
	Create, Bulk Target
}{
	Target{Variant: "egress create→ready", MaxExtraMs: 2, Text: "egress create→ready p50 at most 2 ms over loopback's"},
	Target{Variant: "sandbox 64 MiB upload", MaxRatio: 1.25, Text: "bulk throughput through the sandbox's path at least 0.8x the host's own (time at most 1.25x)"},
}

// netBulk is what one bulk run sends.
const netBulk = 64 << 20

// NetBench is the net suite's setup: test hosts made for the run (a DNS
// zone and a server, in namespaces of their own), and a daemon whose
// egress network has a name and pool of the run's own.
type NetBench struct {
	Daemon   *Daemon
	dnsHost  *nettest.Host
	server   *nettest.Host
	sandbox  *api.Sandbox
	ns       *os.File // the sandbox's network namespace
	hostNS   *os.File // the bench's own, for the reference paths
	resolver string
}

// StartNetBench makes the test hosts and starts the daemon.
func StartNetBench(self string) (nb *NetBench, err error) {
	nb = &NetBench{}
	defer func() {
		if err != nil {
			nb.Close()
		}
	}()
	name := "b" + nettest.RandTag(4)
	sub := byte(128 + rand.IntN(30)*4)
	hostSide := netip.AddrFrom4([4]byte{203, 0, 113, sub + 1})
	if nb.dnsHost, err = nettest.NewHost(name+"d", hostSide, netip.AddrFrom4([4]byte{203, 0, 113, sub + 2})); err != nil {
		return nil, fmt.Errorf("test host: %w", err)
	}
	if nb.server, err = nettest.NewHost(name+"s", hostSide, netip.AddrFrom4([4]byte{203, 0, 113, sub + 3})); err != nil {
		return nil, fmt.Errorf("test host: %w", err)
	}
	if err = nb.dnsHost.ServeDNS(map[string]string{"server.test": nb.server.Addr.String()}); err != nil {
		return nil, err
	}
	if err = nb.server.ServeDiscard(9000); err != nil {
		return nil, err
	}
	pool := fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256))
	if nb.Daemon, err = StartDaemon(self, 0, "--net-name", name, "--net-pool", pool, "--net-upstream", nb.dnsHost.Addr.String()+":53"); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if nb.sandbox, err = nb.Daemon.Client.Create(ctx, &api.SandboxSpec{Network: "egress", Allow: []string{"server.test"}}); err != nil {
		return nil, fmt.Errorf("create the egress sandbox: %w", err)
	}
	if nb.ns, err = os.Open("/proc/" + strconv.Itoa(nb.sandbox.Pid) + "/ns/net"); err != nil {
		return nil, err
	}
	if nb.hostNS, err = os.Open("/proc/self/ns/net"); err != nil {
		return nil, err
	}
	nb.resolver = nb.sandbox.Network.Resolver + ":53"
	return nb, nil
}

// Close deletes the sandbox, stops the daemon and removes the test hosts.
func (nb *NetBench) Close() {
	if nb.sandbox != nil {
		nb.Daemon.Client.Delete(context.Background(), nb.sandbox.ID)
	}
	if nb.Daemon != nil {
		nb.Daemon.Stop()
	}
	for _, f := range []*os.File{nb.ns, nb.hostNS} {
		if f != nil {
			f.Close()
		}
	}
	for _, h := range []*nettest.Host{nb.server, nb.dnsHost} {
		if h != nil {
			h.Close()
		}
	}
}

// query asks server for name's A record from a socket in ns.
func query(ns *os.File, server, name string) error {
	var c *dns.Conn
	err := nettest.InNS(ns, func() error {
		nc, err := net.Dial("udp4", server)
		c = &dns.Conn{Conn: nc}
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMsg(m); err != nil {
		return err
	}
	r, err := c.ReadMsg()
	if err != nil {
		return err
	}
	if len(r.Answer) == 0 {
		return fmt.Errorf("no answer for %s from %s (rcode %s)", name, server, dns.RcodeToString[r.Rcode])
	}
	return nil
}

// dial connects from a socket made in ns.
func dial(ns *os.File, addr string) (c net.Conn, err error) {
	err = nettest.InNS(ns, func() error {
		c, err = net.DialTimeout("tcp4", addr, 10*time.Second)
		return err
	})
	return c, err
}

// Groups are the suite: create→ready egress vs loopback; TCP connect and
// a 64 MiB upload to the test host from the sandbox's namespace (veth,
// the sandbox's chain, NAT) vs from the host's own; a DNS answer through
// tine's resolver vs from the zone's server directly. Every path's socket
// is made on a thread that entered the namespace, the host's own too, so
// both pay the same.
func (nb *NetBench) Groups() []Group {
	c := nb.Daemon.Client
	target := nb.server.Addr.String() + ":9000"
	var created string
	create := func(name string, spec api.SandboxSpec) Variant {
		return Variant{Name: name, Func: func(ctx context.Context) error {
			s, err := c.Create(ctx, &spec)
			if err != nil {
				return err
			}
			created = s.ID
			return nil
		}, After: func(ctx context.Context) error { return c.Delete(ctx, created) }}
	}
	connect := func(name string, ns *os.File) Variant {
		return Variant{Name: name, Func: func(context.Context) error {
			conn, err := dial(ns, target)
			if err != nil {
				return err
			}
			return conn.Close()
		}}
	}
	chunk := make([]byte, 1<<20)
	upload := func(name string, ns *os.File) Variant {
		return Variant{Name: name, Func: func(context.Context) error {
			conn, err := dial(ns, target)
			if err != nil {
				return err
			}
			defer conn.Close()
			for sent := 0; sent < netBulk; sent += len(chunk) {
				if _, err := conn.Write(chunk); err != nil {
					return err
				}
			}
			// The discard server reads all of it before it sees the end.
			conn.(*net.TCPConn).CloseWrite()
			_, err = io.Copy(io.Discard, conn)
			return err
		}}
	}
	// The sandbox reaches the server only once the resolver answered
	// server.test for it: each sandbox variant's Verify asks first.
	resolveFirst := func(v Variant) Variant {
		v.Verify = func(context.Context) error { return query(nb.ns, nb.resolver, "server.test") }
		return v
	}
	dnsDirect := Variant{Name: "host → zone's server", Func: func(context.Context) error {
		return query(nb.hostNS, nb.dnsHost.Addr.String()+":53", "server.test")
	}}
	dnsTine := Variant{Name: "sandbox → tine's resolver", Func: func(context.Context) error {
		return query(nb.ns, nb.resolver, "server.test")
	}}
	loop, egress := create("loopback create→ready", api.SandboxSpec{}), create("egress create→ready", api.SandboxSpec{Network: "egress", Allow: []string{"server.test"}})
	hc, sc := connect("host TCP connect", nb.hostNS), resolveFirst(connect("sandbox TCP connect", nb.ns))
	hu, su := upload("host 64 MiB upload", nb.hostNS), resolveFirst(upload("sandbox 64 MiB upload", nb.ns))
	return []Group{
		{Name: "create→ready", Reference: loop.Name, Subject: egress.Name, Variants: []Variant{loop, egress}, Targets: []Target{NetTargets.Create}},
		{Name: "TCP connect to a test host", Reference: hc.Name, Subject: sc.Name, Variants: []Variant{hc, sc}},
		{Name: "bulk upload to a test host", Reference: hu.Name, Subject: su.Name, Variants: []Variant{hu, su}, Targets: []Target{NetTargets.Bulk}},
		{Name: "DNS A query", Reference: dnsDirect.Name, Subject: dnsTine.Name, Variants: []Variant{dnsDirect, dnsTine}},
	}
}
