package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/sandbox"
)

// run takes a one-shot run handed over by `tine run` (protocol in
// internal/handoff): the request is checked and counted against the budget
// like a sandbox, then the connection is taken over to receive the CLI's
// stdio descriptors. It works on the unix socket only, since descriptors
// cannot cross TCP.
func (s *Server) run(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), handoff.Protocol) {
		return fmt.Errorf("%w: POST %s needs \"Upgrade: %s\"; it is tine run's hand-off, see internal/handoff", ErrInvalidArgument, handoff.Path, handoff.Protocol)
	}
	if _, unix := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr); !unix {
		return fmt.Errorf("%w: a run hands over its stdio descriptors, which only the unix socket carries", ErrInvalidArgument)
	}
	var req handoff.Request
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	spec, err := specFromRun(&req)
	if err != nil {
		return err
	}
	if s.isClosing() {
		return ErrShuttingDown
	}
	release, err := s.capacity.admit(spec.Limits.MemoryBytes)
	if err != nil {
		return err
	}
	defer release()
	s.setDefaultLimits(spec)

	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("take over the connection: %w", err)
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil
	}
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", handoff.Protocol)
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.status = http.StatusSwitchingProtocols // for the latency metric
	}
	start := func(stdio [3]*os.File) (handoff.Runner, handoff.Started, error) {
		spec.Stdio = stdio
		run, pooled, err := s.rt.Run(spec)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			// As in-process: tine run prints the line and exits 127.
			return endedRun{&sandbox.Outcome{ExitCode: 127, Reason: "not-found"}}, handoff.Started{Pooled: pooled}, nil
		case errors.Is(err, sandbox.ErrPermission):
			fmt.Fprintf(stdio[2], "tine: %s: permission denied in sandbox\n", spec.Args[0])
			return endedRun{&sandbox.Outcome{ExitCode: 126, Reason: "not-executable"}}, handoff.Started{Pooled: pooled}, nil
		case err != nil:
			return nil, handoff.Started{}, fmt.Errorf("run %s: %w", spec.Args[0], err)
		}
		s.log.Debug("run handed over", "args", spec.Args, "pooled", pooled)
		return s.track(run), handoff.Started{Pooled: pooled}, nil
	}
	handoff.Serve(uc, brw.Reader, start, func(err error) *api.Error {
		_, body := s.report(err, "run")
		return body
	})
	return nil
}

// specFromRun checks a run's request, before the upgrade, exactly as a
// create request is checked (specFromAPI), plus what only a run has: its
// command and its timeout.
func specFromRun(req *handoff.Request) (*sandbox.Spec, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return nil, fmt.Errorf("%w: args is empty; a run needs a command", ErrInvalidArgument)
	}
	timeout, err := durationField("timeout_ms", req.TimeoutMs, time.Millisecond)
	if err != nil {
		return nil, err
	}
	spec, err := specFromAPI(&api.SandboxSpec{
		RootFS: req.RootFS, HostView: req.HostView, UserNS: req.UserNS, DiskBytes: req.DiskBytes, Env: req.Env, Workdir: req.Workdir,
		Hostname: req.Hostname, Seccomp: req.Seccomp, Binds: req.Binds, Limits: req.Limits,
	})
	if err != nil {
		return nil, err
	}
	for _, l := range req.Layers {
		if !path.IsAbs(l) || strings.IndexByte(l, 0) >= 0 {
			return nil, fmt.Errorf("%w: layer %q: want an absolute host path", ErrInvalidArgument, l)
		}
	}
	if len(req.Layers) > 0 && req.RootFS == "" {
		return nil, fmt.Errorf("%w: layers stack over a rootfs (an image's bottom layer); give one", ErrInvalidArgument)
	}
	if req.User != nil && len(req.User.Groups) > 64 {
		return nil, fmt.Errorf("%w: user with %d supplementary groups, at most 64", ErrInvalidArgument, len(req.User.Groups))
	}
	spec.Args, spec.Timeout, spec.Layers, spec.User = req.Args, timeout, req.Layers, req.User
	return spec, nil
}

// endedRun is a run that ended before it began: its command could not be
// found or executed.
type endedRun struct{ o *sandbox.Outcome }

func (e endedRun) Signal(syscall.Signal) error     { return nil }
func (e endedRun) Wait() (*sandbox.Outcome, error) { return e.o, nil }

// trackedRun is a handed-over run the server knows of until it ends.
type trackedRun struct {
	handoff.Runner
	s *Server
}

// track registers run so that Close kills it and waits for it; a run that
// starts while the daemon closes is killed at once.
func (s *Server) track(run handoff.Runner) handoff.Runner {
	t := &trackedRun{Runner: run, s: s}
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[*trackedRun]struct{}{}
	}
	s.runs[t] = struct{}{}
	s.runsDone.Add(1)
	closing := s.closing
	s.mu.Unlock()
	if closing {
		run.Signal(syscall.SIGKILL)
	}
	return t
}

func (t *trackedRun) Wait() (*sandbox.Outcome, error) {
	defer func() {
		t.s.mu.Lock()
		delete(t.s.runs, t)
		t.s.mu.Unlock()
		t.s.runsDone.Done()
	}()
	return t.Runner.Wait()
}
