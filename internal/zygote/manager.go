// Package zygote runs warm functions: a sandbox kept up per function, and
// in it a Python zygote (an agent embedded in this package, which imports
// the function once and forks a child per request; for runtime exec the
// child spawns the function's command, for node it execs a worker). Every
// request walls itself in (its own mount, IPC and network namespaces,
// Landlock, capabilities, seccomp) and gets a cgroup of its own, with the
// function's per-request limits, that its process joins before anything
// of it runs and that is killed when the request ends. The runtime pool is
// a Python zygote with no entry: requests name a registered script by
// digest and are handed its descriptors.
package zygote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
)

// Config is how a Manager behaves.
type Config struct {
	// Dir holds registered scripts (Dir/scripts/<sha256>.py).
	Dir string
	// PoolPreload are the modules the runtime pool's zygote imports.
	PoolPreload []string
	// MaxPayload bounds a request's payload (default 8 MiB).
	MaxPayload int64
	// MaxScript bounds a registered script (default 1 MiB).
	MaxScript int64
	// Network gives egress functions their network (nil: they are
	// refused).
	Network *network.Manager
	// Images makes a function's image the root of its sandbox (nil: a
	// function with an image is refused).
	Images ImageFunc
}

// ImageFunc makes fn's image the root of spec (pulling it when missing),
// with the environment of its requirements stacked on it, and keeps it
// from removal until release is called. The sandboxes it builds layers in
// count against admit (nil: nowhere) while they run.
type ImageFunc func(fn *api.FunctionSpec, spec *sandbox.Spec, admit AdmitFunc) (release func(), err error)

// PoolName is the runtime pool's function name.
const PoolName = "pool.python"

// Manager owns the functions.
type Manager struct {
	cfg     Config
	scripts string

	mu    sync.Mutex
	fns   map[string]*function
	admit AdmitFunc

	stop chan struct{}
	done sync.WaitGroup
}

// AdmitFunc counts a function's sandbox, by its memory limit, against a
// host budget: it returns what gives the share back, or the error that
// refuses the sandbox.
type AdmitFunc func(memoryBytes int64) (release func(), err error)

// CountAgainst makes every function sandbox made from now on count
// against admit's budget (the daemon's --max-sandboxes and --max-memory),
// for as long as it lives. Without it, function sandboxes count nowhere.
func (m *Manager) CountAgainst(admit AdmitFunc) {
	m.mu.Lock()
	m.admit = admit
	m.mu.Unlock()
}

// NewManager makes a manager and starts its cold sweeper.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 8 << 20
	}
	if cfg.MaxScript <= 0 {
		cfg.MaxScript = 1 << 20
	}
	m := &Manager{cfg: cfg, fns: map[string]*function{}, stop: make(chan struct{})}
	m.scripts = filepath.Join(cfg.Dir, "scripts")
	if err := os.MkdirAll(m.scripts, 0o755); err != nil {
		return nil, fmt.Errorf("script store: %w", err)
	}
	m.done.Go(m.sweep)
	return m, nil
}

// Up registers (or replaces) a function and warms it.
func (m *Manager) Up(spec api.FunctionSpec) (*api.Function, error) {
	if err := Validate(&spec); err != nil {
		return nil, err
	}
	if spec.Name == PoolName {
		return nil, fmt.Errorf("%w: the name %q is the runtime pool's", ErrInvalidSpec, PoolName)
	}
	if spec.Entry != "" {
		if st, err := os.Stat(spec.Entry); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: entry %s: not a readable file on the daemon's host", ErrInvalidSpec, spec.Entry)
		}
	}
	m.mu.Lock()
	if spec.Image != "" && m.cfg.Images == nil {
		return nil, fmt.Errorf("%w: image %s: this daemon keeps no images (give it a --state-dir)", ErrInvalidSpec, spec.Image)
	}
	f := newFunction(spec, "", m.admit)
	f.net = m.cfg.Network
	f.images = m.cfg.Images
	m.mu.Unlock()
	if _, _, _, err := f.ensureWarm(); err != nil {
		f.cool()
		return nil, err
	}
	m.mu.Lock()
	old := m.fns[spec.Name]
	m.fns[spec.Name] = f
	m.mu.Unlock()
	if old != nil {
		old.cool()
	}
	info := f.info()
	return &info, nil
}

func newFunction(spec api.FunctionSpec, scripts string, admit AdmitFunc) *function {
	return &function{spec: spec, scripts: scripts, admit: admit, slots: make(chan struct{}, spec.Concurrency), lastUsed: time.Now()}
}

// Get describes a function.
func (m *Manager) Get(name string) (*api.Function, error) {
	f, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	info := f.info()
	return &info, nil
}

// List describes every function, by name.
func (m *Manager) List() []api.Function {
	m.mu.Lock()
	fns := make([]*function, 0, len(m.fns))
	for _, f := range m.fns {
		fns = append(fns, f)
	}
	m.mu.Unlock()
	out := make([]api.Function, 0, len(fns))
	for _, f := range fns {
		out = append(out, f.info())
	}
	slices.SortFunc(out, func(a, b api.Function) int {
		if a.Spec.Name < b.Spec.Name {
			return -1
		}
		return 1
	})
	return out
}

// Remove unregisters a function and frees its sandbox.
func (m *Manager) Remove(name string) error {
	m.mu.Lock()
	f := m.fns[name]
	delete(m.fns, name)
	m.mu.Unlock()
	if f == nil {
		return fmt.Errorf("%w: %q", ErrNoFunction, name)
	}
	f.cool()
	return nil
}

func (m *Manager) lookup(name string) (*function, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.fns[name]
	if f == nil {
		return nil, fmt.Errorf("%w: %q (register it with tine fn up)", ErrNoFunction, name)
	}
	return f, nil
}

// Invoke calls a function with payload: JSON, or raw bytes when raw.
func (m *Manager) Invoke(ctx context.Context, name string, payload []byte, raw bool) (*api.Invocation, error) {
	f, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	return m.invoke(ctx, f, payload, request{raw: raw})
}

// PutScript registers a script for the runtime pool; its digest names it.
func (m *Manager) PutScript(src []byte) (*api.Script, error) {
	if int64(len(src)) > m.cfg.MaxScript {
		return nil, fmt.Errorf("%w: the script is %d bytes, over the %d-byte limit", ErrTooLarge, len(src), m.cfg.MaxScript)
	}
	sum := sha256.Sum256(src)
	digest := hex.EncodeToString(sum[:])
	path := filepath.Join(m.scripts, digest+".py")
	if _, err := os.Stat(path); err != nil {
		tmp, err := os.CreateTemp(m.scripts, ".put-*")
		if err != nil {
			return nil, err
		}
		_, werr := tmp.Write(src)
		cerr := tmp.Close()
		if werr == nil && cerr == nil {
			os.Chmod(tmp.Name(), 0o644)
			werr = os.Rename(tmp.Name(), path)
		}
		if werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("store script: %v", firstErr(werr, cerr))
		}
	}
	return &api.Script{Digest: digest, Size: int64(len(src))}, nil
}

// InvokeScript runs a registered script's handler through the runtime pool.
func (m *Manager) InvokeScript(ctx context.Context, digest string, payload []byte, raw bool) (*api.Invocation, error) {
	if len(digest) != 64 || !isHex(digest) {
		return nil, fmt.Errorf("%w: %q is not a sha256 digest (64 hex digits, from PUT /v1/scripts)", ErrNoFunction, digest)
	}
	if _, err := os.Stat(filepath.Join(m.scripts, digest+".py")); err != nil {
		return nil, fmt.Errorf("%w: no script with digest %s (register it with PUT /v1/scripts or tine script put)", ErrNoFunction, digest)
	}
	m.mu.Lock()
	f := m.fns[PoolName]
	if f == nil {
		spec := api.FunctionSpec{Name: PoolName, Runtime: RuntimePython, Entry: "/pool.py", Preload: m.cfg.PoolPreload}
		Validate(&spec)
		spec.Entry = ""
		f = newFunction(spec, m.scripts, m.admit)
		f.net = m.cfg.Network
		m.fns[PoolName] = f
	}
	m.mu.Unlock()
	return m.invoke(ctx, f, payload, request{raw: raw, script: digest})
}

func (m *Manager) invoke(ctx context.Context, f *function, payload []byte, req request) (*api.Invocation, error) {
	if int64(len(payload)) > m.cfg.MaxPayload {
		return nil, fmt.Errorf("%w: the payload is %d bytes, over the %d-byte limit", ErrTooLarge, len(payload), m.cfg.MaxPayload)
	}
	arrived := time.Now()
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-f.slots }()
	f.mu.Lock()
	f.inflight++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.lastUsed = time.Now()
		f.mu.Unlock()
	}()
	f.calls.Add(1)
	var inv *api.Invocation
	for attempt := 0; ; attempt++ {
		w, cold, warmMs, err := f.ensureWarm()
		if err != nil {
			return nil, err
		}
		inv = &api.Invocation{}
		inv.Timings.Cold, inv.Timings.WarmMs = cold, warmMs
		switch f.spec.Runtime {
		case RuntimeExec:
			err = f.invokeExec(ctx, w.zyg, w.groups, payload, inv, arrived)
		case RuntimeNode:
			err = f.invokeNode(ctx, w.nodes, payload, req, inv, arrived)
		default:
			err = f.invokeForked(ctx, w.zyg, w.groups, payload, req, inv, arrived)
		}
		if errors.Is(err, errZygoteGone) && attempt == 0 {
			<-w.zyg.dead // ensureWarm sees it gone and warms a new one
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	inv.Timings.Total = ms(time.Since(arrived))
	return inv, nil
}

// info describes f now.
func (f *function) info() api.Function {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := api.Function{Spec: f.spec, State: "cold", Calls: f.calls.Load(), WarmMs: f.warmMs}
	switch {
	case f.warming != nil:
		i.State = "warming"
	case f.sb != nil:
		i.State, i.Pid = "warm", f.sb.Pid()
	}
	return i
}

// cool drops f's sandbox (and zygote); the next call warms it again.
func (f *function) cool() {
	f.mu.Lock()
	for f.warming != nil { // a warm-up in flight owns the pools until it ends
		w := f.warming
		f.mu.Unlock()
		<-w
		f.mu.Lock()
	}
	sb, z, groups, nodes := f.sb, f.zyg, f.groups, f.nodes
	if f.budget != nil {
		f.budget() // its share is free before anyone can see it cold
	}
	f.sb, f.budget, f.zyg, f.groups, f.nodes = nil, nil, nil, nil, nil
	f.mu.Unlock()
	if nodes != nil {
		nodes.close()
	}
	if groups != nil {
		groups.close()
	}
	if z != nil {
		z.close()
	}
	if sb != nil {
		sb.Destroy()
	}
}

// sweep cools functions left unused for their cold_after, and notices
// zygotes that died so the next call warms them again.
func (m *Manager) sweep() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		fns := make([]*function, 0, len(m.fns))
		for _, f := range m.fns {
			fns = append(fns, f)
		}
		m.mu.Unlock()
		for _, f := range fns {
			f.mu.Lock()
			idle := f.inflight == 0 && f.warming == nil && f.sb != nil &&
				time.Since(f.lastUsed).Seconds() > f.spec.ColdAfterSeconds
			if z := f.zyg; z != nil {
				select {
				case <-z.dead:
					f.zyg = nil // warmed again on the next call
					go z.close()
				default:
				}
			}
			f.mu.Unlock()
			if idle {
				f.cool()
			}
		}
	}
}

// Close stops the sweeper and frees every function's sandbox.
func (m *Manager) Close() {
	close(m.stop)
	m.done.Wait()
	m.mu.Lock()
	fns := m.fns
	m.fns = map[string]*function{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Go(f.cool)
	}
	wg.Wait()
}

// isHex reports whether s is lowercase hexadecimal.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
