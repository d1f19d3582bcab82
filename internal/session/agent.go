package session

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/capped"
	"github.com/tine-run/tine/internal/sandbox"
)

// readyTimeout bounds an interpreter's start (its imports are the
// standard library's; a loaded host is slow, not this slow).
const readyTimeout = 60 * time.Second

// maxFrame bounds one frame from the agent (a figure's PNG travels in one).
const maxFrame = 64 << 20

// agent is one running interpreter: the daemon's ends of its control
// socket (frames) and of its stdout and stderr pipes (raw output), all
// non-blocking and read only by the goroutine running a cell, with poll.
type agent struct {
	proc     Process
	pid      int
	ctl      int
	out, err int
	// wake is readable once the interpreter has exited (exited is closed,
	// outcome set): its death ends a poll however many processes still
	// hold its socket or pipes.
	wake  int
	wakeW int
	// pidfd is a copy forked ahead's own, until a fork claims it (it
	// has no proc yet); -1 otherwise.
	pidfd   int
	exited  chan struct{}
	outcome *sandbox.Outcome
	inbuf   []byte
	// pending is output read from the pipes (stdout, stderr) and not yet
	// passed on; released counts what was passed on since the last cell's
	// end, from that end's counts (see release and endCell).
	pending  [2][]byte
	released [2]int64
	closeOne sync.Once

	interrupts atomic.Int64 // interrupts sent (a KeyboardInterrupt then is "interrupted")
	restarting atomic.Bool  // killed on purpose: its cell ends "dead" with that reason
}

// frame is a message of the agent (see agent/python.py).
type frame struct {
	Type string         `json:"type"`
	Pid  int            `json:"pid"`
	Data map[string]any `json:"data"`
	Main bool           `json:"main"`
	// error
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	// end
	Count int `json:"count"`
	// Out and Err count the bytes sys.stdout and sys.stderr had written
	// when the frame was sent.
	Out int64 `json:"out"`
	Err int64 `json:"err"`
	Held
}

func startAgent(l Launcher, o *Options) (a *agent, err error) {
	a, ends, err := newAgent()
	if err != nil {
		return nil, err
	}
	defer ends.close()
	undo := []func(){a.closeFDs}
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	agentEnd, outW, errW := ends[0], ends[1], ends[2]
	// -u: output reaches the pipes as it is written, so it streams.
	proc, err := l.Exec(&sandbox.ExecSpec{
		Args:     []string{o.Python, "-u", "-c", pythonAgent},
		Env:      o.Spec.Env,
		Workdir:  o.Spec.Workdir,
		Stdio:    [3]*os.File{agentEnd, outW, errW},
		Forkable: o.Spec.Forkable,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: launch %s: %w", ErrStart, o.Python, err)
	}
	a.watch(proc)
	undo = append(undo, func() { proc.Signal(syscall.SIGKILL); <-a.exited })
	return a, a.awaitReady()
}

// agentEnds are the interpreter's ends of its control socket and of its
// stdout and stderr pipes, until it holds its own copies.
type agentEnds [3]*os.File

func (e agentEnds) close() {
	for _, f := range e {
		if f != nil {
			f.Close()
		}
	}
}

// newAgent makes the daemon's ends of an interpreter's channels (its
// control socket, its stdout and stderr pipes, the wake pipe) and returns
// the interpreter's ends, which the caller closes once passed on.
func newAgent() (a *agent, ends agentEnds, err error) {
	a = &agent{ctl: -1, out: -1, err: -1, wake: -1, wakeW: -1, pidfd: -1, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			a.closeFDs()
			ends.close()
		}
	}()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, ends, fmt.Errorf("%w: control socket: %v", ErrStart, err)
	}
	a.ctl, ends[0] = pair[0], os.NewFile(uintptr(pair[1]), "session control")
	var out, errp [2]int
	if err := unix.Pipe2(out[:], unix.O_CLOEXEC); err != nil {
		return nil, ends, fmt.Errorf("%w: stdout pipe: %v", ErrStart, err)
	}
	a.out, ends[1] = out[0], os.NewFile(uintptr(out[1]), "session stdout")
	if err := unix.Pipe2(errp[:], unix.O_CLOEXEC); err != nil {
		return nil, ends, fmt.Errorf("%w: stderr pipe: %v", ErrStart, err)
	}
	a.err, ends[2] = errp[0], os.NewFile(uintptr(errp[1]), "session stderr")
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, ends, fmt.Errorf("%w: wake pipe: %v", ErrStart, err)
	}
	a.wake, a.wakeW = wake[0], wake[1]
	for _, fd := range []int{a.ctl, a.out, a.err} {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, ends, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	return a, ends, nil
}

// closeFDs closes the daemon's ends (of an agent never started, or gone).
func (a *agent) closeFDs() {
	for _, fd := range []int{a.ctl, a.out, a.err, a.wake, a.wakeW, a.pidfd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// watch makes proc the agent's process: its exit wakes the agent's polls.
func (a *agent) watch(proc Process) {
	a.proc = proc
	go func() {
		a.outcome, _ = proc.Wait()
		close(a.exited)
		unix.Write(a.wakeW, []byte{1})
	}()
}

// awaitReady waits for the interpreter's ready frame.
func (a *agent) awaitReady() error {
	var ready *frame
	var stderr capped.Buffer
	stderr.Max = 16 << 10
	deadline := time.Now().Add(readyTimeout)
	for ready == nil {
		f, err := a.next(deadline, func(fd int, p []byte) {
			if fd == a.err {
				stderr.Write(p)
			}
		})
		if err != nil {
			why := err.Error()
			if errors.Is(err, errExited) {
				why = a.exitReason()
			}
			return fmt.Errorf("%w: %s before it was ready; its stderr:\n%s", ErrStart, why, stderr.String())
		}
		switch f.Type {
		case "ready":
			ready = f
		case "error": // a forked copy that could not become the child's
			return fmt.Errorf("%w: %s: %s", ErrStart, f.Name, f.Value)
		}
	}
	a.pid = ready.Pid
	return nil
}

var (
	errExited  = errors.New("the interpreter exited")
	errTimeout = errors.New("timed out")
)

// exitReason says how the interpreter ended (once exited).
func (a *agent) exitReason() string {
	<-a.exited
	o := a.outcome
	switch {
	case o == nil:
		return "the interpreter ended (the sandbox is gone)"
	case o.Reason == "oom":
		return "the sandbox ran out of memory and the kernel killed the interpreter"
	case o.Reason == "signal":
		return fmt.Sprintf("the interpreter was killed by signal %d", o.Signal)
	default:
		return fmt.Sprintf("the interpreter exited with code %d", o.ExitCode)
	}
}

// next returns the agent's next frame, passing output to output (fd is
// a.out or a.err) in its place: the output a frame says preceded it is
// passed before the frame is returned.
func (a *agent) next(deadline time.Time, output func(fd int, p []byte)) (*frame, error) {
	buf := make([]byte, 64<<10)
	exited := false
	for {
		f, err := a.parse()
		if err != nil {
			return nil, err
		}
		if f != nil {
			// It flushed before sending: what preceded it is in the pipes.
			a.readPipes(buf)
			a.release(f.Out, f.Err, output)
			return f, nil
		}
		// Output read now may follow a frame already in the socket (the
		// agent sends a frame, then writes more): read the pipes, then the
		// socket, and release all output only when no frame came before it.
		a.readPipes(buf)
		if a.readCtl(buf) {
			exited = true
		}
		if f, err := a.parse(); err != nil {
			return nil, err
		} else if f != nil {
			a.release(f.Out, f.Err, output)
			return f, nil
		}
		a.release(-1, -1, output)
		if exited {
			return nil, errExited
		}
		fds := []unix.PollFd{
			{Fd: int32(a.ctl), Events: unix.POLLIN},
			{Fd: int32(a.out), Events: unix.POLLIN},
			{Fd: int32(a.err), Events: unix.POLLIN},
			{Fd: int32(a.wake), Events: unix.POLLIN},
		}
		timeout := -1
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return nil, errTimeout
			}
			timeout = int(left/time.Millisecond) + 1
		}
		if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
			return nil, fmt.Errorf("poll the interpreter: %w", err)
		}
		a.readPipes(buf)
		if fds[0].Revents != 0 || fds[3].Revents != 0 {
			// After its exit (wake), what it sent before it went is still
			// in the socket.
			if a.readCtl(buf) {
				exited = true
			}
		}
		if fds[3].Revents != 0 {
			exited = true
		}
	}
}

// readCtl reads what the control socket holds now into inbuf; true at EOF
// (no process holds the agent's end).
func (a *agent) readCtl(buf []byte) (eof bool) {
	for {
		n, err := unix.Read(a.ctl, buf)
		if n > 0 {
			a.inbuf = append(a.inbuf, buf[:n]...)
			continue
		}
		return n == 0 && err == nil
	}
}

// readPipes reads what the output pipes hold now into the pending output.
func (a *agent) readPipes(buf []byte) {
	for i, fd := range []int{a.out, a.err} {
		for {
			n, err := unix.Read(fd, buf)
			if n <= 0 || err != nil {
				break
			}
			a.pending[i] = append(a.pending[i], buf[:n]...)
		}
	}
}

// release passes pending output on, up to out and err bytes written in
// all (-1: all of it). The counts are sys.stdout's and sys.stderr's: what
// a process writes to the pipes past them (a subprocess, os.write) still
// counts in released, so within a cell it can hold a frame's output back
// to a later frame; endCell passes on the rest and starts the count again.
func (a *agent) release(out, err int64, output func(fd int, p []byte)) {
	for i, upTo := range []int64{out, err} {
		p := a.pending[i]
		n := int64(len(p))
		if upTo >= 0 {
			n = min(max(upTo-a.released[i], 0), n)
		}
		if n == 0 {
			continue
		}
		output([]int{a.out, a.err}[i], p[:n])
		a.pending[i] = p[n:]
		a.released[i] += n
	}
}

// parse takes one whole frame off inbuf, if there is one.
func (a *agent) parse() (*frame, error) {
	if len(a.inbuf) < 4 {
		return nil, nil
	}
	n := binary.BigEndian.Uint32(a.inbuf)
	if n > maxFrame {
		return nil, fmt.Errorf("the interpreter sent a %d-byte frame, over %d", n, maxFrame)
	}
	if len(a.inbuf) < 4+int(n) {
		return nil, nil
	}
	var f frame
	err := json.Unmarshal(a.inbuf[4:4+n], &f)
	a.inbuf = a.inbuf[4+n:]
	if err != nil {
		return nil, fmt.Errorf("bad frame from the interpreter: %w", err)
	}
	return &f, nil
}

// send writes one frame to the agent.
func (a *agent) send(v any) error {
	b, _ := json.Marshal(v)
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	return a.sendRaw(append(msg, b...))
}

// sendRaw writes msg to the agent whole.
func (a *agent) sendRaw(msg []byte) error {
	for len(msg) > 0 {
		n, err := unix.Write(a.ctl, msg)
		if err == unix.EAGAIN || err == unix.EINTR {
			fds := []unix.PollFd{{Fd: int32(a.ctl), Events: unix.POLLOUT}, {Fd: int32(a.wake), Events: unix.POLLIN}}
			unix.Poll(fds, -1)
			if fds[1].Revents != 0 {
				return errExited
			}
			continue
		}
		if err != nil {
			return errExited
		}
		msg = msg[n:]
	}
	return nil
}

// run runs one cell to its end (see Session.Run).
func (a *agent) run(ctx context.Context, cell api.CellRequest, o *Options, emit func(Event)) *api.Execution {
	t0 := time.Now()
	ex := &api.Execution{Results: []api.Result{}}
	stdout, stderr := capped.New(o.MaxOutput), capped.New(o.MaxOutput)
	var pendOut, pendErr []byte
	output := func(fd int, p []byte) {
		if fd == a.out {
			stdout.Write(p)
			pendOut = emitText(emit, api.EventStdout, pendOut, p)
		} else {
			stderr.Write(p)
			pendErr = emitText(emit, api.EventStderr, pendErr, p)
		}
	}
	finish := func() *api.Execution {
		pendOut = emitText(emit, api.EventStdout, pendOut, nil)
		pendErr = emitText(emit, api.EventStderr, pendErr, nil)
		ex.Stdout, ex.Stderr = stdout.String(), stderr.String()
		ex.StdoutTruncated, ex.StderrTruncated = stdout.Dropped(), stderr.Dropped()
		ex.DurationMs = float64(time.Since(t0).Microseconds()) / 1000
		return ex
	}
	interruptsBefore := a.interrupts.Load()
	stop := context.AfterFunc(ctx, a.interrupt)
	defer stop()

	// What was read between cells came first (keepOutput); it is past
	// the counts, so it is passed on uncounted.
	a.passKept(output)
	if err := a.send(map[string]any{"op": "run", "code": cell.Code, "env": cell.Env}); err != nil {
		a.died(ex, err)
		return finish()
	}
	var deadline time.Time
	if cell.TimeoutMs > 0 {
		deadline = time.Now().Add(time.Duration(cell.TimeoutMs) * time.Millisecond)
	}
	timedOut := false
	for {
		f, err := a.next(deadline, output)
		if errors.Is(err, errTimeout) {
			if !timedOut {
				timedOut = true
				a.interrupt()
				deadline = time.Now().Add(o.InterruptGrace)
				continue
			}
			a.kill()
			ex.Status = api.ExecTimeout
			ex.SessionDead = fmt.Sprintf("the cell ran past its timeout of %d ms and did not stop within %s of its KeyboardInterrupt, so the interpreter was killed", cell.TimeoutMs, o.InterruptGrace)
			ex.Error = &api.CellError{Name: "TimeoutError", Value: ex.SessionDead}
			<-a.exited
			return finish()
		}
		if err != nil {
			a.died(ex, err)
			return finish()
		}
		switch f.Type {
		case "result":
			r := api.Result{Data: f.Data, IsMain: f.Main}
			ex.Results = append(ex.Results, r)
			emitEvent(emit, Event{Type: api.EventResult, Result: &r})
		case "error":
			ex.Error = &api.CellError{Name: f.Name, Value: f.Value, Traceback: f.Traceback}
			emitEvent(emit, Event{Type: api.EventError, Error: ex.Error})
		case "end":
			a.endCell(f, output)
			ex.ExecutionCount = f.Count
			switch {
			case ex.Error == nil:
				ex.Status = api.ExecOK
			case ex.Error.Name == "KeyboardInterrupt" && timedOut:
				ex.Status = api.ExecTimeout
			case ex.Error.Name == "KeyboardInterrupt" && a.interrupts.Load() > interruptsBefore:
				ex.Status = api.ExecInterrupted
			default:
				ex.Status = api.ExecError
			}
			return finish()
		}
	}
}

// died fills ex for an interpreter that went during its cell.
func (a *agent) died(ex *api.Execution, err error) {
	a.kill()
	why := err.Error()
	ex.Status = api.ExecDead
	if errors.Is(err, errExited) {
		why = a.exitReason()
		if a.outcome != nil && a.outcome.Reason == "oom" {
			ex.Status = api.ExecOOM
		}
	}
	if a.restarting.Load() {
		why = "the session was restarted or deleted while the cell ran"
	}
	ex.SessionDead = why
	name := "SessionDead"
	if ex.Status == api.ExecOOM {
		name = "MemoryError"
	}
	ex.Error = &api.CellError{Name: name, Value: why}
}

// emitText sends the complete UTF-8 of pend+p as one event and returns
// what is left (a character cut by the read); p nil flushes everything.
func emitText(emit func(Event), typ api.SessionEventType, pend, p []byte) []byte {
	b := append(pend, p...)
	keep := 0
	if p != nil {
		// At most 3 bytes of an unfinished character at the end.
		for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					keep = len(b) - i
				}
				break
			}
		}
	}
	if len(b)-keep > 0 {
		emitEvent(emit, Event{Type: typ, Text: string(b[:len(b)-keep])})
	}
	return append([]byte(nil), b[len(b)-keep:]...)
}

func emitEvent(emit func(Event), e Event) {
	if emit != nil {
		emit(e)
	}
}

// interrupt raises KeyboardInterrupt in the running cell.
func (a *agent) interrupt() {
	a.interrupts.Add(1)
	a.proc.Signal(syscall.SIGINT)
}

// endCell passes on all output read by the end of a cell (f, its end
// frame): what a process wrote past sys.stdout's count before the end is
// the cell's, and its bytes must not count against the next cell's
// frames (they would hold the next cell's own output back, past its end).
// The count starts again from the end frame's.
func (a *agent) endCell(f *frame, output func(fd int, p []byte)) {
	a.release(-1, -1, output)
	a.released = [2]int64{f.Out, f.Err}
}

// passKept passes on output read between cells, before the next cell
// runs, leaving the counts as the last end frame set them.
func (a *agent) passKept(output func(fd int, p []byte)) {
	for i, fd := range []int{a.out, a.err} {
		if len(a.pending[i]) > 0 {
			output(fd, a.pending[i])
			a.pending[i] = nil
		}
	}
}

// keepOutput is an output function for next between cells, and what
// puts the output it was given back, for the next cell: what the
// interpreter's processes write between cells (not counted by its
// sys.stdout) belongs to that cell, and dropping it would also leave the
// release counts past the next cell's own output.
func (a *agent) keepOutput() (output func(fd int, p []byte), restore func()) {
	var kept [2][]byte
	return func(fd int, p []byte) {
			i := 0
			if fd == a.err {
				i = 1
			}
			kept[i] = append(kept[i], p...)
		}, func() {
			for i := range kept {
				a.pending[i] = append(kept[i], a.pending[i]...)
				a.released[i] -= int64(len(kept[i]))
				kept[i] = nil
			}
		}
}

// held asks the agent what it holds (between cells).
func (a *agent) held() (*Held, error) {
	if err := a.send(map[string]any{"op": "check_fork"}); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrDead, a.exitReason())
	}
	keep, restore := a.keepOutput()
	defer restore()
	for {
		f, err := a.next(time.Now().Add(10*time.Second), keep)
		if err != nil {
			return nil, fmt.Errorf("ask the interpreter what it holds: %w", err)
		}
		if f.Type == "held" {
			return &f.Held, nil
		}
	}
}

// kill ends the interpreter and everything it started (a copy forked
// ahead and not claimed: itself, through its pidfd).
func (a *agent) kill() {
	if a.proc == nil {
		if a.pidfd >= 0 {
			unix.PidfdSendSignal(a.pidfd, unix.SIGKILL, nil, 0)
		}
		return
	}
	a.proc.Signal(syscall.SIGKILL)
}

// close waits for the (killed) interpreter and frees the descriptors.
func (a *agent) close() {
	a.closeOne.Do(func() {
		<-a.exited
		a.closeFDs()
	})
}
