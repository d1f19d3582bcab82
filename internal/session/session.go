// Package session runs code-interpreter sessions: a Python interpreter (an
// agent embedded in this package) started inside a live sandbox, behind
// all of the sandbox's walls, that runs cells one at a time in one
// namespace so that their state persists, and reports each the way a
// Jupyter kernel does (stdout, stderr, rich results, errors, an execution
// count). A Session is one interpreter; a Set is the sessions of one
// sandbox. The package knows nothing of HTTP: internal/server maps it onto
// /v1/sandboxes/{id}/sessions.
package session

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
)

//go:embed agent/python.py
var pythonAgent string

// Errors a caller can test for.
var (
	// ErrNoSession: no session has the id.
	ErrNoSession = errors.New("no such session")
	// ErrDead: the session's interpreter is gone; Restart makes a new one.
	ErrDead = errors.New("the session is dead")
	// ErrBusy: the session runs a cell (fork refuses to wait for it).
	ErrBusy = errors.New("the session is running a cell")
	// ErrStart: the interpreter did not start.
	ErrStart = errors.New("the session's interpreter did not start")
	// ErrInvalid: a bad spec or cell.
	ErrInvalid = errors.New("invalid session request")
	// ErrHeld: the session holds what a fork cannot carry.
	ErrHeld = errors.New("the session cannot be forked")
)

// Launcher starts a process in a sandbox: the daemon's exec path without a
// terminal (for a *sandbox.Sandbox, its Launch: PID 1 forks the command,
// which is already behind every wall).
type Launcher interface {
	Exec(e *sandbox.ExecSpec) (Process, error)
}

// LaunchFunc is a function as a Launcher.
type LaunchFunc func(e *sandbox.ExecSpec) (Process, error)

// Exec calls f.
func (f LaunchFunc) Exec(e *sandbox.ExecSpec) (Process, error) { return f(e) }

// Process is a launched interpreter, as *sandbox.Launched offers it.
type Process interface {
	Wait() (*sandbox.Outcome, error)
	Signal(sig syscall.Signal) error
}

// Options make a session.
type Options struct {
	// Spec is what the client asked for (Language "" means python).
	Spec api.SessionSpec
	// Python is the interpreter's command (default "python3", looked up in
	// the sandbox's PATH).
	Python string
	// MaxOutput caps each of stdout and stderr an Execution keeps
	// (default 1 MiB).
	MaxOutput int
	// InterruptGrace is how long a timed-out cell has to stop after its
	// KeyboardInterrupt before the interpreter is killed (default 2s).
	InterruptGrace time.Duration
}

func (o *Options) setDefaults() error {
	switch o.Spec.Language {
	case "":
		o.Spec.Language = "python"
	case "python":
	default:
		return fmt.Errorf("%w: language %q: only \"python\" is supported", ErrInvalid, o.Spec.Language)
	}
	if o.Spec.Workdir != "" && o.Spec.Workdir[0] != '/' {
		return fmt.Errorf("%w: workdir %q must be an absolute path", ErrInvalid, o.Spec.Workdir)
	}
	if err := sandbox.NoNUL("env", o.Spec.Env...); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, e := range o.Spec.Env {
		if i := strings.IndexByte(e, '='); i <= 0 {
			return fmt.Errorf("%w: env entry %q is not KEY=VALUE", ErrInvalid, e)
		}
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 1 << 20
	}
	if o.InterruptGrace <= 0 {
		o.InterruptGrace = 2 * time.Second
	}
	return nil
}

// Session is one interpreter and its cells.
type Session struct {
	id      string
	sandbox string
	opts    Options
	launch  Launcher
	created time.Time

	// turn is held by the running cell (and by Restart, Close and fork
	// checks): one at a time, the rest queue.
	turn chan struct{}

	mu      sync.Mutex
	agent   *agent // nil once dead
	dead    string // why it died ("" while alive)
	count   int
	forks   int // live forks of this interpreter (MaxForks)
	running bool
	// ahead is a copy of aheadOf forked ahead when the execution count
	// was aheadCount, parked for the next fork (ahead.go); aheadBusy is
	// closed when a fork ahead under way ends.
	ahead      *agent
	aheadOf    *agent
	aheadCount int
	aheadBusy  chan struct{}
	// interrupts counts Interrupt calls: one that comes while a copy is
	// being forked ahead drops it as one after would.
	interrupts int
	// carried is the state in which the interpreter was last seen to hold
	// nothing a fork refuses (its check passed, or a copy of it was
	// forked): until a cell or an interrupt, a fork need not ask again.
	carried Mark
	queued  int
	closed  bool
}

// Mark is an interpreter between two cells: only a cell's code (or an
// interrupt's handler) changes what it holds, and what its files are, as
// far as it goes. Two equal marks of a session mean no cell, interrupt or
// restart came between them (what a signal handler or timer of the
// user's does between cells is not seen).
type Mark struct {
	of                *agent
	count, interrupts int
}

// Mark is where the session's interpreter stands now: take it while the
// session's turn is held (in a ForkRequest's hooks), or it may be a cell
// old when it is read.
func (s *Session) Mark() Mark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Mark{s.agent, s.count, s.interrupts}
}

// Process is the session's interpreter (nil once it died).
func (s *Session) Process() Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == nil {
		return nil
	}
	return s.agent.proc
}

// Start launches a session's interpreter in a sandbox through l and waits
// until it is ready. id and sandboxID only name it in Info.
func Start(id, sandboxID string, l Launcher, o Options) (*Session, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s := &Session{id: id, sandbox: sandboxID, opts: o, launch: l, created: time.Now(), turn: make(chan struct{}, 1)}
	a, err := startAgent(l, &s.opts)
	if err != nil {
		return nil, err
	}
	s.agent = a
	return s, nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Info describes the session.
func (s *Session) Info() api.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := api.Session{
		ID: s.id, SandboxID: s.sandbox, Language: s.opts.Spec.Language, State: api.SessionIdle,
		ExecutionCount: s.count, Queued: s.queued, CreatedAt: s.created, Spec: s.opts.Spec,
	}
	switch {
	case s.agent == nil:
		info.State, info.DeadReason = api.SessionDead, s.dead
	case s.running:
		info.State = api.SessionBusy
	}
	if s.agent != nil {
		info.Pid = s.agent.pid
	}
	return info
}

// take waits for the session's turn; it counts as queued meanwhile.
func (s *Session) take(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%w: session %s was deleted", ErrNoSession, s.id)
	}
	s.queued++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.queued--
		s.mu.Unlock()
	}()
	select {
	case s.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Session) give() { <-s.turn }

// Event is one thing a running cell did, as it happened: output, a
// result, an error. Stdout and Stderr events carry valid UTF-8 (a
// character split between two reads is sent whole with the second).
type Event = api.SessionEvent

// Run runs one cell, after those queued before it, and returns its whole
// result; emit (when not nil) sees each event as it happens, from the
// goroutine that called Run. A cell's own failure (a syntax error, an
// exception, a timeout, the interpreter dying) is in the Execution, not
// the error, which is for a cell that could not run: ErrDead, ErrNoSession,
// or ctx's error while it was queued. When ctx ends while the cell runs,
// the cell is interrupted.
func (s *Session) Run(ctx context.Context, cell api.CellRequest, emit func(Event)) (*api.Execution, error) {
	if cell.TimeoutMs < 0 {
		return nil, fmt.Errorf("%w: timeout_ms %d: want milliseconds > 0, or 0 for none", ErrInvalid, cell.TimeoutMs)
	}
	for k, v := range cell.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: env %q: want a name without '=' or NUL and a value without NUL", ErrInvalid, k)
		}
	}
	if err := s.take(ctx); err != nil {
		return nil, err
	}
	defer s.give()
	s.mu.Lock()
	a := s.agent
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: session %s was deleted", ErrNoSession, s.id)
	}
	if a == nil {
		why := s.dead
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s (restart it)", ErrDead, why)
	}
	s.running = true
	s.mu.Unlock()
	s.dropAhead() // before the cell writes a page

	ex := a.run(ctx, cell, &s.opts, emit)

	s.mu.Lock()
	s.running = false
	if ex.ExecutionCount == 0 { // it died before it said: it was the next
		ex.ExecutionCount = s.count + 1
	}
	s.count = ex.ExecutionCount
	if ex.SessionDead != "" && s.agent == a {
		s.agent, s.dead = nil, ex.SessionDead
	}
	s.mu.Unlock()
	if ex.SessionDead != "" {
		a.kill()
		a.close()
	}
	return ex, nil
}

// Interrupt raises KeyboardInterrupt in the running cell; between cells it
// does nothing. The session survives.
func (s *Session) Interrupt() error {
	s.mu.Lock()
	a, running := s.agent, s.running
	why := s.dead
	s.interrupts++
	s.mu.Unlock()
	s.dropAhead()
	if a == nil {
		return fmt.Errorf("%w: %s (restart it)", ErrDead, why)
	}
	if running {
		a.interrupt()
	}
	return nil
}

// Restart replaces the interpreter with a new one (a dead session comes
// back): the running cell ends with status "dead", queued cells run in the
// new interpreter, the execution count starts again.
func (s *Session) Restart(ctx context.Context) error {
	s.mu.Lock()
	old := s.agent
	if old != nil {
		old.restarting.Store(true)
	}
	s.mu.Unlock()
	s.dropAhead()
	if old != nil {
		old.kill()
	}
	if err := s.take(ctx); err != nil {
		return err
	}
	defer s.give()
	s.dropAhead() // one forked ahead meanwhile
	s.mu.Lock()
	if s.agent == old {
		s.agent, s.dead = nil, "restarting"
	}
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	a, err := startAgent(s.launch, &s.opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.dead = err.Error()
		return err
	}
	if s.closed {
		a.kill()
		a.close()
		return fmt.Errorf("%w: session %s was deleted", ErrNoSession, s.id)
	}
	s.agent, s.dead, s.count, s.forks = a, "", 0, 0
	return nil
}

// Close ends the interpreter; a running cell ends with status "dead" and
// queued ones with ErrNoSession. It returns once the interpreter is gone
// and its descriptors are closed.
func (s *Session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	a := s.agent
	s.agent, s.dead = nil, "deleted"
	s.mu.Unlock()
	s.dropAhead()
	if a == nil {
		return
	}
	a.restarting.Store(true)
	a.kill()
	// The running cell polls a's descriptors until it sees the death:
	// they are closed after it, never under it.
	s.turn <- struct{}{}
	a.close()
	<-s.turn
}

// Held asks the interpreter, between cells, what it holds that a fork
// cannot carry; ErrBusy while a cell runs (a fork is not queued).
func (s *Session) Held() (*Held, error) {
	select {
	case s.turn <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: fork it when the cell has ended (or interrupt it)", ErrBusy)
	}
	defer s.give()
	s.mu.Lock()
	a, why := s.agent, s.dead
	s.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("%w: %s (restart it)", ErrDead, why)
	}
	return a.held()
}

// Held is what a session's interpreter holds that a forked copy would not
// have: threads besides its own, sockets, child processes; or would
// share with the parent: shared memory mappings ("RANGE PATH").
type Held struct {
	Threads  int      `json:"threads"`
	Sockets  []int    `json:"sockets"`
	Children []int    `json:"children"`
	Shared   []string `json:"shared"`
	// Written are private mappings of files under /tmp, /dev/shm or
	// /run ("RANGE PATH"): the parent's later writes to those files would
	// show through the copies' pages not yet written.
	Written []string `json:"written"`
}

// Err is nil when nothing is held, else ErrHeld naming what is.
func (h *Held) Err() error {
	var what []string
	if h.Threads > 0 {
		what = append(what, fmt.Sprintf("%d thread(s) besides the main one (only the forking thread would survive)", h.Threads))
	}
	if len(h.Sockets) > 0 {
		what = append(what, fmt.Sprintf("open socket(s) on fd %v (a connection cannot be in two processes)", h.Sockets))
	}
	if len(h.Children) > 0 {
		what = append(what, fmt.Sprintf("child process(es) %v (they would stay the parent's)", h.Children))
	}
	if len(h.Shared) > 0 {
		what = append(what, fmt.Sprintf("shared memory mapping(s) %q (the copies would share them with the parent and each other)", h.Shared))
	}
	if len(h.Written) > 0 {
		what = append(what, fmt.Sprintf("mapping(s) of files in the sandbox's tmpfs %q (the parent's later writes to those files would show in the copies)", h.Written))
	}
	if len(what) == 0 {
		return nil
	}
	msg := what[0]
	for _, w := range what[1:] {
		msg += "; " + w
	}
	return fmt.Errorf("%w: it holds %s; join the threads, close the sockets and shared mappings and wait for the children in a cell first (a fork of the sandbox, POST /v1/sandboxes/{id}/fork, copies its files but no process)", ErrHeld, msg)
}
