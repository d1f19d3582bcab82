package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
)

// process is a command envd started: its config, its input, and the
// streams (Start's and any Connect's) its events go to.
type process struct {
	pid    uint32
	tag    *string
	config ProcessConfig
	cmd    *exec.Cmd

	stdin io.WriteCloser // nil without stdin
	pty   *os.File       // the terminal's controlling end, nil without one

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	done chan struct{} // closed after the end event went to every stream
}

// subscriber is one stream's share of a process's events; gone closes
// when the stream ends, so a publish blocked on a client that left moves on.
type subscriber struct {
	ch   chan *ProcessEvent
	gone chan struct{}
}

// processes is envd's table of the commands it started and that still run.
type processes struct {
	env *environment

	mu    sync.Mutex
	byPid map[uint32]*process
}

func (t *processes) find(sel *ProcessSelector) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sel != nil {
		if sel.Pid != nil {
			if p, ok := t.byPid[*sel.Pid]; ok {
				return p, nil
			}
		} else if sel.Tag != nil {
			for _, p := range t.byPid {
				if p.tag != nil && *p.tag == *sel.Tag {
					return p, nil
				}
			}
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found (it may have ended)", sel))
}

// subscribe adds a stream; nil once the process ended.
func (p *process) subscribe() *subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		return nil
	}
	sub := &subscriber{ch: make(chan *ProcessEvent, 64), gone: make(chan struct{})}
	p.subs[sub] = struct{}{}
	return sub
}

func (p *process) unsubscribe(sub *subscriber) {
	p.mu.Lock()
	if p.subs != nil {
		delete(p.subs, sub)
	}
	p.mu.Unlock()
	close(sub.gone)
}

// publish hands ev to every stream. A stream that does not keep up holds
// the output back (the command blocks on a full pipe), as a slow reader of
// a pipe does.
func (p *process) publish(ev *ProcessEvent, last bool) {
	p.mu.Lock()
	subs := slices.Collect(maps.Keys(p.subs))
	if last {
		p.subs = nil
	}
	p.mu.Unlock()
	for _, sub := range subs {
		select {
		case sub.ch <- ev:
		case <-sub.gone:
		}
		if last {
			close(sub.ch)
		}
	}
}

// start runs req's command: /bin/bash -l -c for commands.run, a login
// shell on a terminal for pty.create. The caller's stream is subscribed
// before any output can be read, so it misses nothing.
func (t *processes) start(req *StartRequest) (*process, *subscriber, error) {
	if req.Process == nil || req.Process.Cmd == "" {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty: say what to run"))
	}
	cfg := *req.Process
	cmd := exec.Command(cfg.Cmd, cfg.Args...)
	cmd.Env = t.env.commandEnv(cfg.Envs)
	cmd.Dir = t.env.workdir()
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cmd.Dir = t.env.resolve(*cfg.Cwd)
	}
	if st, err := os.Stat(cmd.Dir); err != nil || !st.IsDir() {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %q is not a directory in the sandbox", cmd.Dir))
	}
	// Its own session: signals and kills reach what it starts too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p := &process{tag: req.Tag, config: cfg, cmd: cmd, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	var readers []io.Reader
	var kinds []string
	var closeAfterStart []io.Closer
	if req.PTY != nil {
		ctl, tty, err := openPTY()
		if err != nil {
			return nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		if req.PTY.Size != nil {
			setSize(ctl, req.PTY.Size)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
		p.pty = ctl
		readers, kinds = []io.Reader{ctl}, []string{"pty"}
		closeAfterStart = append(closeAfterStart, tty)
	} else {
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		readers, kinds = []io.Reader{stdout, stderr}, []string{"stdout", "stderr"}
		if req.Stdin == nil || *req.Stdin {
			if p.stdin, err = cmd.StdinPipe(); err != nil {
				return nil, nil, connect.NewError(connect.CodeInternal, err)
			}
		}
	}
	sub := p.subscribe()
	if err := cmd.Start(); err != nil {
		for _, c := range closeAfterStart {
			c.Close()
		}
		if p.pty != nil {
			p.pty.Close()
		}
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start %s: %w", cfg.Cmd, err))
	}
	for _, c := range closeAfterStart {
		c.Close()
	}
	p.pid = uint32(cmd.Process.Pid)
	t.mu.Lock()
	t.byPid[p.pid] = p
	t.mu.Unlock()
	sub.ch <- &ProcessEvent{Start: &StartEvent{Pid: p.pid}}

	var output sync.WaitGroup
	for i, r := range readers {
		output.Go(func() { p.pump(r, kinds[i]) })
	}
	go func() {
		output.Wait()
		err := cmd.Wait()
		if p.pty != nil {
			p.pty.Close()
		}
		t.mu.Lock()
		delete(t.byPid, p.pid)
		t.mu.Unlock()
		p.publish(&ProcessEvent{End: endEvent(cmd.ProcessState, err)}, true)
		close(p.done)
	}()
	return p, sub, nil
}

// pump publishes what the command writes on one stream until it closes.
func (p *process) pump(r io.Reader, kind string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := slices.Clone(buf[:n])
			ev := &DataEvent{}
			switch kind {
			case "stdout":
				ev.Stdout = data
			case "stderr":
				ev.Stderr = data
			default:
				ev.PTY = data
			}
			p.publish(&ProcessEvent{Data: ev}, false)
		}
		if err != nil {
			return // EOF, or EIO from a terminal whose last holder closed it
		}
	}
}

func endEvent(st *os.ProcessState, waitErr error) *EndEvent {
	ev := &EndEvent{}
	if st == nil {
		msg := fmt.Sprint(waitErr)
		ev.ExitCode, ev.Error, ev.Status = -1, &msg, "error"
		return ev
	}
	ev.ExitCode = int32(st.ExitCode())
	ev.Exited = st.Exited()
	ev.Status = st.String()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ev.Status = "signal: " + ws.Signal().String()
	}
	return ev
}

// stream sends ch's events on the RPC's stream, with keepalives at the
// interval the client asked for, until the process ends or the client
// goes away.
func stream[T any](ctx context.Context, s *connect.ServerStream[T], ch <-chan *ProcessEvent, wrap func(*ProcessEvent) *T, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if err := s.Send(wrap(ev)); err != nil {
				return err
			}
			if ev.End != nil {
				return nil
			}
		case <-tick.C:
			if err := s.Send(wrap(&ProcessEvent{Keepalive: &Empty{}})); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func wrapEvent(ev *ProcessEvent) *StreamResponse { return &StreamResponse{Event: ev} }

// keepaliveInterval is the client's Keepalive-Ping-Interval (seconds),
// default 50 as the SDKs send.
func keepaliveInterval(h interface{ Get(string) string }) time.Duration {
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(h.Get("Keepalive-Ping-Interval")), &n); err != nil || n <= 0 {
		n = 50
	}
	return time.Duration(n) * time.Second
}

func (t *processes) Start(ctx context.Context, req *connect.Request[StartRequest], s *connect.ServerStream[StreamResponse]) error {
	p, sub, err := t.start(req.Msg)
	if err != nil {
		return err
	}
	defer p.unsubscribe(sub)
	return stream(ctx, s, sub.ch, wrapEvent, keepaliveInterval(req.Header()))
}

func (t *processes) Connect(ctx context.Context, req *connect.Request[ConnectRequest], s *connect.ServerStream[StreamResponse]) error {
	p, err := t.find(req.Msg.Process)
	if err != nil {
		return err
	}
	sub := p.subscribe()
	if sub == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d has ended", p.pid))
	}
	defer p.unsubscribe(sub)
	if err := s.Send(&StreamResponse{Event: &ProcessEvent{Start: &StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	return stream(ctx, s, sub.ch, wrapEvent, keepaliveInterval(req.Header()))
}

func (t *processes) List(context.Context, *connect.Request[ListRequest]) (*connect.Response[ListResponse], error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &ListResponse{}
	for _, p := range t.byPid {
		cfg := p.config
		out.Processes = append(out.Processes, ProcessInfo{Config: &cfg, Pid: p.pid, Tag: p.tag})
	}
	slices.SortFunc(out.Processes, func(a, b ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	return connect.NewResponse(out), nil
}

func (t *processes) SendInput(_ context.Context, req *connect.Request[SendInputRequest]) (*connect.Response[Empty], error) {
	p, err := t.find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	in := req.Msg.Input
	if in == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input is missing: give stdin or pty bytes"))
	}
	switch {
	case in.PTY != nil:
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no terminal: send stdin", p.pid))
		}
		_, err = p.pty.Write(in.PTY)
	default:
		if p.pty != nil {
			_, err = p.pty.Write(in.Stdin)
		} else if p.stdin == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d was started without stdin (stdin: false)", p.pid))
		} else {
			_, err = p.stdin.Write(in.Stdin)
		}
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write to process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&Empty{}), nil
}

func (t *processes) SendSignal(_ context.Context, req *connect.Request[SendSignalRequest]) (*connect.Response[Empty], error) {
	p, err := t.find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.Signal {
	case SignalSIGKILL:
		sig = syscall.SIGKILL
	case SignalSIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %d: only SIGNAL_SIGTERM and SIGNAL_SIGKILL are defined", req.Msg.Signal))
	}
	// The whole session: bash -c's children go with it.
	if err := syscall.Kill(-int(p.pid), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&Empty{}), nil
}

func (t *processes) CloseStdin(_ context.Context, req *connect.Request[CloseStdinRequest]) (*connect.Response[Empty], error) {
	p, err := t.find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if p.pty != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has a terminal: send Ctrl-D (0x04) instead", p.pid))
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
	return connect.NewResponse(&Empty{}), nil
}

func (t *processes) Update(_ context.Context, req *connect.Request[UpdateRequest]) (*connect.Response[Empty], error) {
	p, err := t.find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if req.Msg.PTY != nil && req.Msg.PTY.Size != nil {
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no terminal to resize", p.pid))
		}
		if err := setSize(p.pty, req.Msg.PTY.Size); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	return connect.NewResponse(&Empty{}), nil
}
