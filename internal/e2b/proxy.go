package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/envd"
	"github.com/tine-run/tine/internal/inroot"
)

// dialEnvd connects to envd's socket inside the sandbox whose PID 1 is
// pid. The path is resolved inside its root (RESOLVE_IN_ROOT): a sandbox
// that replaces the socket with a symlink must not make the daemon, as
// host root, connect to a socket of the host.
func dialEnvd(ctx context.Context, pid int) (net.Conn, error) {
	r, err := inroot.Open("/proc/" + strconv.Itoa(pid) + "/root")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fd, err := r.OpenSocket(envd.Socket)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return (&net.Dialer{}).DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// transport is b's connection pool to its envd, made again when the tine
// sandbox under b changes (a resume).
func (s *Server) transport(b *box, pid int) *http.Transport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.rt != nil && b.rtPid == pid {
		return b.rt
	}
	if b.rt != nil {
		b.rt.CloseIdleConnections()
	}
	b.rt = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dialEnvd(ctx, pid) },
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	b.rtPid = pid
	return b.rt
}

// proxy sends sandbox traffic to envd in sandbox id: envd's own port
// after checking the access token, any other port through envd to the
// sandbox's loopback (public, as E2B's are by default). 502 when the
// sandbox is gone, which the SDKs read as "not running".
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id, port string) {
	b, err := s.lookup(id)
	if err != nil {
		writeError(w, errorf(http.StatusBadGateway, "sandbox %q is not running (not found)", id))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		writeError(w, errorf(http.StatusBadRequest, "sandbox port %q: want 1 to 65535", port))
		return
	}
	if port == InterpreterPort {
		s.interpreter(w, r, b)
		return
	}
	if port == EnvdPort && r.URL.Path != "/health" && !s.tokenOK(b, r) {
		writeError(w, errorf(http.StatusUnauthorized, "sandbox %q: missing or wrong X-Access-Token (the envdAccessToken of its create or connect), or a bad /files signature", id))
		return
	}
	_, pid, err := s.running(r.Context(), b)
	if err != nil {
		writeError(w, errorFrom(err))
		return
	}
	// The request body is still being forwarded when envd's answer starts
	// streaming back; without full duplex, net/http closes the body at the
	// first flush and the forwarding connection dies mid-stream.
	http.NewResponseController(w).EnableFullDuplex()
	var failed error
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "envd"})
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(envd.PortHeader)
			pr.Out.Header.Del("X-Access-Token")
			if port != EnvdPort {
				pr.Out.Header.Set(envd.PortHeader, port)
			}
		},
		Transport:     s.transport(b, pid),
		FlushInterval: -1, // Connect streams: every event as it comes
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = err
			if !errors.Is(err, context.Canceled) {
				writeError(w, errorf(http.StatusBadGateway, "sandbox %q: envd does not answer: %v", id, err))
			}
		},
	}
	p.ServeHTTP(w, r)
	if failed != nil && !errors.Is(failed, context.Canceled) {
		s.log.Debug("e2b: proxy", "sandbox", id, "err", failed)
	}
}

// tokenOK checks X-Access-Token, or the signature of a /files URL made by
// the SDK's uploadUrl/downloadUrl.
func (s *Server) tokenOK(b *box, r *http.Request) bool {
	if t := r.Header.Get("X-Access-Token"); t != "" {
		return subtle.ConstantTimeCompare([]byte(t), []byte(b.token)) == 1
	}
	return r.URL.Path == "/files" && signatureOK(b.token, r)
}

// signatureOK checks "v1_" + base64(sha256(path:operation:user:token[:expiration]))
// and that the expiration, if any, has not passed.
func signatureOK(token string, r *http.Request) bool {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// signer finds the sandbox whose token signed a /files URL.
func (s *Server) signer(r *http.Request) *box {
	for _, b := range s.sorted() {
		if signatureOK(b.token, r) {
			return b
		}
	}
	return nil
}

type disk struct {
	Total int64 `json:"disk_total"`
	Used  int64 `json:"disk_used"`
}

// envdDisk asks envd for the sandbox's disk use (statfs of its root).
func (s *Server) envdDisk(ctx context.Context, b *box) (*disk, error) {
	b.mu.Lock()
	pid := b.pid
	b.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://envd/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: s.transport(b, pid), Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var d disk
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return nil, fmt.Errorf("envd metrics: %w", err)
	}
	return &d, nil
}
