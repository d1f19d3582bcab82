package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
)

// drainGrace is how long output is still read after the command ended: a
// process it left in the background may hold its stdout open forever.
const drainGrace = 250 * time.Millisecond

// checkExec validates an exec request; stream says which mode it came in.
func (s *Server) checkExec(req *api.ExecRequest, stream bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return bad("argv is empty; give the command and its arguments, e.g. [\"/bin/sh\", \"-c\", \"echo hi\"]")
	case req.TimeoutMs < 0:
		return bad("timeout_ms %d: want milliseconds > 0, or 0 for none", req.TimeoutMs)
	case req.TimeoutMs > int64(math.MaxInt64/time.Millisecond):
		return bad("timeout_ms %d: want at most %d", req.TimeoutMs, int64(math.MaxInt64/time.Millisecond))
	case req.MaxOutputBytes < 0 || req.MaxOutputBytes > MaxOutputCap:
		return bad("max_output_bytes %d: want 1 to %d, or 0 for the default of %d", req.MaxOutputBytes, MaxOutputCap, DefaultMaxOutputBytes)
	case req.Workdir != "" && !path.IsAbs(req.Workdir):
		return bad("workdir %q must be an absolute path", req.Workdir)
	case stream && len(req.Stdin) > 0:
		return bad("stdin in the request is for the JSON mode; on the stream, send binary stdin frames")
	case !stream && req.TTY:
		return bad("tty needs the stream mode (GET /v1/sandboxes/{id}/exec/ws)")
	}
	for _, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("env entry %q is not KEY=VALUE", e)
		}
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"argv", req.Argv}, {"env", req.Env}, {"workdir", []string{req.Workdir}}} {
		if err := sandbox.NoNUL(f.name, f.vals...); err != nil {
			return err
		}
	}
	return nil
}

// execution is one command exec'd into a sandbox, from request to result.
type execution struct {
	s       *Server
	b       *box
	t0      time.Time
	started time.Time
	proc    Process
}

// start execs req into b with stdio (ignored with a TTY). A command that
// cannot be found or executed is no error: it ends at once with exit code
// 127 or 126, like a shell's, and a line for its stderr.
func (s *Server) start(b *box, req *api.ExecRequest, stdio [3]*os.File) (ex *execution, early *api.ExecExit, msg string, err error) {
	ex = &execution{s: s, b: b, t0: time.Now()}
	spec := &sandbox.ExecSpec{
		Args: req.Argv, Env: req.Env, Workdir: req.Workdir, TTY: req.TTY, Cols: req.Cols, Rows: req.Rows,
		Timeout: time.Duration(req.TimeoutMs) * time.Millisecond,
	}
	if d := b.desktopNow(); d != nil {
		// A command in a desktop sees its display unless it names one.
		spec.Env = append([]string{"DISPLAY=" + d.display}, spec.Env...)
	}
	if !req.TTY {
		spec.Stdio = stdio
	}
	proc, err := b.inst.Exec(spec)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		early = &api.ExecExit{ExitCode: 127, Reason: "not-found"}
		msg = fmt.Sprintf("tine: %s: not found in sandbox\n", req.Argv[0])
	case errors.Is(err, sandbox.ErrPermission):
		early = &api.ExecExit{ExitCode: 126, Reason: "not-executable"}
		msg = fmt.Sprintf("tine: %s: permission denied in sandbox\n", req.Argv[0])
	case err != nil:
		return nil, nil, "", fmt.Errorf("exec %s: %w", req.Argv[0], err)
	}
	ex.started = time.Now()
	if early != nil {
		early.TimingsMs = api.Timings{Start: msSince(ex.t0, ex.started), Total: msSince(ex.t0, time.Now())}
		s.metrics.execs.WithLabelValues(early.Reason).Inc()
		return nil, early, msg, nil
	}
	ex.proc = proc
	b.mu.Lock()
	b.execs++
	b.mu.Unlock()
	return ex, nil, "", nil
}

// wait waits for the command; when ctx ends first (the client went away)
// it kills the command, so that nothing of it stays behind.
func (ex *execution) wait(ctx context.Context) (*api.ExecExit, error) {
	waited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			ex.proc.Signal(syscall.SIGKILL)
		case <-waited:
		}
	}()
	o, err := ex.proc.Wait()
	close(waited)
	ex.b.mu.Lock()
	ex.b.execs--
	ex.b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ex.s.metrics.execs.WithLabelValues(o.Reason).Inc()
	return &api.ExecExit{
		ExitCode: o.ExitCode, Reason: o.Reason, Signal: o.Signal,
		TimingsMs: api.Timings{Start: msSince(ex.t0, ex.started), Run: o.Phases.Run},
	}, nil
}

func (s *Server) execJSON(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if err := s.checkExec(&req, false); err != nil {
		return err
	}
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	// The command may run longer than the write timeout: the answer gets
	// its own once it ends.
	answer := holdDeadlines(w, r)
	limit := req.MaxOutputBytes
	if limit == 0 {
		limit = DefaultMaxOutputBytes
	}

	var p pipes
	defer p.close()
	if err := p.open(); err != nil {
		return err
	}
	ex, early, msg, err := s.start(b, &req, p.child)
	p.closeChild()
	if err != nil {
		return err
	}
	res := api.ExecResult{Stdout: []byte{}, Stderr: []byte{}}
	if early != nil {
		res.ExecExit, res.Stderr = *early, []byte(msg)
		answer()
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	go func() {
		p.parent[0].Write(req.Stdin)
		p.parent[0].Close()
	}()
	stdout, stderr := &capture{max: limit}, &capture{max: limit}
	copied := make(chan struct{}, 2)
	go func() { io.Copy(stdout, p.parent[1]); copied <- struct{}{} }()
	go func() { io.Copy(stderr, p.parent[2]); copied <- struct{}{} }()

	exit, err := ex.wait(r.Context())
	p.drainBy(time.Now().Add(drainGrace))
	<-copied
	<-copied
	answer()
	if err != nil {
		return err
	}
	exit.TimingsMs.Total = msSince(ex.t0, time.Now())
	res.ExecExit = *exit
	res.Stdout, res.StdoutTruncated = append([]byte{}, stdout.buf...), stdout.dropped > 0
	res.Stderr, res.StderrTruncated = append([]byte{}, stderr.buf...), stderr.dropped > 0
	writeJSON(w, http.StatusOK, res)
	return nil
}

// pipes are the three stdio pipes of an exec: the child's ends go to the
// sandbox (stdin's read end, stdout's and stderr's write ends), the
// parent's stay with the daemon.
type pipes struct {
	child  [3]*os.File
	parent [3]*os.File
}

func (p *pipes) open() error {
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("stdio pipe: %w", err)
		}
		if i == 0 {
			p.child[i], p.parent[i] = r, w
		} else {
			p.child[i], p.parent[i] = w, r
		}
	}
	return nil
}

// closeChild closes the daemon's copies of the child's ends, so that the
// output pipes reach end of file when the command's side closes.
func (p *pipes) closeChild() {
	for i, f := range p.child {
		if f != nil {
			f.Close()
			p.child[i] = nil
		}
	}
}

// drainBy stops reading output at deadline.
func (p *pipes) drainBy(deadline time.Time) {
	for _, f := range p.parent[1:] {
		if f != nil {
			f.SetReadDeadline(deadline)
		}
	}
}

func (p *pipes) close() {
	p.closeChild()
	for _, f := range p.parent {
		if f != nil {
			f.Close()
		}
	}
}

// capture keeps the first max bytes written to it and counts the rest.
type capture struct {
	max     int64
	buf     []byte
	dropped int64
}

func (c *capture) Write(b []byte) (int, error) {
	keep := min(int64(len(b)), c.max-int64(len(c.buf)))
	c.buf = append(c.buf, b[:keep]...)
	c.dropped += int64(len(b)) - keep
	return len(b), nil
}

func msSince(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
