package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/network"
)

// Listen says where a daemon listens.
type Listen struct {
	// Socket is the unix socket's path; it is made with mode SocketMode.
	Socket     string
	SocketMode os.FileMode
	// TCP is an address for the TCP listener ("" for none), which needs
	// Token.
	TCP   string
	Token string
}

// Run is `tine serve`: it reaps what a previous daemon left, listens, and
// serves until ctx ends; then it stops listening, waits briefly for
// requests in flight, and destroys every sandbox.
func Run(ctx context.Context, cfg Config, l Listen) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	s.reapLeftovers()
	if have, want := raiseOpenFiles(s.cfg.MaxSandboxes); have < want {
		s.log.Warn("open files limit below what the sandbox budget may need: creates can fail with EMFILE before --max-sandboxes is reached; raise the hard limit (ulimit -Hn, LimitNOFILE=) or run as root",
			"limit", have, "want", want, "max_sandboxes", s.cfg.MaxSandboxes)
	}

	var servers []*http.Server
	errs := make(chan error, 2)
	serve := func(ln net.Listener, h http.Handler, t Timeouts) {
		srv := NewHTTPServer(h, t)
		servers = append(servers, srv)
		go func() { errs <- srv.Serve(ln) }()
	}
	ln, err := ListenUnix(l.Socket, l.SocketMode)
	if err != nil {
		return err
	}
	defer ln.Close()
	serve(ln, s.Handler(), unixTimeouts)
	s.log.Info("listening", "socket", l.Socket)
	if l.TCP != "" {
		if l.Token == "" {
			return errors.New("a TCP listener needs a token")
		}
		tl, err := net.Listen("tcp", l.TCP)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", l.TCP, err)
		}
		defer tl.Close()
		serve(tl, s.TokenHandler(l.Token), TCPTimeouts)
		s.log.Info("listening", "tcp", tl.Addr().String())
	}

	select {
	case <-ctx.Done():
	case err := <-errs:
		return fmt.Errorf("serve: %w", err)
	}
	s.log.Info("shutting down")
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		srv.Shutdown(shut)
	}
	return nil
}

// reapLeftovers kills and removes the cgroups of sandboxes whose daemon
// died (their processes died with it; their mounts lived only in their
// own mount namespaces).
func (s *Server) reapLeftovers() {
	h, err := cgroup.Detect()
	if err != nil {
		s.log.Warn("cannot look for leftovers", "err", err)
		return
	}
	removed, err := h.Reap()
	for _, d := range removed {
		s.log.Info("reaped a dead daemon's cgroup", "dir", d)
	}
	if err != nil {
		s.log.Warn("reap leftovers", "err", err)
	}
	gone, err := s.net.Reap()
	for _, what := range gone {
		s.log.Info("reaped a dead daemon's network state", "what", what)
	}
	switch {
	case errors.Is(err, network.ErrInUse):
		s.log.Info("egress networking is off for this daemon", "why", err)
	case err != nil:
		s.log.Warn("reap network leftovers", "err", err)
	}
}

// ListenUnix listens on a unix socket at path with the given mode. A
// socket file already there is removed only when nothing answers on it:
// a live daemon is never displaced.
func ListenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is no socket; remove it or give another --socket", path)
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("another daemon is serving on %s; stop it, or give another --socket", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("%s exists and is not a stale socket (%v); remove it or give another --socket", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	// The socket is born with mode's permissions (no window in which a
	// wider umask lets others connect); the daemon creates no other files
	// while it starts, so changing the process umask briefly is safe.
	old := syscall.Umask(int(0o777 &^ mode.Perm()))
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}
