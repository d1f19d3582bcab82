package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// Where a desktop's guest serves OSWorld's API, and forwards Chromium's
// DevTools port, inside its sandbox.
const (
	guestOSWorldSocket = "/run/tine-osworld.sock"
	guestCDPSocket     = "/run/tine-cdp.sock"
)

// publish listens on a TCP port of its own for one of b's guest sockets
// (OSWorld's API, Chromium's DevTools) and forwards each connection to it,
// until the sandbox ends. OSWorld's client reaches a guest as plain
// http://host:port/, so these cannot share the daemon's listener behind a
// path prefix. Each connection counts as activity for the idle timeout.
func (s *Server) publish(b *box, socket, what string) (string, error) {
	host := s.cfg.OSWorldHost
	if host == "" {
		host = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("publish the desktop's %s: %w", what, err)
	}
	root := b.inst.Root()
	go func() {
		<-b.inst.Done()
		l.Close()
	}()
	go func() {
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
			go forwardToGuest(c, root, socket, b.inst.Done())
		}
	}()
	return l.Addr().String(), nil
}

// forwardToGuest splices c to the guest's socket until either side
// closes or the sandbox ends.
func forwardToGuest(c net.Conn, root, socket string, done <-chan struct{}) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g, err := dialInRoot(ctx, root, socket)
	cancel()
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nthe desktop's guest does not answer: "+err.Error()+"\n")
		return
	}
	defer g.Close()
	finished := make(chan struct{}, 2)
	go func() { io.Copy(g, c); g.(*net.UnixConn).CloseWrite(); finished <- struct{}{} }()
	go func() { io.Copy(c, g); c.(*net.TCPConn).CloseWrite(); finished <- struct{}{} }()
	for range 2 {
		select {
		case <-finished:
		case <-done:
			return
		}
	}
}
