package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tine-run/tine/internal/connpass"
	"github.com/tine-run/tine/internal/inroot"
	"golang.org/x/sys/unix"
)

// Where a desktop's guest serves OSWorld's API, and forwards Chromium's
// DevTools port, inside its sandbox.
const (
	guestOSWorldSocket = "/run/tine-osworld.sock"
	guestCDPSocket     = "/run/tine-cdp.sock"
	// The guest serves OSWorld's API on the connections the daemon
	// passes to this socket (internal/connpass).
	guestOSWorldPassed = "/run/tine-osworld-passed.sock"
)

// publish listens on a TCP port of its own for one of b's guest sockets
// (OSWorld's API, Chromium's DevTools) and forwards each connection to it,
// until the sandbox ends. OSWorld's client reaches a guest as plain
// http://host:port/, so these cannot share the daemon's listener behind a
// path prefix. Each connection counts as activity for the idle timeout.
//
// When passed is set, a connection is first passed whole to the guest on
// that socket instead (internal/connpass): the guest then talks to the
// client with no copy through the daemon. A guest that does not listen
// there (one restored from an older snapshot) gets the forward.
func (s *Server) publish(b *box, socket, passed, what string) (string, error) {
	host := s.cfg.OSWorldHost
	if host == "" {
		host = "127.0.0.1"
	}
	// The sandbox's root is opened once, not for every connection (OSWorld's
	// client opens one per request). It is closed only once the listener has
	// stopped and no dial uses it: a closed descriptor's number can be
	// reused, and a dial resolving the socket under another directory
	// would leave the sandbox.
	root, err := inroot.Open(b.inst.Root())
	if err != nil {
		return "", fmt.Errorf("publish the desktop's %s: %w", what, err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		root.Close()
		return "", fmt.Errorf("publish the desktop's %s: %w", what, err)
	}
	go func() {
		<-b.inst.Done()
		l.Close()
	}()
	go func() {
		var dials sync.WaitGroup
		pass := &passer{root: root, path: passed}
		defer func() {
			pass.close()
			dials.Wait()
			root.Close()
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if err := allowedPeer(c); err != nil {
				s.log.Warn("refused a connection to a desktop's published port", "id", b.id, "port", what, "err", err)
				c.Close()
				continue
			}
			b.mu.Lock()
			b.lastActive = time.Now()
			b.mu.Unlock()
			if passed != "" && pass.pass(c.(*net.TCPConn)) {
				continue
			}
			dials.Add(1)
			go forwardToGuest(c, func(ctx context.Context) (net.Conn, error) {
				defer dials.Done()
				return dialIn(ctx, root, socket)
			}, b.inst.Done())
		}
	}()
	return l.Addr().String(), nil
}

// A passer passes connections into a guest's connpass socket, over one
// datagram socket connected when first needed and again after a failure
// (the guest restarted its listener).
type passer struct {
	root *inroot.Root
	path string
	u    *net.UnixConn
}

// pass passes c into the guest and closes the daemon's copy, or says it
// could not (c is then still open).
func (p *passer) pass(c *net.TCPConn) bool {
	for range 2 {
		if p.u == nil {
			fd, err := p.root.OpenSocket(p.path)
			if err != nil {
				return false
			}
			p.u, err = connpass.Dial(fmt.Sprintf("/proc/self/fd/%d", fd))
			unix.Close(fd)
			if err != nil {
				return false
			}
		}
		if err := connpass.Pass(p.u, c); err == nil {
			c.Close()
			return true
		}
		p.close()
	}
	return false
}

// close closes the datagram socket, if any.
func (p *passer) close() {
	if p.u != nil {
		p.u.Close()
		p.u = nil
	}
}

// forwardToGuest connects to the guest's socket with dial and copies both
// ways until either side closes or the sandbox ends.
func forwardToGuest(c net.Conn, dial func(context.Context) (net.Conn, error), done <-chan struct{}) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g, err := dial(ctx)
	cancel()
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nthe desktop's guest does not answer: "+err.Error()+"\n")
		return
	}
	defer g.Close()
	// One direction on a goroutine of its own, the other on this one.
	finished := make(chan struct{}, 1)
	go func() { io.Copy(g, c); g.(*net.UnixConn).CloseWrite(); finished <- struct{}{} }()
	io.Copy(c, g)
	c.(*net.TCPConn).CloseWrite()
	select {
	case <-finished:
	case <-done:
	}
}
