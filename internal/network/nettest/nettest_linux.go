// Package nettest makes peers for network tests and benchmarks: network
// namespaces on this machine, joined to the host by veth pairs, with a
// small HTTP server, a DNS zone or a bulk-data server inside. Nothing of
// it reaches a real external address.
package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Host is one peer: a namespace at Addr, routed from the host as Addr/32
// through its link.
type Host struct {
	Addr netip.Addr
	ns   *os.File
	link string

	mu      sync.Mutex
	headers []http.Header
	closers []func()
}

// RandTag is n random hex digits, for names a test owns.
func RandTag(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// onThreadAndBack runs fn on a locked thread and then puts the thread
// back into the network namespace it had, so the thread lives on. A test
// process must not end threads (as osthread.Throwaway does): a child it
// started with Pdeathsig (a daemon) gets that signal when the thread that
// forked it ends. Only when the way back fails does the thread end.
func onThreadAndBack(fn func() error) (err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, oerr := os.Open("/proc/thread-self/ns/net")
		if oerr != nil {
			err = oerr
			return // still locked: the thread ends
		}
		defer orig.Close()
		err = fn()
		if berr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); berr != nil {
			err = errors.Join(err, fmt.Errorf("back to the test's network namespace: %w", berr))
			return
		}
		runtime.UnlockOSThread()
	}()
	<-done
	return err
}

// NewHost makes a peer at addr behind link linkName, whose host side has
// hostSide.
func NewHost(linkName string, hostSide, addr netip.Addr) (_ *Host, err error) {
	var nsf *os.File
	err = onThreadAndBack(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		nsf = os.NewFile(uintptr(fd), "netns")
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		if nsf != nil {
			nsf.Close()
		}
		return nil, fmt.Errorf("test host namespace: %w", err)
	}
	h := &Host{Addr: addr, ns: nsf, link: linkName}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: linkName}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsf.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("test host link %s: %w", linkName, err)
	}
	host, err := netlink.LinkByName(linkName)
	if err != nil {
		return nil, err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(hostSide, 32)), Peer: ipnet(netip.PrefixFrom(addr, 32))}); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, err
	}
	nh, err := netlink.NewHandleAt(netns.NsHandle(int(nsf.Fd())))
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	eth0, err := nh.LinkByName("eth0")
	if err != nil {
		return nil, err
	}
	if err := nh.AddrAdd(eth0, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(addr, 32)), Peer: ipnet(netip.PrefixFrom(hostSide, 32))}); err != nil {
		return nil, err
	}
	if err := nh.LinkSetUp(eth0); err != nil {
		return nil, err
	}
	if err := nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: hostSide.AsSlice()}); err != nil {
		return nil, err
	}
	return h, nil
}

// NS is the host's network namespace.
func (h *Host) NS() *os.File { return h.ns }

// Close stops the servers and removes the link and namespace.
func (h *Host) Close() {
	for _, c := range h.closers {
		c()
	}
	h.closers = nil
	if l, err := netlink.LinkByName(h.link); err == nil {
		netlink.LinkDel(l)
	}
	h.ns.Close()
}

// InNS runs fn on a thread in the namespace ns: sockets it opens stay
// there. The thread then goes back to the caller's namespace and lives on
// (see onThreadAndBack).
func InNS(ns *os.File, fn func() error) error {
	return onThreadAndBack(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return err
		}
		return fn()
	})
}

// Listen opens a listener inside the host's namespace.
func (h *Host) Listen(network, addr string) (ln net.Listener, err error) {
	err = InNS(h.ns, func() error {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ServeHTTP answers every request on port 80 with "hello from <name>"
// and records its headers (Headers); GET /bulk?n=N sends N zero bytes.
func (h *Host) ServeHTTP(name string) error {
	ln, err := h.Listen("tcp4", ":80")
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.headers = append(h.headers, r.Header.Clone())
		h.mu.Unlock()
		if r.URL.Path == "/bulk" {
			var n int64
			fmt.Sscan(r.URL.Query().Get("n"), &n)
			for n > 0 {
				k := min(n, int64(len(zeros)))
				if _, err := w.Write(zeros[:k]); err != nil {
					return
				}
				n -= k
			}
			return
		}
		fmt.Fprintf(w, "hello from %s", name)
	})}
	go srv.Serve(ln)
	h.closers = append(h.closers, func() { srv.Close() })
	return nil
}

// Headers are the request headers the HTTP server received so far.
func (h *Host) Headers() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...)
}

// ServeDNS answers A queries from zone (name → IPv4 address) on port 53.
func (h *Host) ServeDNS(zone map[string]string) error {
	var pc net.PacketConn
	err := InNS(h.ns, func() (err error) {
		pc, err = net.ListenPacket("udp4", ":53")
		return err
	})
	if err != nil {
		return err
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			w.WriteMsg(m)
			return
		}
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
	h.closers = append(h.closers, func() { srv.Shutdown() })
	return nil
}

// ServeDiscard accepts TCP on port and reads everything away (bulk
// upload throughput), answering each connection's first byte with one.
func (h *Host) ServeDiscard(port int) error {
	ln, err := h.Listen("tcp4", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	h.closers = append(h.closers, func() { ln.Close() })
	return nil
}
