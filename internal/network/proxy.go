package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ProxyPort is the port of the HTTP proxy on the gateway.
const ProxyPort = 3128

// Injection adds headers to a sandbox's plain-HTTP requests for Host
// through tine's proxy, so a secret (an API key) never enters the
// sandbox. With TLS the proxy sends the request on over HTTPS (port 443,
// the host's trust store): the sandbox asks for http://HOST/... and the
// secret still travels encrypted beyond the host (ADR 0018).
type Injection struct {
	Host    string
	Headers map[string]string
	TLS     bool
}

// ParseInjection parses --inject [https://]HOST:HEADER=VALUE.
func ParseInjection(s string) (Injection, error) {
	bad := func(why string) (Injection, error) {
		return Injection{}, fmt.Errorf("%w: inject %q: %s; want [https://]HOST:HEADER=VALUE, e.g. https://api.example.com:Authorization=Bearer KEY", ErrInvalid, redactValue(s), why)
	}
	var in Injection
	rest := s
	if r, ok := strings.CutPrefix(rest, "https://"); ok {
		in.TLS, rest = true, r
	} else if r, ok := strings.CutPrefix(rest, "http://"); ok {
		rest = r
	}
	host, hv, ok := strings.Cut(rest, ":")
	if !ok {
		return bad("no header")
	}
	h, v, ok := strings.Cut(hv, "=")
	if !ok || h == "" {
		return bad("no HEADER=VALUE")
	}
	in.Host = strings.ToLower(host)
	if err := checkName(in.Host); err != nil {
		return bad(err.Error())
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return bad("a header name has letters, digits and '-'")
		}
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return bad("a header value has no line breaks")
	}
	in.Headers = map[string]string{http.CanonicalHeaderKey(h): v}
	return in, nil
}

// redactValue hides what follows '=' in an --inject value, for errors.
func redactValue(s string) string {
	if i := strings.IndexByte(s, '='); i >= 0 {
		return s[:i+1] + "…"
	}
	return s
}

// proxy is the HTTP proxy egress sandboxes may use: plain HTTP requests
// (with their injections) and CONNECT tunnels, both under the sandbox's
// policy, checked here as the kernel checks direct packets: the proxy
// connects from the host, outside the sandbox's chain.
type proxy struct {
	m   *Manager
	srv *http.Server
	ln  net.Listener
}

func startProxy(m *Manager, listen netip.AddrPort) (*proxy, error) {
	ln, err := net.Listen("tcp4", listen.String())
	if err != nil {
		return nil, fmt.Errorf("proxy: listen on %s: %w", listen, err)
	}
	px := &proxy{m: m, ln: ln}
	px.srv = &http.Server{Handler: px, ReadHeaderTimeout: 30 * time.Second}
	go px.srv.Serve(ln)
	return px, nil
}

func (px *proxy) close() { px.srv.Close() }

func (px *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "tine proxy: unknown client", http.StatusForbidden)
		return
	}
	src := ap.Addr().Unmap()
	if r.Method == http.MethodConnect {
		px.connect(w, r, src)
		return
	}
	if r.URL.Host == "" || r.URL.Scheme != "http" {
		http.Error(w, "tine proxy: send absolute http:// URLs (for https, CONNECT)", http.StatusBadRequest)
		return
	}
	host, port := r.URL.Hostname(), r.URL.Port()
	inj, known := px.m.injectionFor(src, host)
	if !known {
		http.Error(w, "tine proxy: not a sandbox's address", http.StatusForbidden)
		return
	}
	scheme := "http"
	if inj != nil && inj.TLS {
		scheme, port = "https", "443"
	}
	if port == "" {
		port = "80"
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = scheme, net.JoinHostPort(host, port)
	out.Host = r.URL.Host
	if inj != nil {
		out.Host = host
	}
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		out.Header.Del(h)
	}
	if inj != nil {
		for k, v := range inj.Headers {
			out.Header.Set(k, v) // the sandbox's own value never passes
		}
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return px.dial(ctx, src, addr)
	}, ForceAttemptHTTP2: false, ResponseHeaderTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, errRefused) {
			code = http.StatusForbidden
		}
		http.Error(w, "tine proxy: "+err.Error(), code)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (px *proxy) connect(w http.ResponseWriter, r *http.Request, src netip.Addr) {
	up, err := px.dial(r.Context(), src, r.Host)
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, errRefused) {
			code = http.StatusForbidden
		}
		http.Error(w, "tine proxy: "+err.Error(), code)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "tine proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	c, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Peek(n)
		up.Write(b)
	}
	splice(c, up)
}

var errRefused = errors.New("refused by the sandbox's egress policy")

// dial connects to hostport for the sandbox at src if its policy allows
// it: a name the policy answers (resolved by the resolver's upstream,
// never to an always-refused address unless explicitly allowed), or an
// address the policy allows.
func (px *proxy) dial(ctx context.Context, src netip.Addr, hostport string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", ps, err)
	}
	addrs, err := px.m.proxyTargets(src, strings.ToLower(host), uint16(port))
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// proxyTargets are the addresses the sandbox at src may reach for host
// on port through the proxy.
func (m *Manager) proxyTargets(src netip.Addr, host string, port uint16) ([]netip.Addr, error) {
	m.mu.Lock()
	a := m.byAddr[src]
	var p Policy
	if a != nil {
		p = a.policy
	}
	refused, upstream := m.refused, ""
	if m.resolver != nil {
		upstream = m.resolver.upstream
	}
	m.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("%w: not a sandbox's address", errRefused)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if p.addrAllowed(ip, port, refused) {
			return []netip.Addr{ip}, nil
		}
		return nil, fmt.Errorf("%w: %s", errRefused, ip)
	}
	ok, anyPort, ports := p.NamePorts(host)
	if !ok || !(anyPort || slices.Contains(ports, port)) {
		return nil, fmt.Errorf("%w: %s port %d", errRefused, host, port)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(host), dns.TypeA)
	resp, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, upstream)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		if ar, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(ar.A.To4())
			if denied(p, ip, port) || refusedFor(refused, ip) && !p.ExplicitlyAllows(ip) {
				continue
			}
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s has no address the policy allows", errRefused, host)
	}
	return out, nil
}

// denied says whether a deny range covers ip on port.
func denied(p Policy, ip netip.Addr, port uint16) bool {
	for _, r := range p.Deny {
		if !r.IsName() && r.Net.Contains(ip) && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return false
}

// addrAllowed is the kernel chain's decision for a raw address (see
// nft_linux.go), for connections the proxy makes.
func (p Policy) addrAllowed(ip netip.Addr, port uint16, refused []netip.Prefix) bool {
	if denied(p, ip, port) {
		return false
	}
	for _, r := range p.Allow {
		if !r.IsName() && r.Net.Contains(ip) && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return !refusedFor(refused, ip) && p.Open()
}

// injectionFor is the injection of the sandbox at src for host (nil:
// none); known is false for an address that is no sandbox's.
func (m *Manager) injectionFor(src netip.Addr, host string) (inj *Injection, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.byAddr[src]
	if a == nil {
		return nil, false
	}
	for i := range a.inject {
		if a.inject[i].Host == strings.ToLower(host) {
			return &a.inject[i], true
		}
	}
	return nil, true
}
