package server

import (
	"os"
	"syscall"

	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/pool"
	"github.com/tine-run/tine/internal/sandbox"
)

// Runtime makes sandboxes. The daemon reaches the kernel only through it:
// the real one is internal/sandbox with internal/pool; tests of the HTTP
// layer that must run without root plug in a stand-in.
type Runtime interface {
	// Create makes a live sandbox.
	Create(s *sandbox.Spec) (Instance, error)
	// Run starts a one-shot run (a `tine run` handed to the daemon);
	// pooled says a ready sandbox took it.
	Run(s *sandbox.Spec) (run handoff.Runner, pooled bool, err error)
	// PoolReady counts the sandboxes ready for runs.
	PoolReady() int
	// Close frees what the runtime keeps ready.
	Close()
}

// Instance is one live sandbox, as *sandbox.Sandbox offers it.
type Instance interface {
	Pid() int
	// Root is the sandbox's root filesystem as a host path, for
	// internal/inroot.
	Root() string
	Exec(e *sandbox.ExecSpec) (Process, error)
	Usage() sandbox.Usage
	Done() <-chan struct{}
	Destroy() error
}

// Process is one exec'd command, as *sandbox.Process offers it.
type Process interface {
	Wait() (*sandbox.Outcome, error)
	Signal(sig syscall.Signal) error
	// TTY is the master of the command's pseudo-terminal (nil without
	// one); the caller closes it.
	TTY() *os.File
}

// liveRuntime is the real Runtime: internal/sandbox, and a pool of ready
// sandboxes for one-shot runs.
type liveRuntime struct{ pool *pool.Pool }

// NewRuntime returns the real runtime, keeping poolSize sandboxes ready
// for one-shot runs (0: none).
func NewRuntime(poolSize int) Runtime { return liveRuntime{pool: pool.New(poolSize)} }

func (r liveRuntime) Run(s *sandbox.Spec) (handoff.Runner, bool, error) {
	if pool.Fits(s) {
		run, err := r.pool.Start(s)
		if err != nil {
			return nil, false, err
		}
		return run, run.Ready, nil
	}
	p, err := sandbox.Start(s)
	if err != nil {
		return nil, false, err
	}
	return p, false, nil
}

func (r liveRuntime) Close() { r.pool.Close() }

func (r liveRuntime) PoolReady() int { return r.pool.Ready() }

func (liveRuntime) Create(s *sandbox.Spec) (Instance, error) {
	sb, err := sandbox.Create(s)
	if err != nil {
		return nil, err
	}
	return liveInstance{sb}, nil
}

type liveInstance struct{ *sandbox.Sandbox }

// Exec runs a command without a terminal through the sandbox's PID 1
// (a fork and an execve: it already is behind every wall), and one with a
// terminal or a forkable session's interpreter by joining the sandbox
// (Exec allocates the terminal inside, and puts up the forkable walls).
func (l liveInstance) Exec(e *sandbox.ExecSpec) (Process, error) {
	if !e.TTY && !e.Forkable {
		p, err := l.Sandbox.Launch(e)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	p, err := l.Sandbox.Exec(e)
	if err != nil {
		return nil, err
	}
	return p, nil
}
