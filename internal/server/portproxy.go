package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/tine-run/tine/internal/network"
)

// PortHeader routes a request on the daemon's TCP listener into a
// sandbox's port published with "proxy": true: "Tine-Port: ID:PORT".
// Many sandboxes' servers are then behind the one listener, under its
// token.
const PortHeader = "Tine-Port"

// portProxy serves requests that carry PortHeader by proxying them (HTTP,
// WebSocket upgrades too) into the sandbox; others go to next. The
// daemon's token (Authorization) and the routing header never reach the
// sandbox.
func (s *Server) portProxy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Header.Get(PortHeader)
		if route == "" {
			next.ServeHTTP(w, r)
			return
		}
		target, ns, err := s.proxiedPort(route)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
				pr.Out.Host = pr.In.Host
				pr.Out.Header.Del("Authorization")
				pr.Out.Header.Del(PortHeader)
			},
			Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
				return network.DialIn(ns, "tcp4", target)
			}, DisableKeepAlives: true},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				http.Error(w, fmt.Sprintf("tine: sandbox port %s: %v", route, err), http.StatusBadGateway)
			},
		}
		rp.ServeHTTP(w, r)
	})
}

// proxiedPort finds the sandbox and port a PortHeader names; only a port
// published with "proxy" is reachable.
func (s *Server) proxiedPort(route string) (target string, ns *os.File, err error) {
	id, ps, ok := strings.Cut(route, ":")
	port, perr := strconv.Atoi(ps)
	if !ok || perr != nil {
		return "", nil, fmt.Errorf("%w: %s %q: want ID:PORT", ErrInvalidArgument, PortHeader, route)
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil {
		return "", nil, fmt.Errorf("%w %q (list them with GET /v1/sandboxes)", ErrNoSandbox, id)
	}
	bn := b.net
	if bn == nil || !bn.proxied(port) {
		return "", nil, fmt.Errorf("%w: sandbox %s has no port %d published through the daemon (publish it with \"proxy\": true)", ErrNoRoute, id, port)
	}
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if bn.att != nil {
		addr = bn.att.Addr()
	}
	return netip.AddrPortFrom(addr, uint16(port)).String(), bn.ns, nil
}
