package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/api"
)

// firstMessageTimeout bounds the wait for a stream's exec request.
const firstMessageTimeout = 30 * time.Second

// streamChunk is the most output one frame carries.
const streamChunk = 32 << 10

// execStream runs a command with its stdio over a WebSocket (protocol in
// docs/api.md): the client's first text message is an api.ExecRequest;
// then binary messages tagged api.StreamStdin and text api.Control
// messages flow in, binary api.StreamStdout/api.StreamStderr messages
// flow out, and an exit (or error) control message ends the stream.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request) error {
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.Debug("websocket handshake failed", "path", r.URL.Path, "err", err)
		return nil // Accept answered the request
	}
	defer c.CloseNow()
	c.SetReadLimit(s.cfg.MaxBodyBytes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	st := &stream{s: s, c: c, ctx: ctx}
	req, err := st.readRequest()
	if err != nil {
		st.fail(err)
		return nil
	}
	if err := s.checkExec(req, true); err != nil {
		st.fail(err)
		return nil
	}
	st.run(b, req)
	return nil
}

// stream is one exec over a WebSocket.
type stream struct {
	s   *Server
	c   *websocket.Conn
	ctx context.Context
}

func (st *stream) readRequest() (*api.ExecRequest, error) {
	ctx, cancel := context.WithTimeout(st.ctx, firstMessageTimeout)
	defer cancel()
	typ, msg, err := st.c.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: read the exec request: %v", ErrInvalidArgument, err)
	}
	if typ != websocket.MessageText {
		return nil, fmt.Errorf("%w: the first message must be a text message holding the exec request as JSON", ErrInvalidArgument)
	}
	var req api.ExecRequest
	if err := decodeStrict(bytes.NewReader(msg), &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// fail sends err as an error message and closes the stream.
func (st *stream) fail(err error) {
	_, body := st.s.report(err, "exec stream")
	st.control(api.Control{Type: api.ControlError, Error: body})
	code := websocket.StatusPolicyViolation
	if body.Code == api.CodeInternal {
		code = websocket.StatusInternalError
	}
	st.c.Close(code, string(body.Code))
}

// control sends a control message.
func (st *stream) control(m api.Control) error {
	b, _ := json.Marshal(m)
	return st.write(websocket.MessageText, b)
}

// data sends a tagged chunk of output.
func (st *stream) data(tag byte, p []byte) error {
	msg := make([]byte, 1+len(p))
	msg[0] = tag
	copy(msg[1:], p)
	return st.write(websocket.MessageBinary, msg)
}

// write sends one message within the stream write timeout: a client that
// stops reading has its connection closed (the websocket package closes it
// when a write's context ends), which ends readClient and so kills the
// command.
func (st *stream) write(typ websocket.MessageType, msg []byte) error {
	ctx, cancel := context.WithTimeout(st.ctx, st.s.cfg.StreamWriteTimeout)
	defer cancel()
	return st.c.Write(ctx, typ, msg)
}

func (st *stream) run(b *box, req *api.ExecRequest) {
	var p pipes
	defer p.close()
	if !req.TTY {
		if err := p.open(); err != nil {
			st.fail(err)
			return
		}
	}
	ex, early, msg, err := st.s.start(b, req, p.child)
	p.closeChild()
	if err != nil {
		st.fail(err)
		return
	}
	if early != nil {
		st.data(api.StreamStderr, []byte(msg))
		st.finish(early)
		return
	}

	// Where stdin goes and output comes from: the pipes, or the terminal.
	var stdin io.WriteCloser
	var outputs []*os.File
	var tags []byte
	tty := ex.proc.TTY()
	if tty != nil {
		if tty, err = pollable(tty); err != nil {
			ex.proc.Signal(syscall.SIGKILL)
			ex.wait(st.ctx)
			st.fail(err)
			return
		}
		defer tty.Close()
		if req.Cols > 0 && req.Rows > 0 {
			resize(tty, req.Cols, req.Rows)
		}
		stdin, outputs, tags = tty, []*os.File{tty}, []byte{api.StreamStdout}
	} else {
		stdin, outputs, tags = p.parent[0], p.parent[1:], []byte{api.StreamStdout, api.StreamStderr}
	}

	var copied sync.WaitGroup
	for i, f := range outputs {
		copied.Go(func() { st.pump(f, tags[i]) })
	}
	// A client that goes away takes the command with it: wait kills it
	// when clientGone ends.
	clientGone, gone := context.WithCancel(st.ctx)
	defer gone()
	go func() {
		defer gone()
		st.readClient(ex, stdin, tty)
	}()

	exit, err := ex.wait(clientGone)
	deadline := time.Now().Add(drainGrace)
	p.drainBy(deadline)
	if tty != nil {
		tty.SetReadDeadline(deadline)
	}
	copied.Wait()
	if err != nil {
		st.fail(err)
		return
	}
	exit.TimingsMs.Total = msSince(ex.t0, time.Now())
	st.finish(exit)
}

// finish reports how the command ended and closes the stream.
func (st *stream) finish(exit *api.ExecExit) {
	if err := st.control(api.Control{Type: api.ControlExit, Exit: exit}); err != nil {
		return
	}
	st.c.Close(websocket.StatusNormalClosure, "")
}

// pump copies one output of the command to the client until it ends (end
// of file, or EIO from a terminal whose last slave closed).
func (st *stream) pump(f *os.File, tag byte) {
	buf := make([]byte, streamChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if st.data(tag, buf[:n]) != nil {
				// The client is gone; keep draining, so that the command
				// does not block writing until it is killed.
				io.Copy(io.Discard, f)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stdinQueue is how many chunks (of at most streamChunk bytes) of stdin a
// stream holds for a command that has not read them yet.
const stdinQueue = 32

// stdinItem is a chunk of stdin, or its end.
type stdinItem struct {
	data []byte
	eof  bool
}

// readClient applies what the client sends until it closes the stream or
// goes away: stdin data, end of stdin, resizes and signals. Stdin goes
// through a bounded queue to its own writer, so that a command that does
// not read its stdin does not stop this loop from reading: it notices a
// client that leaves (and so the command is killed), and signals and
// resizes still arrive. Only a client that sends more than the queue and
// the pipe hold is held back until the command reads.
func (st *stream) readClient(ex *execution, stdin io.WriteCloser, tty *os.File) {
	q := make(chan stdinItem, stdinQueue)
	defer close(q)
	go writeStdin(q, stdin, tty)
	for {
		typ, msg, err := st.c.Read(st.ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 || msg[0] != api.StreamStdin {
				continue
			}
			for data := msg[1:]; len(data) > 0; {
				k := min(len(data), streamChunk)
				select {
				case q <- stdinItem{data: data[:k]}:
				case <-st.ctx.Done():
					return
				}
				data = data[k:]
			}
			continue
		}
		var m api.Control
		if json.Unmarshal(msg, &m) != nil {
			continue
		}
		switch m.Type {
		case api.ControlCloseStdin:
			select {
			case q <- stdinItem{eof: true}:
			case <-st.ctx.Done():
				return
			}
		case api.ControlResize:
			if tty != nil && m.Cols > 0 && m.Rows > 0 {
				resize(tty, m.Cols, m.Rows)
			}
		case api.ControlSignal:
			if m.Signal > 0 && m.Signal < 65 {
				ex.proc.Signal(syscall.Signal(m.Signal))
			}
		}
	}
}

// writeStdin writes the queued stdin to the command in order, until the
// queue is closed. Once a write fails (the command closed its stdin, or
// ended) the rest is dropped.
func writeStdin(q <-chan stdinItem, stdin io.WriteCloser, tty *os.File) {
	broken := false
	for it := range q {
		switch {
		case broken:
		case it.eof && tty != nil:
			tty.Write([]byte{4}) // ^D: end of file for a terminal in cooked mode
		case it.eof:
			stdin.Close()
			broken = true
		default:
			if _, err := stdin.Write(it.data); err != nil {
				broken = true
			}
		}
	}
}

// resize sets a terminal's size.
func resize(tty *os.File, cols, rows uint16) {
	raw, err := tty.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
	})
}

// pollable returns f as a file the runtime's poller drives, so that read
// deadlines and Close interrupt a pending Read; f is consumed.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	raw.Control(func(sfd uintptr) {
		fd, dupErr = unix.FcntlInt(sfd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if dupErr != nil {
		return nil, fmt.Errorf("dup terminal: %w", dupErr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
