// Package pool keeps live sandboxes ready for one-shot runs: a `tine run`
// handed to the daemon finds its namespaces, mounts and cgroup already
// made, and pays only for joining them and exec'ing its command. A pooled
// sandbox serves exactly one run and is destroyed after it; the pool
// refills in the background, so no state ever passes from one run to the
// next.
package pool

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
)

// Pool holds up to size ready sandboxes made from the default spec.
type Pool struct {
	size  int
	ready chan *sandbox.Sandbox

	mu      sync.Mutex
	closed  bool
	filling int
	lastErr error
	wg      sync.WaitGroup
}

// New starts filling a pool of size sandboxes (0 disables pooling).
func New(size int) *Pool {
	p := &Pool{size: size, ready: make(chan *sandbox.Sandbox, max(size, 1))}
	p.refill()
	return p
}

// base is the spec pooled sandboxes are made from: tine run's defaults.
func base() *sandbox.Spec {
	return &sandbox.Spec{Seccomp: seccomp.Default}
}

// Fits reports whether a run of s can use a pooled sandbox: everything but
// the command, its environment, working directory, limits and timeout must
// be tine run's default.
func Fits(s *sandbox.Spec) bool {
	return s.RootFS == "" && len(s.Binds) == 0 && !s.TTY &&
		(s.HostView == "" || s.HostView == sandbox.HostViewOS) && !s.UserNS &&
		(s.DiskBytes == 0 || s.DiskBytes == sandbox.DefaultDisk) &&
		(s.Hostname == "" || s.Hostname == "tine") &&
		(s.Seccomp == "" || s.Seccomp == seccomp.Default) && s.NetNS == nil
}

// ErrClosed means the pool was closed.
var ErrClosed = errors.New("pool closed")

// Claim returns a fresh sandbox: a ready one (ready is true), or one made
// now when none is. The caller owns it and destroys it after its one run,
// and refills the pool once the run is launched.
func (p *Pool) Claim() (sb *sandbox.Sandbox, ready bool, err error) {
	select {
	case sb := <-p.ready:
		select {
		case <-sb.Done(): // died while waiting (killed from outside)
		default:
			return sb, true, nil
		}
		sb.Destroy()
	default:
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, false, ErrClosed
	}
	sb, err = sandbox.Create(base())
	return sb, false, err
}

// refill starts making sandboxes until the ready ones and those being made
// reach the pool's size.
func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.ready)+p.filling < p.size {
		p.filling++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			sb, err := sandbox.Create(base())
			p.mu.Lock()
			p.filling--
			p.lastErr = err
			closed := p.closed
			p.mu.Unlock()
			if err != nil {
				return // the next Claim retries
			}
			if closed {
				sb.Destroy()
				return
			}
			p.ready <- sb
		}()
	}
}

func msSince(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }

// Ready returns how many sandboxes wait in the pool now.
func (p *Pool) Ready() int { return len(p.ready) }

// Close destroys the ready sandboxes and stops refilling.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	for {
		select {
		case sb := <-p.ready:
			sb.Destroy()
		default:
			return
		}
	}
}

// Run is a one-shot run in a pooled sandbox.
type Run struct {
	pool   *Pool
	sb     *sandbox.Sandbox
	cmd    *sandbox.Launched
	phases sandbox.Phases
	// Ready says whether a ready sandbox took the run (false: one was
	// made for it, the pool being empty).
	Ready bool
}

// Start runs s's command in a claimed sandbox with s's limits. s must Fit.
func (p *Pool) Start(s *sandbox.Spec) (*Run, error) {
	if len(s.Args) == 0 {
		return nil, errors.New("pool: no command given")
	}
	t0 := time.Now()
	sb, ready, err := p.Claim()
	if err != nil {
		p.refill()
		return nil, err
	}
	if err := sb.ApplyLimits(s); err != nil {
		sb.Destroy()
		p.refill()
		return nil, err
	}
	wd := s.Workdir
	if wd == "" {
		wd = "/"
	}
	// The sandbox's PID 1 forks the command: it inherits namespaces, cgroup
	// and walls, so the run costs a fork and an execve.
	t1 := time.Now()
	cmd, err := sb.Launch(&sandbox.ExecSpec{Args: s.Args, Env: s.Env, Workdir: wd, Stdio: s.Stdio, Timeout: s.Timeout, Last: true})
	if err != nil {
		go sb.Destroy()
		p.refill()
		return nil, err
	}
	phases := sandbox.Phases{Plan: msSince(t0, t1), Start: msSince(t1, time.Now())}
	return &Run{pool: p, sb: sb, cmd: cmd, phases: phases, Ready: ready}, nil
}

// Signal sends sig to the command.
func (r *Run) Signal(sig syscall.Signal) error { return r.cmd.Signal(sig) }

// Wait waits for the command and returns its outcome; the sandbox is then
// destroyed in the background (everything the command left running dies
// with it; Close waits for that), and the pool refilled after that. The
// refill starts once the run is over, not while its command runs: on a
// small host a new sandbox's making (~10 ms of CPU) took the cores the
// run and its answer were waiting for (ADR 0023, sixth session).
func (r *Run) Wait() (*sandbox.Outcome, error) {
	o, err := r.cmd.Wait()
	usage := r.sb.Spent()
	// Add to the WaitGroup only while the pool is open: Close waits on it.
	r.pool.mu.Lock()
	if r.pool.closed {
		r.pool.mu.Unlock()
		r.sb.Destroy()
	} else {
		r.pool.wg.Add(1)
		r.pool.mu.Unlock()
		go func() {
			defer r.pool.wg.Done()
			r.sb.Destroy()
			r.pool.refill()
		}()
	}
	if o != nil {
		// A fresh sandbox: all of its use is this run's.
		o.PeakMemoryBytes, o.CPUTimeMs = usage.PeakMemoryBytes, usage.CPUTimeMs
		o.Phases.Plan, o.Phases.Start = r.phases.Plan, r.phases.Start
	}
	return o, err
}
