// Package server is tine's daemon: the HTTP API of api/openapi.yaml over a
// unix socket and, with a bearer token, TCP. It owns the table of live
// sandboxes and their lifecycle (create, TTL and idle expiry, delete), the
// host budget, exec (JSON and WebSocket streams), confined file access,
// metrics and logs. It reaches the kernel only through a Runtime
// (internal/sandbox) and internal/inroot.
//
// One file per resource: sandboxes.go, exec.go and exec_stream.go,
// files.go, sessions.go, run.go (one-shot runs handed over by `tine run`), health.go,
// metrics.go; errors.go holds the sentinel errors and
// statusOf, the one place an error becomes an HTTP status.
//
// A daemon that dies takes its sandboxes with it: their PID 1s get SIGKILL
// from the kernel (PR_SET_PDEATHSIG), their mounts live only in their own
// mount namespaces, and Run reaps the cgroups they leave at the next start.
// Sandboxes are not re-adopted: a restart begins with an empty table.
package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/snapshot"
)

// Defaults of Config.
const (
	DefaultMaxSandboxes   = 128
	DefaultMemory         = sandbox.DefaultMemory
	DefaultPids           = sandbox.DefaultPids
	DefaultMaxBodyBytes   = 16 << 20
	DefaultMaxFileBytes   = 1 << 30
	DefaultMaxOutputBytes = 1 << 20
	// MaxOutputCap bounds what an exec request may ask to keep.
	MaxOutputCap = 256 << 20
)

// Config is how the daemon behaves; zero fields take the defaults.
type Config struct {
	// Runtime makes the sandboxes; nil means NewRuntime(PoolSize).
	Runtime Runtime
	// OSWorldHost is the address desktops' OSWorld APIs are published on,
	// each on a port of its own (default 127.0.0.1).
	OSWorldHost string
	// GuestBinary is the tine binary desktops run as their guest (default:
	// GuestSuffix's sibling of this process's executable when there is one,
	// else the executable itself).
	GuestBinary string
	// Functions runs warm functions (nil: the function routes answer 501).
	// The server closes it.
	Functions Functions
	// PoolSize is how many sandboxes the default Runtime keeps ready for
	// one-shot runs.
	PoolSize int
	Logger   *slog.Logger
	// MaxSandboxes is the most sandboxes alive at once.
	MaxSandboxes int
	// MaxMemoryBytes bounds the sum of the live sandboxes' memory limits
	// (default: the host's physical memory).
	MaxMemoryBytes int64
	// DefaultMemoryBytes is the memory limit of a sandbox (or run) that
	// asks for none, where cgroups are driven, and what it counts against
	// MaxMemoryBytes either way.
	DefaultMemoryBytes int64
	// DefaultPids is the pids limit of a sandbox that asks for none, where
	// cgroups are driven.
	DefaultPids int64
	// MaxBodyBytes bounds JSON request bodies (exec stdin travels in them).
	MaxBodyBytes int64
	// MaxFileBytes bounds an uploaded or downloaded file or archive.
	MaxFileBytes int64
	// RetryAfter is what a 429 tells clients to wait (default 5s).
	RetryAfter time.Duration
	// ExpiryInterval is how often TTL and idle timeouts are checked
	// (default 250ms).
	ExpiryInterval time.Duration
	// StateDir holds what outlives the daemon: snapshots and their layer
	// store (empty: snapshots are unavailable).
	StateDir string
	// StreamWriteTimeout bounds one write to an exec stream's client
	// (default 1m): a client that stops reading loses its stream, and its
	// command is killed.
	StreamWriteTimeout time.Duration
	// Network gives the daemon's sandboxes (and its functions, which get
	// the same manager) their egress networks; nil: one with the default
	// name and pool. The server closes it.
	Network *network.Manager
	// Registries: mirrors and plain-HTTP registries for image pulls.
	Registries image.Registries
	// ForkSpares is how many live-fork children each forkable session
	// keeps made ahead (livefork_spares.go; 0: 1, negative: none).
	ForkSpares int
	// NoForkAhead: a forkable session's interpreter is not forked ahead
	// of its next live fork while it idles (livefork_spares.go).
	NoForkAhead bool
	// ForkAheadDelay is how long a forkable session idles before its
	// interpreter forks ahead (0: DefaultForkAheadDelay; negative: at
	// once).
	ForkAheadDelay time.Duration
}

func (c *Config) setDefaults() error {
	if c.Runtime == nil {
		c.Runtime = NewRuntime(c.PoolSize)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxSandboxes <= 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.MaxMemoryBytes <= 0 {
		mem, err := hostMemory()
		if err != nil {
			return fmt.Errorf("memory budget: %w; give one with --max-memory", err)
		}
		c.MaxMemoryBytes = mem
	}
	if c.DefaultMemoryBytes <= 0 {
		c.DefaultMemoryBytes = min(DefaultMemory, c.MaxMemoryBytes)
	}
	if c.DefaultPids <= 0 {
		c.DefaultPids = DefaultPids
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.ExpiryInterval <= 0 {
		c.ExpiryInterval = 250 * time.Millisecond
	}
	if c.StreamWriteTimeout <= 0 {
		c.StreamWriteTimeout = time.Minute
	}
	return nil
}

// Server is the daemon's state and its HTTP handler.
type Server struct {
	cfg      Config
	log      *slog.Logger
	rt       Runtime
	capacity *capacity
	metrics  *metrics
	handler  http.Handler

	mu      sync.Mutex
	boxes   map[string]*box
	closing bool
	// runs are the one-shot runs handed over by tine run; Close kills
	// them and waits, so their sandboxes go before the daemon does.
	runs     map[*trackedRun]struct{}
	runsDone sync.WaitGroup

	// catalog holds the snapshots, opened on first use (snapshots()).
	catalogMu sync.Mutex
	catalog   *snapshot.Catalog
	imgs      imageStore // opened on first use (images())

	net *network.Manager

	stop    chan struct{}
	stopped sync.WaitGroup

	view viewKeys // signs the desktop viewer's tokens (view.go)
}

// New makes a server and starts its expiry loop; Close stops it.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg,
		log: cfg.Logger,
		rt:  cfg.Runtime,
		capacity: &capacity{
			maxSandboxes:  cfg.MaxSandboxes,
			maxMemory:     cfg.MaxMemoryBytes,
			defaultMemory: cfg.DefaultMemoryBytes,
			retryAfter:    cfg.RetryAfter,
		},
		boxes: map[string]*box{},
		stop:  make(chan struct{}),
	}
	if cfg.Functions != nil {
		// A function's sandbox is a sandbox: it counts like the others.
		cfg.Functions.CountAgainst(s.capacity.admit)
	}
	if cfg.StateDir != "" && snapshot.Exists(cfg.StateDir) {
		// Snapshots from before a restart are listed and forkable at once.
		if _, err := s.snapshots(); err != nil {
			return nil, err
		}
	}
	if s.net = cfg.Network; s.net == nil {
		var err error
		if s.net, err = network.NewManager(network.Config{Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	s.metrics = newMetrics(s)
	s.handler = s.newMux()
	s.stopped.Go(s.expireLoop)
	return s, nil
}

// Handler serves the API without authentication (the unix socket's).
func (s *Server) Handler() http.Handler { return s.handler }

// TokenHandler serves the API to requests that carry the bearer token
// (the TCP listener's).
func (s *Server) TokenHandler(token string) http.Handler {
	return s.requireToken(token, s.portProxy(s.handler))
}

// Close refuses new sandboxes, destroys every sandbox, and stops the
// expiry loop.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	close(s.stop)
	s.stopped.Wait()
	var wg sync.WaitGroup
	for _, b := range boxes {
		wg.Go(func() { s.destroy(b, "daemon shutting down") })
	}
	wg.Wait()
	s.mu.Lock()
	for r := range s.runs {
		r.Signal(syscall.SIGKILL)
	}
	s.mu.Unlock()
	s.runsDone.Wait()
	if s.cfg.Functions != nil {
		s.cfg.Functions.Close()
	}
	s.rt.Close()
	s.net.Close()
	s.imgs.mu.Lock()
	if s.imgs.st != nil {
		s.imgs.st.Close()
	}
	s.imgs.mu.Unlock()
	s.catalogMu.Lock()
	if s.catalog != nil {
		s.catalog.Close()
	}
	s.catalogMu.Unlock()
}

// route is one entry of the API: method, path pattern, handler.
type route struct {
	method, path string
	handle       func(http.ResponseWriter, *http.Request) error
}

// routes is the route table; api/openapi.yaml describes exactly these.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/v1/health", s.health},
		{"GET", "/v1/features", s.features},
		{"GET", "/metrics", s.serveMetrics},
		{"POST", "/v1/run", s.run},
		{"POST", "/v1/sandboxes", s.createSandbox},
		{"GET", "/v1/sandboxes", s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", s.deleteSandbox},
		{"PUT", "/v1/sandboxes/{id}/network", s.setNetwork},
		{"POST", "/v1/sandboxes/{id}/exec", s.execJSON},
		{"GET", "/v1/sandboxes/{id}/exec/ws", s.execStream},
		{"GET", "/v1/sandboxes/{id}/files", s.readFile},
		{"PUT", "/v1/sandboxes/{id}/files", s.writeFile},
		{"DELETE", "/v1/sandboxes/{id}/files", s.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/stat", s.statFile},
		{"GET", "/v1/sandboxes/{id}/files/list", s.listFiles},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", s.mkdir},
		{"GET", "/v1/sandboxes/{id}/files/archive", s.readArchive},
		{"PUT", "/v1/sandboxes/{id}/files/archive", s.writeArchive},
		{"GET", "/v1/functions", s.listFunctions},
		{"PUT", "/v1/functions/{name}", s.putFunction},
		{"GET", "/v1/functions/{name}", s.getFunction},
		{"DELETE", "/v1/functions/{name}", s.deleteFunction},
		{"POST", "/v1/functions/{name}/invoke", s.invokeFunction},
		{"PUT", "/v1/scripts", s.putScript},
		{"POST", "/v1/desktops", s.createDesktop},
		{"GET", "/v1/desktops", s.listDesktops},
		{"GET", "/v1/desktops/{id}", s.getDesktop},
		{"DELETE", "/v1/desktops/{id}", s.deleteDesktop},
		{"GET", "/v1/desktops/{id}/aci", s.aci},
		{"POST", "/v1/desktops/{id}/view", s.createView},
		{"GET", "/v1/desktops/{id}/view", s.viewDesktop},
		{"POST", "/v1/scripts/{digest}/invoke", s.invokeScript},
		{"POST", "/v1/sandboxes/{id}/snapshots", s.createSnapshot},
		{"POST", "/v1/sandboxes/{id}/fork", s.forkSandbox},
		{"GET", "/v1/snapshots", s.listSnapshots},
		{"GET", "/v1/snapshots/{sid}", s.getSnapshot},
		{"DELETE", "/v1/snapshots/{sid}", s.deleteSnapshot},
		{"POST", "/v1/snapshots/{sid}/fork", s.forkSnapshot},
		{"POST", "/v1/sandboxes/{id}/sessions", s.createSession},
		{"GET", "/v1/sandboxes/{id}/sessions", s.listSessions},
		{"GET", "/v1/sandboxes/{id}/sessions/{sid}", s.getSession},
		{"DELETE", "/v1/sandboxes/{id}/sessions/{sid}", s.deleteSession},
		{"POST", "/v1/sandboxes/{id}/sessions/{sid}/run", s.runCell},
		{"GET", "/v1/sandboxes/{id}/sessions/{sid}/run/ws", s.runCellStream},
		{"POST", "/v1/sandboxes/{id}/sessions/{sid}/interrupt", s.interruptSession},
		{"POST", "/v1/sandboxes/{id}/sessions/{sid}/restart", s.restartSession},
		{"POST", "/v1/sandboxes/{id}/sessions/{sid}/fork", s.forkSession},
		{"POST", "/v1/images/pull", s.pullImage},
		{"GET", "/v1/images", s.listImages},
		{"DELETE", "/v1/images/{ref}", s.deleteImage},
	}
}

func (s *Server) newMux() http.Handler {
	mux := http.NewServeMux()
	paths := http.NewServeMux() // every route's path, any method: tells 405 from 404
	seen := map[string]bool{}
	for _, rt := range s.routes() {
		mux.Handle(rt.method+" "+rt.path, s.instrument(rt))
		if !seen[rt.path] {
			seen[rt.path] = true
			paths.Handle(rt.path, http.NotFoundHandler())
		}
	}
	mux.Handle("/", s.instrument(route{path: "unmatched", handle: func(w http.ResponseWriter, r *http.Request) error {
		if _, pattern := paths.Handler(r); pattern != "" {
			var allowed []string
			for _, rt := range s.routes() {
				if rt.path == pattern {
					allowed = append(allowed, rt.method)
					if rt.method == "GET" {
						allowed = append(allowed, "HEAD") // the mux serves HEAD with GET
					}
				}
			}
			slices.Sort(allowed)
			return &methodError{
				msg:     fmt.Sprintf("%s %s: method not allowed; %s takes %s", r.Method, r.URL.Path, pattern, strings.Join(allowed, ", ")),
				allowed: allowed,
			}
		}
		return fmt.Errorf("%w: %s %s (routes are under /v1, see api/openapi.yaml)", ErrNoRoute, r.Method, r.URL.Path)
	}}))
	return mux
}

// instrument runs a route's handler: an error it returns becomes the error
// answer; its latency is observed per route; the request is logged.
func (s *Server) instrument(rt route) http.Handler {
	label := rt.path
	if rt.method != "" {
		label = rt.method + " " + rt.path
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.metrics.latency.WithLabelValues(label, strconv.Itoa(status)).Observe(d.Seconds())
			s.log.Debug("request", "route", label, "path", r.URL.Path, "status", status, "ms", float64(d.Microseconds())/1000)
		}()
		err := rt.handle(sw, r)
		if err == nil {
			return
		}
		if sw.status != 0 {
			// The answer has begun: the only way left to say it failed is
			// to cut the connection, so the client sees a broken body.
			s.log.Warn("response cut short", "route", label, "path", r.URL.Path, "err", err)
			panic(http.ErrAbortHandler)
		}
		if t := timeoutsOf(r); t.Write > 0 {
			// The handler may have lifted the deadline (holdDeadlines).
			http.NewResponseController(sw).SetWriteDeadline(time.Now().Add(t.Write))
		}
		s.writeError(sw, r, err)
	})
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController and the WebSocket upgrade reach the
// connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.serve.ServeHTTP(w, r)
	return nil
}

// newID returns a fresh sandbox id: 12 hex digits.
func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
