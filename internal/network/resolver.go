package network

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// resolver is the DNS server egress sandboxes use (their resolv.conf names
// it). It tells sandboxes apart by source address (the nftables chain of
// each drops packets with a forged one), answers only the names a
// sandbox's policy allows, opens the answered addresses in the sandbox's
// sets before the answer leaves, and answers with IPv4 addresses only.
type resolver struct {
	m        *Manager
	upstream string
	udp, tcp *dns.Server
	client   *dns.Client
}

func startResolver(m *Manager, listen netip.AddrPort, upstream string) (*resolver, error) {
	if upstream == "" {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(cc.Servers) == 0 {
			return nil, fmt.Errorf("no upstream DNS server: /etc/resolv.conf names none (%v); give the daemon --net-upstream HOST:PORT", err)
		}
		upstream = net.JoinHostPort(cc.Servers[0], cc.Port)
	}
	r := &resolver{m: m, upstream: upstream, client: &dns.Client{Timeout: 5 * time.Second}}
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(listen))
	if err != nil {
		return nil, fmt.Errorf("resolver: listen on %s: %w", listen, err)
	}
	ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(listen))
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("resolver: listen on %s/tcp: %w", listen, err)
	}
	r.udp = &dns.Server{PacketConn: pc, Handler: r}
	r.tcp = &dns.Server{Listener: ln, Handler: r}
	go r.udp.ActivateAndServe()
	go r.tcp.ActivateAndServe()
	return r, nil
}

func (r *resolver) close() {
	r.udp.Shutdown()
	r.tcp.Shutdown()
}

// ServeDNS answers one query of a sandbox.
func (r *resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply := func(rcode int, why string) {
		m := new(dns.Msg)
		m.SetRcode(req, rcode)
		m.RecursionAvailable = true
		if why != "" {
			// Extended DNS Error 15 "Blocked", for whoever debugs it.
			o := m.IsEdns0()
			if o == nil && req.IsEdns0() != nil {
				m.SetEdns0(1232, false)
				o = m.IsEdns0()
			}
			if o != nil {
				o.Option = append(o.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: why})
			}
		}
		w.WriteMsg(m)
	}
	src, ok := addrOf(w.RemoteAddr())
	if !ok || len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		reply(dns.RcodeRefused, "")
		return
	}
	q := req.Question[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	allowed, known := r.m.nameAllowed(src, name)
	switch {
	case !known:
		reply(dns.RcodeRefused, "")
		return
	case !allowed:
		reply(dns.RcodeNameError, "tine: "+name+" is not allowed by this sandbox's egress policy")
		return
	case q.Qclass != dns.ClassINET:
		reply(dns.RcodeRefused, "")
		return
	case q.Qtype != dns.TypeA:
		// Only A answers open addresses; anything else (AAAA, TXT, ...)
		// is answered empty so clients fall back to IPv4.
		m := new(dns.Msg)
		m.SetReply(req)
		m.RecursionAvailable = true
		w.WriteMsg(m)
		return
	}
	up := new(dns.Msg)
	up.SetQuestion(dns.Fqdn(name), dns.TypeA)
	up.RecursionDesired = true
	resp, _, err := r.client.Exchange(up, r.upstream)
	if err != nil || resp == nil {
		reply(dns.RcodeServerFailure, "")
		return
	}
	if resp.Rcode != dns.RcodeSuccess {
		reply(resp.Rcode, "")
		return
	}
	var addrs []netip.Addr
	for _, rr := range resp.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A.To4()); ok {
				addrs = append(addrs, a)
			}
		}
	}
	open, _, err := r.m.answered(src, name, addrs)
	if err != nil {
		reply(dns.RcodeServerFailure, "")
		return
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	for _, a := range open {
		// Under the asked name, without the CNAME chain: the chain's
		// names are not the policy's business, the addresses are.
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
	}
	w.WriteMsg(m)
}

func addrOf(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	}
	return netip.Addr{}, false
}

// ipnet converts for netlink.
func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
