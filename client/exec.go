package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
)

// Exec runs a command in a sandbox and waits for it: its stdin is
// req.Stdin, its output is captured up to req.MaxOutputBytes per stream.
// A command that fails is no error: see ExitCode and Reason.
func (c *Client) Exec(ctx context.Context, id string, req *api.ExecRequest) (*api.ExecResult, error) {
	var res api.ExecResult
	if err := c.call(ctx, "POST", sandboxPath(id, "/exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Stream is a command running in a sandbox with its stdio attached over a
// WebSocket.
//
// Read Stdout and Stderr concurrently and to end of file (or hand them to
// io.Copy): until they are read, the command blocks writing, as with
// os/exec's pipes. Wait returns once both reached end of file and the
// command ended. Close abandons the command, which the daemon then kills.
type Stream struct {
	// Stdin writes to the command's stdin; Close sends end of file.
	Stdin io.WriteCloser
	// Stdout and Stderr read what the command writes. With a TTY,
	// everything comes on Stdout.
	Stdout, Stderr io.Reader

	conn          *websocket.Conn
	ctx           context.Context
	cancel        context.CancelFunc
	outR, errR    *io.PipeReader
	outW, errW    *io.PipeWriter
	done          chan struct{}
	exit          *api.ExecExit
	err           error
	closeConnOnce sync.Once
	stdinOnce     sync.Once
}

// ExecStream starts a command with its stdio streamed. req.Stdin must be
// empty (write to Stream.Stdin instead); req.TTY gives it a terminal of
// req.Cols × req.Rows. ctx bounds the dial only; Close ends the stream.
func (c *Client) ExecStream(ctx context.Context, id string, req *api.ExecRequest) (*Stream, error) {
	u := strings.Replace(c.base, "http", "ws", 1) + sandboxPath(id, "/exec/ws")
	hdr := http.Header{}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFrom(resp)
		}
		return nil, fmt.Errorf("tine daemon: exec stream: %w", err)
	}
	conn.SetReadLimit(1 << 20)
	b, err := json.Marshal(req)
	if err != nil {
		conn.CloseNow()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		cancel()
		conn.CloseNow()
		return nil, fmt.Errorf("tine daemon: send the exec request: %w", err)
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	s := &Stream{
		Stdout: outR, Stderr: errR,
		conn: conn, ctx: sctx, cancel: cancel, outR: outR, errR: errR, outW: outW, errW: errW,
		done: make(chan struct{}),
	}
	s.Stdin = &stdinWriter{s: s}
	go s.read()
	return s, nil
}

// read dispatches what the daemon sends until the exit (or error) message
// or the end of the connection.
func (s *Stream) read() {
	defer close(s.done)
	fail := func(err error) {
		s.err = err
		s.outW.CloseWithError(err)
		s.errW.CloseWithError(err)
	}
	for {
		typ, msg, err := s.conn.Read(s.ctx)
		if err != nil {
			fail(fmt.Errorf("tine daemon: exec stream ended before the command did: %w", err))
			return
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 {
				continue
			}
			switch msg[0] {
			case api.StreamStdout:
				s.outW.Write(msg[1:])
			case api.StreamStderr:
				s.errW.Write(msg[1:])
			}
			continue
		}
		var m api.Control
		if err := json.Unmarshal(msg, &m); err != nil {
			continue
		}
		switch m.Type {
		case api.ControlExit:
			if m.Exit == nil {
				fail(errors.New("tine daemon: exit message without exit status"))
			} else {
				s.exit = m.Exit
				s.outW.Close()
				s.errW.Close()
			}
			s.closeConn(websocket.StatusNormalClosure)
			return
		case api.ControlError:
			e := &Error{Code: api.CodeInternal, Message: "exec stream failed"}
			if m.Error != nil {
				e.Code, e.Message = m.Error.Code, m.Error.Message
			}
			fail(e)
			s.closeConn(websocket.StatusNormalClosure)
			return
		}
	}
}

func (s *Stream) closeConn(code websocket.StatusCode) {
	s.closeConnOnce.Do(func() {
		s.conn.Close(code, "")
		s.cancel()
	})
}

// Wait waits until the command ended and its output was delivered, and
// returns how it ended.
func (s *Stream) Wait() (*api.ExecExit, error) {
	<-s.done
	return s.exit, s.err
}

// Resize sets the terminal's size (TTY streams only).
func (s *Stream) Resize(cols, rows uint16) error {
	return s.control(api.Control{Type: api.ControlResize, Cols: cols, Rows: rows})
}

// Signal sends sig to the command.
func (s *Stream) Signal(sig syscall.Signal) error {
	return s.control(api.Control{Type: api.ControlSignal, Signal: int(sig)})
}

// Close ends the stream; a command still running is killed by the daemon.
// Output not yet read is lost: Stdout and Stderr read io.ErrClosedPipe.
func (s *Stream) Close() error {
	s.closeConnOnce.Do(func() {
		s.cancel()
		s.conn.CloseNow()
	})
	s.outR.Close()
	s.errR.Close()
	<-s.done
	return nil
}

func (s *Stream) control(m api.Control) error {
	b, _ := json.Marshal(m)
	return s.conn.Write(s.ctx, websocket.MessageText, b)
}

// stdinWriter sends stdin frames of at most 32 KiB.
type stdinWriter struct{ s *Stream }

func (w *stdinWriter) Write(p []byte) (int, error) {
	const chunk = 32 << 10
	n := 0
	for len(p) > 0 {
		k := min(len(p), chunk)
		msg := make([]byte, 1+k)
		msg[0] = api.StreamStdin
		copy(msg[1:], p[:k])
		if err := w.s.conn.Write(w.s.ctx, websocket.MessageBinary, msg); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// Close sends end of file (once).
func (w *stdinWriter) Close() error {
	var err error
	w.s.stdinOnce.Do(func() { err = w.s.control(api.Control{Type: api.ControlCloseStdin}) })
	return err
}
