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
		defer func() {
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
			dials.Add(1)
			go func() {
				if passed != "" && passToGuest(c, root, passed) {
					dials.Done()
					return
				}
				forwardToGuest(c, func(ctx context.Context) (net.Conn, error) {
					defer dials.Done()
					return dialIn(ctx, root, socket)
				}, b.inst.Done())
			}()
		}
	}()
	return l.Addr().String(), nil
}

// passToGuest passes c to the guest's socket at path in root and closes
// the daemon's copy, or says it could not (c is then still open).
func passToGuest(c net.Conn, root *inroot.Root, path string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	u, err := dialIn(ctx, root, path)
	cancel()
	if err != nil {
		return false
	}
	defer u.Close()
	if err := connpass.Pass(u.(*net.UnixConn), c.(*net.TCPConn)); err != nil {
		return false
	}
	c.Close()
	return true
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
