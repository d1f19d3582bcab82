package network

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/internal/kernel/osthread"
	"golang.org/x/sys/unix"
)

// PortSpec is one published port: HostIP:HostPort on the host reaches
// Port in the sandbox.
type PortSpec struct {
	HostIP   netip.Addr
	HostPort uint16 // 0: the kernel picks
	Port     uint16
	Proto    string // "tcp" or "udp"
}

// String is the spec as --publish takes it.
func (p PortSpec) String() string {
	return fmt.Sprintf("%s:%d:%d/%s", p.HostIP, p.HostPort, p.Port, p.Proto)
}

// ParsePort parses --publish [ADDR:]HOSTPORT:PORT[/tcp|udp]; the address
// defaults to 127.0.0.1 (the host only), HOSTPORT 0 lets the kernel pick.
func ParsePort(s string) (PortSpec, error) {
	bad := func(why string) (PortSpec, error) {
		return PortSpec{}, fmt.Errorf("%w: publish %q: %s; want [ADDR:]HOSTPORT:PORT[/tcp|udp], e.g. 8080:80 or 0.0.0.0:5353:53/udp", ErrInvalid, s, why)
	}
	p := PortSpec{HostIP: netip.AddrFrom4([4]byte{127, 0, 0, 1}), Proto: "tcp"}
	body, proto, ok := strings.Cut(s, "/")
	if ok {
		if proto != "tcp" && proto != "udp" {
			return bad("the protocol is tcp or udp")
		}
		p.Proto = proto
	}
	parts := strings.Split(body, ":")
	switch len(parts) {
	case 2:
	case 3:
		a, err := netip.ParseAddr(parts[0])
		if err != nil || !a.Is4() {
			return bad("the address must be an IPv4 address")
		}
		p.HostIP, parts = a, parts[1:]
	default:
		return bad("wrong number of parts")
	}
	hp, err := strconv.ParseUint(parts[0], 10, 16)
	if err != nil {
		return bad("the host port must be 0 to 65535")
	}
	cp, err := strconv.ParseUint(parts[1], 10, 16)
	if err != nil || cp == 0 {
		return bad("the sandbox's port must be 1 to 65535")
	}
	p.HostPort, p.Port = uint16(hp), uint16(cp)
	return p, nil
}

// MakePort checks a published port given by its parts (the API's form):
// hostIP "" is 127.0.0.1, proto "" is tcp.
func MakePort(hostIP string, hostPort, port int, proto string) (PortSpec, error) {
	bad := func(why string) (PortSpec, error) {
		return PortSpec{}, fmt.Errorf("%w: publish port %d: %s", ErrInvalid, port, why)
	}
	p := PortSpec{HostIP: netip.AddrFrom4([4]byte{127, 0, 0, 1}), Proto: "tcp"}
	if hostIP != "" {
		a, err := netip.ParseAddr(hostIP)
		if err != nil || !a.Is4() {
			return bad(fmt.Sprintf("host_ip %q: want an IPv4 address of the host (egress has no IPv6)", hostIP))
		}
		p.HostIP = a
	}
	switch proto {
	case "", "tcp":
	case "udp":
		p.Proto = proto
	default:
		return bad(fmt.Sprintf("protocol %q: want tcp or udp", proto))
	}
	if hostPort < 0 || hostPort > 65535 {
		return bad(fmt.Sprintf("host_port %d: want 0 (any) to 65535", hostPort))
	}
	if port < 1 || port > 65535 {
		return bad("the sandbox's port must be 1 to 65535")
	}
	p.HostPort, p.Port = uint16(hostPort), uint16(port)
	return p, nil
}

// Published is a port published by a relay in the daemon: each
// connection (or UDP peer) to the host address gets its own socket made
// in the sandbox's network namespace, to the sandbox's port. Only that
// port is reachable through it; the sandbox's other ports are not.
type Published struct {
	Spec  PortSpec // HostPort as bound
	close func()
}

// Close stops the relay and its connections.
func (p *Published) Close() { p.close() }

// Publish starts relaying p to target (an address inside the sandbox's
// namespace ns: its loopback or its own address).
func Publish(p PortSpec, ns *os.File, target netip.Addr) (*Published, error) {
	to := netip.AddrPortFrom(target, p.Port).String()
	listen := netip.AddrPortFrom(p.HostIP, p.HostPort).String()
	if p.Proto == "udp" {
		return publishUDP(p, ns, listen, to)
	}
	ln, err := net.Listen("tcp4", listen)
	if err != nil {
		return nil, fmt.Errorf("publish %s: listen: %w", p, err)
	}
	p.HostPort = uint16(ln.Addr().(*net.TCPAddr).Port)
	var wg sync.WaitGroup
	conns := map[net.Conn]struct{}{}
	var mu sync.Mutex
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
		return true
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				in, err := DialIn(ns, "tcp4", to)
				if err != nil {
					return // the client sees the connection close
				}
				defer in.Close()
				if !track(c, true) || !track(in, true) {
					return
				}
				defer track(c, false)
				defer track(in, false)
				splice(c, in)
			})
		}
	})
	return &Published{Spec: p, close: func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	}}, nil
}

// splice copies both ways until both sides are done.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(a, b)
	go half(b, a)
	<-done
	<-done
}

// udpIdle is how long a UDP peer's flow lives without a datagram.
const udpIdle = 2 * time.Minute

func publishUDP(p PortSpec, ns *os.File, listen, to string) (*Published, error) {
	pc, err := net.ListenPacket("udp4", listen)
	if err != nil {
		return nil, fmt.Errorf("publish %s: listen: %w", p, err)
	}
	p.HostPort = uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	var mu sync.Mutex
	flows := map[string]net.Conn{}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, peer, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			in := flows[peer.String()]
			mu.Unlock()
			if in == nil {
				if in, err = DialIn(ns, "udp4", to); err != nil {
					continue
				}
				mu.Lock()
				flows[peer.String()] = in
				mu.Unlock()
				wg.Go(func() {
					defer func() {
						mu.Lock()
						delete(flows, peer.String())
						mu.Unlock()
						in.Close()
					}()
					back := make([]byte, 64<<10)
					for {
						in.SetReadDeadline(time.Now().Add(udpIdle))
						n, err := in.Read(back)
						if err != nil {
							return
						}
						pc.WriteTo(back[:n], peer)
					}
				})
			}
			in.Write(buf[:n])
		}
	})
	return &Published{Spec: p, close: func() {
		pc.Close()
		mu.Lock()
		for _, c := range flows {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}}, nil
}

// DialIn connects to addr from inside the network namespace ns: the
// socket is made on a thread in ns, and stays there.
func DialIn(ns *os.File, network, addr string) (c net.Conn, err error) {
	osthread.Throwaway(func() {
		if err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("enter the sandbox's network namespace: %w", err)
			return
		}
		c, err = net.DialTimeout(network, addr, 10*time.Second)
	})
	if err != nil && !errors.Is(err, unix.ECONNREFUSED) {
		return nil, err
	}
	return c, err
}
