package server

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/sandbox"
)

// fakeRuntime stands in for internal/sandbox so the HTTP layer can be
// tested without root: a "sandbox" is a temporary directory, and an exec
// runs the command on the host with the given stdio.
type fakeRuntime struct {
	t       *testing.T
	mu      sync.Mutex
	created []*fakeInstance
}

func (f *fakeRuntime) Create(s *sandbox.Spec) (Instance, error) {
	inst := &fakeInstance{root: f.t.TempDir(), done: make(chan struct{})}
	f.mu.Lock()
	f.created = append(f.created, inst)
	f.mu.Unlock()
	return inst, nil
}

func (f *fakeRuntime) Run(s *sandbox.Spec) (handoff.Runner, bool, error) {
	return nil, false, errors.New("the fake runtime has no one-shot runs")
}

func (f *fakeRuntime) Close() {}

func (f *fakeRuntime) PoolReady() int { return 0 }

type fakeInstance struct {
	root      string
	done      chan struct{}
	closeOnce sync.Once
}

func (i *fakeInstance) Pid() int              { return os.Getpid() }
func (i *fakeInstance) Root() string          { return i.root }
func (i *fakeInstance) Usage() sandbox.Usage  { return sandbox.Usage{Pids: 1} }
func (i *fakeInstance) Done() <-chan struct{} { return i.done }
func (i *fakeInstance) Destroy() error        { i.closeOnce.Do(func() { close(i.done) }); return nil }
func (i *fakeInstance) destroyed() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

func (i *fakeInstance) Exec(e *sandbox.ExecSpec) (Process, error) {
	if e.TTY {
		return nil, errors.New("the fake runtime has no terminals")
	}
	path, err := exec.LookPath(e.Args[0])
	if err != nil {
		return nil, sandbox.ErrNotFound
	}
	cmd := exec.Command(path, e.Args[1:]...)
	cmd.Env = append(os.Environ(), e.Env...)
	cmd.Dir = e.Workdir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdio[0], e.Stdio[1], e.Stdio[2]
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &fakeProcess{cmd: cmd}, nil
}

type fakeProcess struct{ cmd *exec.Cmd }

func (p *fakeProcess) TTY() *os.File { return nil }

func (p *fakeProcess) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

func (p *fakeProcess) Wait() (*sandbox.Outcome, error) {
	err := p.cmd.Wait()
	o := &sandbox.Outcome{Reason: "exit"}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			o.ExitCode, o.Reason, o.Signal = 128+int(ws.Signal()), "signal", int(ws.Signal())
		} else {
			o.ExitCode = ws.ExitStatus()
		}
	case err != nil:
		return nil, err
	}
	return o, nil
}
