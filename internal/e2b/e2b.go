// Package e2b is tine's E2B-compatible surface: the control-plane REST
// API the E2B SDKs call (create, connect, list, get, kill, timeout, pause
// and resume, fork, snapshots, metrics) and the sandbox traffic they send
// to envd, on one TCP listener. It is a client of tine's own API (the
// daemon's unix socket): an E2B sandbox is a tine sandbox with the tine
// binary bound in and `tine envd` (internal/envd) serving inside it, which
// this package reaches through the sandbox's root.
//
// Requests carrying E2b-Sandbox-Id go to that sandbox before any API path
// is matched (GET /health exists in both); so do requests whose Host is
// {port}-{id}.{domain}. Everything else is the control plane, behind the
// API key (X-API-KEY, or Authorization: Bearer). Sandbox traffic to envd
// needs the sandbox's access token (X-Access-Token), or a /files URL
// signed with it.
package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/client"
)

// EnvdPort is envd's port as the SDKs address it.
const EnvdPort = "49983"

// Config is how the E2B surface behaves.
type Config struct {
	// Client reaches tine's daemon.
	Client *client.Client
	// Keys are the API keys accepted (at least one).
	Keys []string
	// EnvdBinary is the host path of the tine binary bound into every
	// sandbox to run envd.
	EnvdBinary string
	// Domain is returned to the SDKs and routes Host {port}-{id}.{domain}
	// ("" returns none: the SDKs then need E2B_SANDBOX_URL).
	Domain string
	// BaseTemplates are the template ids that mean the host's OS view; the
	// first is what a create without one reports (default "base").
	BaseTemplates []string
	// DefaultMemoryBytes is the memory limit the daemon gives a sandbox
	// that asks for none (reported as memoryMB).
	DefaultMemoryBytes int64
	// ResumeTimeout is the timeout a sandbox auto-resumed by traffic gets
	// (default 5m).
	ResumeTimeout time.Duration
	// StateFile keeps the paused sandboxes across a restart (persist.go);
	// "" keeps nothing: they are deleted with the daemon.
	StateFile string
	// MCP, when set, is served at /v1/mcp behind the API key.
	MCP    http.Handler
	Logger *slog.Logger
}

// Server is the E2B surface's state and handler.
type Server struct {
	cfg Config
	log *slog.Logger
	api http.Handler

	mu    sync.Mutex
	boxes map[string]*box

	stop context.CancelFunc
	done chan struct{}
}

// New starts the E2B surface's expiry loop; Close stops it and kills the
// sandboxes it made.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("e2b: no client for the daemon")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("e2b: no API key")
	}
	if cfg.EnvdBinary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("e2b: own executable for envd: %w", err)
		}
		cfg.EnvdBinary = self
	}
	if len(cfg.BaseTemplates) == 0 {
		cfg.BaseTemplates = []string{"base", InterpreterTemplate}
	}
	if cfg.ResumeTimeout <= 0 {
		cfg.ResumeTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger, boxes: map[string]*box{}, stop: stop, done: make(chan struct{})}
	s.api = s.routes()
	if err := s.restore(); err != nil {
		stop()
		return nil, err
	}
	go func() {
		defer close(s.done)
		s.expireLoop(ctx)
	}()
	return s, nil
}

// Close stops the expiry loop and kills every running E2B sandbox (the
// daemon destroys them too when it stops). Paused ones stay, in the state
// file, for the next daemon; without a state file they are killed too,
// which frees their pause snapshots.
func (s *Server) Close() {
	s.stop()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range s.sorted() {
		b.mu.Lock()
		keep := b.state == statePaused && s.cfg.StateFile != ""
		b.mu.Unlock()
		if !keep {
			s.kill(ctx, b)
		}
	}
	s.persist()
}

// hostRoute is {port}-{id}.{domain}: E2B ids are lowercase alphanumeric,
// so the first hyphen ends the port.
var hostRoute = regexp.MustCompile(`^([0-9]+)-([a-z0-9]+)\.([^:]+)(:[0-9]+)?$`)

// ServeHTTP routes sandbox traffic by header, then by Host, then serves
// the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := r.Header.Get("E2b-Sandbox-Port")
		if port == "" {
			port = EnvdPort
		}
		s.proxy(w, r, id, port)
		return
	}
	if m := hostRoute.FindStringSubmatch(r.Host); m != nil && (s.cfg.Domain == "" || m[3] == s.cfg.Domain) {
		if _, err := s.lookup(m[2]); err == nil || s.cfg.Domain != "" {
			s.proxy(w, r, m[2], m[1])
			return
		}
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
		// An upload or download URL opened without the routing header (a
		// browser): the signature names the sandbox whose token made it.
		if b := s.signer(r); b != nil {
			s.proxy(w, r, b.id, EnvdPort)
			return
		}
	}
	if !s.authorized(r) {
		writeError(w, errorf(http.StatusUnauthorized, "missing or invalid API key: send it as X-API-KEY (E2B_API_KEY); tine serve --e2b printed where it keeps it"))
		return
	}
	s.api.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if key == "" {
		return false
	}
	ok := false
	for _, k := range s.cfg.Keys {
		if subtle.ConstantTimeCompare([]byte(key), []byte(k)) == 1 {
			ok = true
		}
	}
	return ok
}

// KeyPattern is the shape of the keys tine makes, which the Python SDK
// checks on the client side.
var KeyPattern = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

// LoadOrCreateKey reads the API key at path, or makes one there (mode
// 0600) shaped e2b_<40 hex digits>.
func LoadOrCreateKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		key := strings.TrimSpace(string(b))
		if !KeyPattern.MatchString(key) {
			return "", fmt.Errorf("%s does not hold an E2B key (e2b_ and hex digits); remove it to get a new one", path)
		}
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read E2B key: %w", err)
	}
	raw := make([]byte, 20)
	rand.Read(raw)
	key := "e2b_" + hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("E2B key directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create E2B key: %w", err)
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write E2B key: %w", err)
	}
	return key, f.Close()
}
