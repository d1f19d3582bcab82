package network

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/tine-run/tine/internal/kernel/osthread"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Defaults of a daemon's network.
const (
	DefaultName = "tine"
	DefaultPool = "10.201.0.0/16"
)

// ErrInUse means another live daemon holds the network name.
var ErrInUse = errors.New("network name in use")

// ErrUnavailable means the host cannot give sandboxes egress.
var ErrUnavailable = errors.New("egress networking unavailable")

// Config is a daemon's network.
type Config struct {
	// Name scopes everything the daemon creates: the nftables table
	// inet tine_<name>, the links <name>-gw and <name>-<n>. 1 to 6
	// lower-case letters or digits; daemons on one host need distinct names.
	Name string
	// Pool is the sandboxes' IPv4 range; its first address is the
	// gateway and resolver. Daemons on one host need distinct pools.
	Pool netip.Prefix
	// Upstream is the server (host:port) tine's resolver asks for the
	// names a policy allows (default: the host's first nameserver).
	Upstream string
	Logger   *slog.Logger
}

var validName = regexp.MustCompile(`^[a-z0-9]{1,6}$`)

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if !validName.MatchString(c.Name) {
		return fmt.Errorf("%w: network name %q: want 1 to 6 lower-case letters or digits (it prefixes interface names, which have at most 15 characters)", ErrInvalid, c.Name)
	}
	if !c.Pool.IsValid() {
		c.Pool = netip.MustParsePrefix(DefaultPool)
	}
	if !c.Pool.Addr().Is4() || c.Pool.Bits() > 29 || c.Pool.Bits() < 8 {
		return fmt.Errorf("%w: address pool %s: want an IPv4 range from /8 to /29", ErrInvalid, c.Pool)
	}
	c.Pool = c.Pool.Masked()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Manager gives sandboxes their networks. The host side (the gateway
// link, the nftables table, the resolver) is made at the first egress
// sandbox, after what a dead daemon of the same name left is reaped.
type Manager struct {
	cfg Config

	mu       sync.Mutex
	ready    bool
	gw       netip.Addr
	prefix   string // of the host-side veths
	table    *nftTable
	resolver *resolver
	proxy    *proxy
	used     map[int]*Attachment // by index in the pool
	byAddr   map[netip.Addr]*Attachment
	refused  []netip.Prefix
	closed   bool
	lock     int // the name's lock (see takeName), -1 until taken

	// spares are namespaces with their veth pair plumbed and no rules yet,
	// made ahead so that an egress create pays only for its policy.
	spares    []*Attachment
	refilling bool
	bg        sync.WaitGroup // refills and link removals
}

// spareNetworks is how many plumbed namespaces the manager keeps ready.
const spareNetworks = 2

// NewManager returns a manager; nothing is created until the first
// egress sandbox.
func NewManager(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	gw := cfg.Pool.Addr().Next()
	return &Manager{cfg: cfg, gw: gw, prefix: cfg.Name + "-", used: map[int]*Attachment{}, byAddr: map[netip.Addr]*Attachment{}, lock: -1}, nil
}

// takeName makes this process the holder of the network's name, for its
// life: an abstract unix socket named after it, which the kernel frees
// when the process dies, also by kill -9. ErrInUse when a live daemon
// holds it.
func (m *Manager) takeName() error {
	if m.lock >= 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lock socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@tine/network/" + m.cfg.Name}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return fmt.Errorf("%w: another live tine daemon uses the network name %q; give this one another --net-name (and --net-pool)", ErrInUse, m.cfg.Name)
		}
		return fmt.Errorf("lock network name %q: %w", m.cfg.Name, err)
	}
	m.lock = fd
	return nil
}

// Gateway is the sandboxes' gateway and resolver address.
func (m *Manager) Gateway() netip.Addr { return m.gw }

// tableName is the daemon's nftables table.
func (m *Manager) tableName() string { return "tine_" + m.cfg.Name }

func (m *Manager) gwLink() string { return m.cfg.Name + "-gw" }

// ResolvConf is what an egress sandbox's /etc/resolv.conf says (written
// into its root once it is made: a bind mount would cost a sandbox's
// create the Landlock walk that binds need).
func (m *Manager) ResolvConf() []byte {
	return []byte("# tine's resolver: it answers the names this sandbox's egress policy allows\nnameserver " + m.gw.String() + "\noptions edns0\n")
}

// Reap takes the network's name for this process and removes what a dead
// daemon of the name left: its nftables table and its links (a sandbox's
// veth pair goes with its namespace, when the sandbox's processes and the
// daemon's descriptors are gone; the gateway link stays). ErrInUse when a
// live daemon holds the name; then nothing is touched.
func (m *Manager) Reap() (removed []string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reapLocked()
}

func (m *Manager) reapLocked() (removed []string, err error) {
	if err := m.takeName(); err != nil {
		return nil, err
	}
	if found, err := reapTable(m.tableName()); err != nil {
		return nil, err
	} else if found {
		removed = append(removed, "nftables table inet "+m.tableName())
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if name != m.gwLink() && !m.isSandboxLink(name) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			return removed, fmt.Errorf("remove link %s: %w", name, err)
		}
		removed = append(removed, "link "+name)
	}
	return removed, nil
}

func (m *Manager) isSandboxLink(name string) bool {
	n, ok := strings.CutPrefix(name, m.prefix)
	if !ok {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// ensure makes the host side at the first egress sandbox.
func (m *Manager) ensure() (err error) {
	if m.ready {
		return nil
	}
	if m.closed {
		return fmt.Errorf("%w: the daemon is shutting down", ErrUnavailable)
	}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if _, err := m.reapLocked(); err != nil {
		if errors.Is(err, ErrInUse) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
		return fmt.Errorf("%w: turn on IP forwarding (net.ipv4.ip_forward): %v", ErrUnavailable, err)
	}
	// The gateway address lives on a link of its own, so the resolver can
	// listen on it before any sandbox exists and after all have gone: a
	// bridge without ports (kernels often lack the dummy driver).
	gw := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: m.gwLink()}}
	if err := netlink.LinkAdd(gw); err != nil {
		return fmt.Errorf("%w: create link %s: %v", ErrUnavailable, m.gwLink(), err)
	}
	undo = append(undo, func() { netlink.LinkDel(gw) })
	if err := netlink.AddrAdd(gw, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(m.gw, 32))}); err != nil {
		return fmt.Errorf("%w: address %s on %s: %v", ErrUnavailable, m.gw, m.gwLink(), err)
	}
	if err := netlink.LinkSetUp(gw); err != nil {
		return fmt.Errorf("%w: bring up %s: %v", ErrUnavailable, m.gwLink(), err)
	}
	m.refused = append(append([]netip.Prefix{m.cfg.Pool}, alwaysRefused...), hostAddrs()...)
	if m.table, err = newNFTTable(m.tableName(), m.prefix, m.gw, m.cfg.Pool, []uint16{ProxyPort}, m.refused); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	undo = append(undo, m.table.close)
	if m.resolver, err = startResolver(m, netip.AddrPortFrom(m.gw, 53), m.cfg.Upstream); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	undo = append(undo, m.resolver.close)
	if m.proxy, err = startProxy(m, netip.AddrPortFrom(m.gw, ProxyPort)); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	undo = append(undo, m.proxy.close)
	m.ready = true
	m.cfg.Logger.Info("egress network ready", "name", m.cfg.Name, "pool", m.cfg.Pool, "gateway", m.gw, "upstream", m.resolver.upstream)
	return nil
}

// hostAddrs are the host's own IPv4 addresses, refused to sandboxes
// (they reach the host's INPUT chain anyway; this covers routes through
// other interfaces too).
func hostAddrs() []netip.Prefix {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			out = append(out, netip.PrefixFrom(ip, 32))
		}
	}
	return out
}

// Close removes the host side; sandboxes still attached lose their
// network.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, a := range m.byAddr {
		m.detachLocked(a)
	}
	for _, a := range m.spares {
		m.removeLinkLocked(a)
	}
	m.spares = nil
	m.mu.Unlock()
	m.bg.Wait() // refills see closed and stop; removals finish
	m.mu.Lock()
	defer func() {
		if m.lock >= 0 {
			unix.Close(m.lock)
			m.lock = -1
		}
	}()
	if !m.ready {
		return
	}
	m.resolver.close()
	m.proxy.close()
	m.table.close()
	if l, err := netlink.LinkByName(m.gwLink()); err == nil {
		netlink.LinkDel(l)
	}
	m.ready = false
}

// Attachment is one egress sandbox's network: its namespace, veth pair,
// address, rules and resolver state.
type Attachment struct {
	m      *Manager
	n      int
	addr   netip.Addr
	ifname string
	ns     *os.File
	rules  *sandboxRules

	// Guarded by m.mu.
	inject   []Injection
	policy   Policy
	resolved map[string][]netip.Addr // answered names, to refill the sets on a policy change
	detached bool
}

// NetNS is the sandbox's network namespace (sandbox.Spec.NetNS).
func (a *Attachment) NetNS() *os.File { return a.ns }

// Addr is the sandbox's address.
func (a *Attachment) Addr() netip.Addr { return a.addr }

// Policy is the sandbox's egress policy now.
func (a *Attachment) Policy() Policy {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	return a.policy
}

// Attach makes an egress network for a new sandbox under policy p; its
// requests through the proxy (ProxyURL) get the injections' headers.
func (m *Manager) Attach(p Policy, inject []Injection) (_ *Attachment, err error) {
	m.mu.Lock()
	if err := m.ensure(); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	var a *Attachment
	if k := len(m.spares); k > 0 {
		a, m.spares = m.spares[k-1], m.spares[:k-1]
	}
	m.mu.Unlock()
	defer m.refill()
	if a == nil {
		if a, err = m.newPlumbed(); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.rules, err = m.table.addSandbox(a.n, a.ifname, a.addr, p); err != nil {
		m.removeLinkLocked(a)
		return nil, err
	}
	a.policy, a.inject = p, inject
	m.byAddr[a.addr] = a
	return a, nil
}

// newPlumbed makes a namespace with its veth pair and address, without
// rules (which refuse everything from it until addSandbox).
func (m *Manager) newPlumbed() (_ *Attachment, err error) {
	m.mu.Lock()
	n, addr, err := m.allocLocked()
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	a := &Attachment{m: m, n: n, addr: addr, ifname: m.prefix + strconv.Itoa(n), resolved: map[string][]netip.Addr{}}
	m.used[n] = a
	m.mu.Unlock()
	defer func() {
		if err != nil {
			if a.ns != nil {
				a.ns.Close()
			}
			if l, lerr := netlink.LinkByName(a.ifname); lerr == nil {
				netlink.LinkDel(l)
			}
			m.mu.Lock()
			delete(m.used, n)
			m.mu.Unlock()
		}
	}()
	if a.ns, err = NewNetNS(true); err != nil {
		return nil, err
	}
	if err := m.plumb(a); err != nil {
		return nil, err
	}
	return a, nil
}

// refill makes spares in the background, one refill at a time.
func (m *Manager) refill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refilling || m.closed || len(m.spares) >= spareNetworks {
		return
	}
	m.refilling = true
	m.bg.Go(func() {
		for {
			m.mu.Lock()
			if m.closed || len(m.spares) >= spareNetworks {
				m.refilling = false
				m.mu.Unlock()
				return
			}
			m.mu.Unlock()
			a, err := m.newPlumbed()
			m.mu.Lock()
			switch {
			case err != nil:
				m.refilling = false
				m.mu.Unlock()
				m.cfg.Logger.Warn("make a spare egress network", "err", err)
				return
			case m.closed:
				m.removeLinkLocked(a)
			default:
				m.spares = append(m.spares, a)
			}
			m.mu.Unlock()
		}
	})
}

// removeLinkLocked removes a's veth pair and namespace in the background
// (the kernel takes tens of milliseconds to unregister a device); its
// address is free once they are gone.
func (m *Manager) removeLinkLocked(a *Attachment) {
	m.bg.Go(func() {
		if l, err := netlink.LinkByName(a.ifname); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				m.cfg.Logger.Warn("remove veth", "link", a.ifname, "err", err)
			}
		}
		a.ns.Close()
		m.mu.Lock()
		delete(m.used, a.n)
		m.mu.Unlock()
	})
}

// allocLocked takes the lowest free address of the pool after the gateway.
func (m *Manager) allocLocked() (int, netip.Addr, error) {
	size := 1 << (32 - m.cfg.Pool.Bits())
	addr := m.gw
	for n := 2; n < size-1; n++ {
		addr = addr.Next()
		if m.used[n] == nil {
			return n, addr, nil
		}
	}
	return 0, netip.Addr{}, fmt.Errorf("%w: the address pool %s is used up (%d sandboxes); give the daemon a larger --net-pool", ErrUnavailable, m.cfg.Pool, len(m.used))
}

// plumb creates the veth pair: the host end with the gateway address
// pointing at the sandbox's, the sandbox end eth0 with its address, a
// route to the gateway and a default route through it.
func (m *Manager) plumb(a *Attachment) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.ifname}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(a.ns.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("%w: create veth %s: %v", ErrUnavailable, a.ifname, err)
	}
	host, err := netlink.LinkByName(a.ifname)
	if err != nil {
		return fmt.Errorf("%w: find veth %s: %v", ErrUnavailable, a.ifname, err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(m.gw, 32)), Peer: ipnet(netip.PrefixFrom(a.addr, 32))}); err != nil {
		return fmt.Errorf("%w: address on %s: %v", ErrUnavailable, a.ifname, err)
	}
	// Strict reverse-path filtering: a packet whose source address does
	// not route back out of this veth (a forged one: NET_RAW is in the
	// sandbox's default capabilities) is dropped before the resolver, the
	// proxy or the forward chain see it.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+a.ifname+"/rp_filter", []byte("1"), 0); err != nil {
		return fmt.Errorf("%w: reverse-path filter on %s: %v", ErrUnavailable, a.ifname, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("%w: bring up %s: %v", ErrUnavailable, a.ifname, err)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(int(a.ns.Fd())))
	if err != nil {
		return fmt.Errorf("%w: netlink in the sandbox's namespace: %v", ErrUnavailable, err)
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("%w: find the sandbox's eth0: %v", ErrUnavailable, err)
	}
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(a.addr, 32)), Peer: ipnet(netip.PrefixFrom(m.gw, 32))}); err != nil {
		return fmt.Errorf("%w: the sandbox's address: %v", ErrUnavailable, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("%w: bring up the sandbox's eth0: %v", ErrUnavailable, err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: m.gw.AsSlice()}); err != nil {
		return fmt.Errorf("%w: the sandbox's default route: %v", ErrUnavailable, err)
	}
	return nil
}

// SetPolicy replaces the sandbox's egress policy at once, in the kernel
// (also for connections already open) and in the resolver; addresses
// answered before stay reachable where the new policy still allows their
// names.
func (a *Attachment) SetPolicy(p Policy) error {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.detached {
		return fmt.Errorf("%w: the sandbox's network is gone", ErrUnavailable)
	}
	if err := m.table.setPolicy(a.rules, p); err != nil {
		return err
	}
	a.policy = p
	for name, addrs := range a.resolved {
		ok, anyPort, ports := p.NamePorts(name)
		if !ok {
			delete(a.resolved, name)
			continue
		}
		if err := m.table.allowAddrs(a.rules, addrs, anyPort, ports); err != nil {
			return err
		}
	}
	return nil
}

// Detach removes the sandbox's network: its rules, resolver state, veth
// pair and namespace descriptor. Call it after the sandbox is destroyed.
func (a *Attachment) Detach() error {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	return a.m.detachLocked(a)
}

func (m *Manager) detachLocked(a *Attachment) error {
	if a.detached {
		return nil
	}
	a.detached = true
	delete(m.byAddr, a.addr)
	err := m.table.removeSandbox(a.rules)
	m.removeLinkLocked(a) // removing one end removes the pair
	return err
}

// answered records that the resolver answered name for the sandbox at
// addr with addrs, and opens them in its sets before the answer leaves.
// It returns the addresses the policy lets the answer carry.
func (m *Manager) answered(src netip.Addr, name string, addrs []netip.Addr) (allowed []netip.Addr, known bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.byAddr[src]
	if a == nil {
		return nil, false, nil
	}
	ok, anyPort, ports := a.policy.NamePorts(name)
	if !ok {
		return nil, true, nil
	}
	for _, ip := range addrs {
		// A name never opens what is always refused (DNS rebinding onto
		// the host's networks, metadata): only an explicit range does.
		if refusedFor(m.refused, ip) && !a.policy.ExplicitlyAllows(ip) {
			continue
		}
		allowed = append(allowed, ip)
	}
	if err := m.table.allowAddrs(a.rules, allowed, anyPort, ports); err != nil {
		return nil, true, err
	}
	a.resolved[name] = append(a.resolved[name], allowed...)
	return allowed, true, nil
}

// nameAllowed says whether the sandbox at src may resolve name; known is
// false for an address that is no sandbox's.
func (m *Manager) nameAllowed(src netip.Addr, name string) (ok, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.byAddr[src]
	if a == nil {
		return false, false
	}
	ok, _, _ = a.policy.NamePorts(name)
	return ok, true
}

func refusedFor(refused []netip.Prefix, a netip.Addr) bool {
	for _, p := range refused {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// NewNetNS creates a network namespace, with lo up when loopback is set
// (ModeNone has it down), on a throwaway thread so no Go code runs in it.
func NewNetNS(loopback bool) (f *os.File, err error) {
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("create network namespace: %w", err)
			return
		}
		var fd int
		if fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			err = fmt.Errorf("open network namespace: %w", err)
			return
		}
		f = os.NewFile(uintptr(fd), "netns")
		if loopback {
			if lo, lerr := netlink.LinkByName("lo"); lerr != nil {
				err = fmt.Errorf("find lo: %w", lerr)
			} else if lerr := netlink.LinkSetUp(lo); lerr != nil {
				err = fmt.Errorf("bring up lo: %w", lerr)
			}
			if err != nil {
				f.Close()
				f = nil
			}
		}
	})
	return f, err
}

// Gateway is the sandbox's gateway and resolver.
func (a *Attachment) Gateway() netip.Addr { return a.m.gw }

// ProxyURL is the proxy's URL for the sandbox's http_proxy.
func (a *Attachment) ProxyURL() string {
	return "http://" + netip.AddrPortFrom(a.m.gw, ProxyPort).String()
}

// Injections are the sandbox's header injections.
func (a *Attachment) Injections() []Injection { return a.inject }

// ResolvConf is what the sandbox's /etc/resolv.conf says.
func (a *Attachment) ResolvConf() []byte { return a.m.ResolvConf() }
