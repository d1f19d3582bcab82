package e2b

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/envd"
	"github.com/tine-run/tine/internal/sandbox"
)

// EnvdPath is where E2B sandboxes see the tine binary that runs envd.
const EnvdPath = "/tine/bin/tine"

// Home is the commands' working directory and HOME, E2B's user's home.
// It lies in the root's writable layer, which pause, fork and snapshots
// keep (/tmp and /run are tmpfs of the sandbox's own, which they do not).
const Home = "/home/user"

// clientID is the constant E2B answers in the deprecated, required field.
const clientID = "6532622b"

// Sandbox states, as E2B names them.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// box is an E2B sandbox: its E2B identity and lifecycle over the tine
// sandbox that runs it now. The E2B id stays the same across pause and
// resume; the tine sandbox under it changes (a resume is a fork of the
// pause's snapshot).
type box struct {
	id       string
	template string
	token    string // envd's access token
	metadata map[string]string
	env      map[string]string
	internet bool
	onPause  bool // on timeout: pause (true) or kill
	// pauseMemory: a timeout's pause is on the memory tier (autoPauseMemory).
	pauseMemory bool
	resume      bool // auto-resume on traffic
	started     time.Time

	// mu is held across lifecycle changes (pause, resume, kill); when
	// both are taken, it comes before Server.mu.
	mu        sync.Mutex
	state     string
	tineID    string // the running tine sandbox, "" while paused
	pid       int
	spec      api.SandboxSpec
	endAt     time.Time
	snapshots []string // pause snapshots, oldest first: deleted with the sandbox
	gone      bool
	lastCPU   float64 // cpu ms and when, for the metrics' percentage
	lastAt    time.Time

	rt    *http.Transport // to envd, for the sandbox whose PID 1 is rtPid (guarded by Server.mu)
	rtPid int

	// ciMu guards the code interpreter's default context: the session
	// ciDefault of tine sandbox ciTine (interpreter.go).
	ciMu      sync.Mutex
	ciTine    string
	ciDefault string
}

func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// errorFrom turns a tine API error into the E2B error body and status.
func errorFrom(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	status := http.StatusInternalServerError
	switch client.ErrorCode(err) {
	case api.CodeNotFound:
		status = http.StatusNotFound
	case api.CodeInvalidArgument:
		status = http.StatusBadRequest
	case api.CodeConflict:
		status = http.StatusConflict
	case api.CodeCapacity:
		status = http.StatusTooManyRequests
	case api.CodeUnsupported:
		status = http.StatusNotImplemented
	case api.CodeUnavailable:
		status = http.StatusServiceUnavailable
	case api.CodeTooLarge:
		status = http.StatusRequestEntityTooLarge
	}
	return &apiError{Code: status, Message: err.Error()}
}

func errorf(code int, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// lookup finds an E2B sandbox by id.
func (s *Server) lookup(id string) (*box, error) {
	s.mu.Lock()
	b, ok := s.boxes[id]
	s.mu.Unlock()
	if !ok {
		return nil, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return b, nil
}

// template is what an E2B template id names on tine.
type template struct {
	spec     api.SandboxSpec
	snapshot string // fork this snapshot instead of creating fresh
}

// resolveTemplate maps an E2B template id onto tine: "base" (and the SDK's
// other default names) is the host's OS view; a snapshot id (or a
// snapshot's name) forks that snapshot.
func (s *Server) resolveTemplate(ctx context.Context, id string) (*template, error) {
	if id == "" || slices.Contains(s.cfg.BaseTemplates, id) {
		return &template{}, nil
	}
	if id == DesktopTemplate {
		return desktopTemplate()
	}
	if isImageRef(id) {
		// The daemon pulls it when missing; its Env and WorkingDir apply.
		return &template{spec: api.SandboxSpec{Image: id}}, nil
	}
	snaps, err := s.cfg.Client.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		if sn.ID == id || (sn.Name != "" && sn.Name == id) {
			if sn.Kind != "sandbox" {
				return nil, errorf(http.StatusBadRequest, "template %q is a snapshot of a %s; E2B sandboxes fork sandbox snapshots", id, sn.Kind)
			}
			return &template{snapshot: sn.ID}, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "template %q not found: tine serves %q (the host's OS, read-only, with a private writable layer), %q (the same, for @e2b/desktop), OCI image references (a name with a tag, digest or registry: python:3.12-slim) and the ids or names of sandbox snapshots", id, s.cfg.BaseTemplates, DesktopTemplate)
}

// boot starts envd in a fresh tine sandbox and returns once it accepts
// connections, so the SDK's first call finds it serving. envd runs on an
// exec stream held for the sandbox's life (one start of the binary; a
// detached envd would start it twice); the stream ends with the sandbox.
// A sandbox whose envd does not start is destroyed.
func (s *Server) boot(ctx context.Context, sb *api.Sandbox) error {
	err := s.startEnvd(ctx, sb.ID)
	if err != nil {
		s.cfg.Client.Delete(context.WithoutCancel(ctx), sb.ID)
		return fmt.Errorf("start envd in sandbox %s: %w", sb.ID, err)
	}
	return nil
}

func (s *Server) startEnvd(ctx context.Context, id string) error {
	st, err := s.cfg.Client.ExecStream(ctx, id, &api.ExecRequest{Argv: []string{EnvdPath, "envd", "--ready", "--socket", envd.Socket, "--home", Home}})
	if err != nil {
		return err
	}
	go io.Copy(io.Discard, st.Stderr) // envd's own log: nobody reads it yet
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(st.Stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != envd.ReadyLine {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
		io.Copy(io.Discard, st.Stdout)
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(30 * time.Second):
		err = errors.New("envd did not get ready in 30 s")
	}
	if err != nil {
		st.Close()
		if exit, werr := st.Wait(); werr == nil && exit != nil {
			err = fmt.Errorf("%w (envd exited %d, %s)", err, exit.ExitCode, exit.Reason)
		}
		return err
	}
	go st.Wait()
	return nil
}

// spec is the tine sandbox an E2B create asks for: t's, with the
// environment and the network (mode "" is tine's default, loopback).
func (s *Server) spec(t *template, env map[string]string, mode string, policy api.NetworkPolicy) api.SandboxSpec {
	sp := t.spec
	sp.Binds = append(slices.Clone(sp.Binds), api.Bind{Source: s.cfg.EnvdBinary, Target: EnvdPath, ReadOnly: true})
	for k, v := range env {
		sp.Env = append(sp.Env, k+"="+v)
	}
	slices.Sort(sp.Env)
	sp.Network, sp.Allow, sp.Deny = mode, policy.Allow, policy.Deny
	return sp
}

// start makes a running tine sandbox for b: sp fresh from its template,
// or a fork of t's snapshot with sp's environment added (a fork keeps the
// rest of its source's spec).
func (s *Server) start(ctx context.Context, t *template, sp api.SandboxSpec) (*api.Sandbox, error) {
	var sb *api.Sandbox
	if t.snapshot != "" {
		req := &api.ForkRequest{Count: 1, Env: sp.Env}
		res, err := s.cfg.Client.Fork(ctx, t.snapshot, req)
		if err != nil {
			return nil, err
		}
		if len(res.Sandboxes) != 1 {
			return nil, errorf(http.StatusInternalServerError, "fork of %s made %d sandboxes, want 1", t.snapshot, len(res.Sandboxes))
		}
		sb = &res.Sandboxes[0]
	} else {
		var err error
		if sb, err = s.cfg.Client.Create(ctx, &sp); err != nil {
			return nil, err
		}
	}
	if err := s.boot(ctx, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

// isImageRef says whether an E2B template id names an OCI image: E2B's
// own ids and aliases are bare names, an image reference has a tag, a
// digest or a registry path (python:3.12-slim, ghcr.io/o/app).
func isImageRef(id string) bool { return strings.ContainsAny(id, ":/@") }

// timeoutOf is a request's timeout in seconds, or def.
func timeoutOf(t *int64, def int64) (time.Duration, error) {
	if t == nil {
		return time.Duration(def) * time.Second, nil
	}
	if *t < 0 {
		return 0, errorf(http.StatusBadRequest, "timeout %d: want seconds, 0 or more", *t)
	}
	return time.Duration(*t) * time.Second, nil
}

func (s *Server) create(ctx context.Context, req *newSandbox, v2 bool) (*box, error) {
	for name, set := range map[string]bool{"mcp": len(req.MCP) > 0, "iam": len(req.IAM) > 0, "volumeMounts": len(req.VolumeMounts) > 0} {
		if set {
			return nil, errorf(http.StatusBadRequest, "%s is not supported by tine's E2B API; leave it out", name)
		}
	}
	def := int64(15) // the spec's default for POST /sandboxes
	if v2 {
		def = 300
	}
	timeout, err := timeoutOf(req.Timeout, def)
	if err != nil {
		return nil, err
	}
	t, err := s.resolveTemplate(ctx, req.TemplateID)
	if err != nil {
		return nil, err
	}
	mode, policy, err := networkOf(req.AllowInternet, req.Network)
	if err != nil {
		return nil, err
	}
	if t.snapshot != "" {
		// A fork keeps its source's network (e2b 2.50 sends
		// allow_internet_access true on every create: not refused).
		if len(req.Network) > 0 {
			return nil, errorf(http.StatusBadRequest, "template %q is a snapshot, whose sandboxes keep its network; leave network out", req.TemplateID)
		}
		mode, policy = "", api.NetworkPolicy{}
	}
	sb, err := s.start(ctx, t, s.spec(t, req.EnvVars, mode, policy))
	if err != nil {
		if mode == "egress" && client.ErrorCode(err) == api.CodeUnsupported {
			return nil, errorf(http.StatusNotImplemented, "allow_internet_access or network rules ask for tine's egress networking, which this daemon cannot give (%v); create with allowInternetAccess: false for a sandbox without it (e2b < 2.51 sends true unless told)", err)
		}
		return nil, err
	}
	now := time.Now()
	b := &box{
		id: sb.ID, template: req.TemplateID, token: newToken(),
		metadata: req.Metadata, env: req.EnvVars,
		internet: sb.Spec.Network == "egress",
		onPause:  req.AutoPause, pauseMemory: req.AutoPauseMemory != nil && *req.AutoPauseMemory,
		resume:  req.AutoResume != nil && req.AutoResume.Enabled,
		started: now, state: stateRunning, tineID: sb.ID, pid: sb.Pid, spec: sb.Spec, endAt: now.Add(timeout),
	}
	if b.template == "" {
		b.template = s.cfg.BaseTemplates[0]
	}
	s.mu.Lock()
	s.boxes[b.id] = b
	s.mu.Unlock()
	if b.template == InterpreterTemplate {
		// E2B's code-interpreter template boots with its kernel running:
		// start the default context now, so the first runCode finds it
		// (or waits for it) instead of starting it.
		go func() {
			if _, err := s.defaultContext(context.WithoutCancel(ctx), b, sb.ID); err != nil {
				s.log.Debug("e2b: default code context", "sandbox", b.id, "err", err)
			}
		}()
	}
	return b, nil
}

// kill destroys b's tine sandbox and its pause snapshots and forgets it.
func (s *Server) kill(ctx context.Context, b *box) error {
	err := s.kill1(ctx, b)
	s.persist()
	return err
}

func (s *Server) kill1(ctx context.Context, b *box) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return errorf(http.StatusNotFound, "sandbox %q not found", b.id)
	}
	if b.tineID != "" {
		if err := s.cfg.Client.Delete(ctx, b.tineID); err != nil && client.ErrorCode(err) != api.CodeNotFound {
			return err
		}
	}
	for _, sid := range slices.Backward(b.snapshots) {
		if err := s.cfg.Client.DeleteSnapshot(ctx, sid); err != nil && client.ErrorCode(err) != api.CodeNotFound {
			s.log.Warn("e2b: cannot delete a pause snapshot", "sandbox", b.id, "snapshot", sid, "err", err)
		}
	}
	b.gone = true
	s.mu.Lock()
	delete(s.boxes, b.id)
	if b.rt != nil {
		b.rt.CloseIdleConnections() // to a sandbox that is gone
	}
	s.mu.Unlock()
	return nil
}

// pause snapshots b's files (the fs tier; with memory, the memory tier)
// and destroys its tine sandbox: a paused sandbox holds no processes and
// no budget. 409 when it is already paused.
func (s *Server) pause(ctx context.Context, b *box, memory bool) error {
	err := s.pause1(ctx, b, memory)
	s.persist()
	return err
}

func (s *Server) pause1(ctx context.Context, b *box, memory bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return errorf(http.StatusNotFound, "sandbox %q not found", b.id)
	}
	if b.state == statePaused {
		return errorf(http.StatusConflict, "sandbox %q is already paused", b.id)
	}
	tier := api.TierFS
	if memory {
		tier = api.TierMemory
		// A code context's interpreter holds a socket to the daemon, which
		// criu cannot carry: contexts end at a memory pause, as at any
		// pause (a resume starts a new default context).
		if err := s.endContexts(ctx, b.tineID); err != nil {
			return err
		}
	}
	snap, err := s.cfg.Client.Snapshot(ctx, b.tineID, &api.SnapshotRequest{Tier: tier, Name: "e2b-pause-" + b.id})
	if err != nil {
		if client.ErrorCode(err) == api.CodeConflict {
			// Not "already paused", which is what the SDK reads a 409 as.
			return errorf(http.StatusUnprocessableEntity, "sandbox %q cannot be paused now: %v", b.id, err)
		}
		return err
	}
	b.snapshots = append(b.snapshots, snap.ID)
	if err := s.cfg.Client.Delete(ctx, b.tineID); err != nil && client.ErrorCode(err) != api.CodeNotFound {
		return err
	}
	b.state, b.tineID, b.pid = statePaused, "", 0
	return nil
}

// resume forks b's latest pause snapshot into a new tine sandbox under
// the same E2B id. It reports whether b was paused.
func (s *Server) resume(ctx context.Context, b *box, timeout time.Duration) (bool, error) {
	resumed, err := s.resume1(ctx, b, timeout)
	if resumed {
		s.persist()
	}
	return resumed, err
}

func (s *Server) resume1(ctx context.Context, b *box, timeout time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return false, errorf(http.StatusNotFound, "sandbox %q not found", b.id)
	}
	if b.state == stateRunning {
		if end := time.Now().Add(timeout); end.After(b.endAt) {
			b.endAt = end
		}
		return false, nil
	}
	sb, err := s.start(ctx, &template{snapshot: b.snapshots[len(b.snapshots)-1]}, api.SandboxSpec{})
	if err != nil {
		return false, err
	}
	b.state, b.tineID, b.pid, b.spec = stateRunning, sb.ID, sb.Pid, sb.Spec
	b.endAt = time.Now().Add(timeout)
	return true, nil
}

// running returns b's tine sandbox and pid, resuming it first when it is
// paused with auto-resume on.
func (s *Server) running(ctx context.Context, b *box) (string, int, error) {
	b.mu.Lock()
	id, pid, state, auto, gone := b.tineID, b.pid, b.state, b.resume, b.gone
	b.mu.Unlock()
	if gone {
		return "", 0, errorf(http.StatusBadGateway, "sandbox %q is gone", b.id)
	}
	if state == stateRunning {
		return id, pid, nil
	}
	if !auto {
		return "", 0, errorf(http.StatusBadGateway, "sandbox %q is paused; resume it with Sandbox.connect", b.id)
	}
	if _, err := s.resume(ctx, b, s.cfg.ResumeTimeout); err != nil {
		return "", 0, err
	}
	return s.running(ctx, b)
}

// expireLoop kills (or, with autoPause, pauses) sandboxes past their end.
func (s *Server) expireLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.expire(ctx, now)
		}
	}
}

func (s *Server) expire(ctx context.Context, now time.Time) {
	// Lock order is a box's mu, then the server's (kill takes them so):
	// the boxes are listed first, then each is looked at.
	var due []*box
	for _, b := range s.sorted() {
		b.mu.Lock()
		if b.state == stateRunning && now.After(b.endAt) {
			due = append(due, b)
		}
		b.mu.Unlock()
	}
	for _, b := range due {
		var err error
		if b.onPause {
			err = s.pause(ctx, b, b.pauseMemory)
		} else {
			err = s.kill(ctx, b)
		}
		if err != nil {
			s.log.Warn("e2b: timeout action failed", "sandbox", b.id, "pause", b.onPause, "err", err)
		} else {
			s.log.Info("e2b: sandbox timed out", "sandbox", b.id, "paused", b.onPause)
		}
	}
}

// answer is b's Sandbox: the answer to create, connect and fork.
func (s *Server) answer(b *box) *sandboxJSON {
	return &sandboxJSON{
		SandboxID: b.id, TemplateID: b.template, ClientID: clientID,
		EnvdVersion: envd.Version, EnvdAccessToken: b.token, Domain: s.domain(),
	}
}

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func (s *Server) listed(b *box) listedSandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	mem := b.spec.Limits.MemoryBytes
	if mem == 0 {
		mem = s.cfg.DefaultMemoryBytes
	}
	disk := b.spec.DiskBytes
	if disk == 0 {
		disk = sandbox.DefaultDisk
	}
	cpus := runtime.NumCPU()
	if c := b.spec.Limits.CPUs; c > 0 {
		cpus = max(1, int(c+0.999))
	}
	return listedSandbox{
		SandboxID: b.id, TemplateID: b.template, ClientID: clientID,
		StartedAt: b.started.UTC(), EndAt: b.endAt.UTC(),
		CPUCount: cpus, MemoryMB: mem >> 20, DiskSizeMB: disk >> 20,
		Metadata: b.metadata, State: b.state, EnvdVersion: envd.Version, VolumeMounts: []any{},
	}
}

func (s *Server) detail(b *box) *sandboxDetail {
	d := &sandboxDetail{listedSandbox: s.listed(b), EnvdAccessToken: b.token, Domain: s.domain(), AllowInternetAccess: b.internet}
	d.Lifecycle = lifecycle{OnTimeout: "kill", AutoResume: b.resume}
	if b.onPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	return d
}

// sorted is every sandbox, oldest first (ties by id).
func (s *Server) sorted() []*box {
	s.mu.Lock()
	out := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		out = append(out, b)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *box) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return out
}

// pageToken is the position after the last sandbox of a page.
func pageToken(b *box) string { return strconv.FormatInt(b.started.UnixNano(), 36) + "." + b.id }
