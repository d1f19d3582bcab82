package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
)

// Session is a code-interpreter session in a sandbox: a Python
// interpreter whose state (globals, imports, open files, working
// directory) persists from cell to cell.
//
//	s, _ := c.CreateSession(ctx, sandboxID, nil)
//	s.Run(ctx, "x = 41")
//	ex, _ := s.Run(ctx, "x + 1") // ex.Text() == "42"
type Session struct {
	c         *Client
	SandboxID string
	ID        string
}

func sessionPath(sandbox, id string, rest ...string) string {
	return sandboxPath(sandbox, append([]string{"/sessions/", url.PathEscape(id)}, rest...)...)
}

// CreateSession starts a session in a sandbox; spec may be nil (python,
// the sandbox's environment and working directory).
func (c *Client) CreateSession(ctx context.Context, sandboxID string, spec *api.SessionSpec) (*Session, error) {
	if spec == nil {
		spec = &api.SessionSpec{}
	}
	var info api.Session
	if err := c.call(ctx, "POST", sandboxPath(sandboxID, "/sessions"), nil, spec, &info); err != nil {
		return nil, err
	}
	return &Session{c: c, SandboxID: sandboxID, ID: info.ID}, nil
}

// Session is a handle on an existing session (nothing is asked of the
// daemon).
func (c *Client) Session(sandboxID, id string) *Session {
	return &Session{c: c, SandboxID: sandboxID, ID: id}
}

// Sessions lists a sandbox's sessions, oldest first.
func (c *Client) Sessions(ctx context.Context, sandboxID string) ([]api.Session, error) {
	var l api.SessionList
	if err := c.call(ctx, "GET", sandboxPath(sandboxID, "/sessions"), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Info describes the session now.
func (s *Session) Info(ctx context.Context) (*api.Session, error) {
	var info api.Session
	if err := s.c.call(ctx, "GET", sessionPath(s.SandboxID, s.ID), nil, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Run runs one cell and returns its whole result (after the cells queued
// before it). An exception in the cell is no error: see Execution.Status
// and Execution.Error.
func (s *Session) Run(ctx context.Context, code string) (*api.Execution, error) {
	return s.RunCell(ctx, &api.CellRequest{Code: code})
}

// RunCell is Run with a timeout (req.TimeoutMs).
func (s *Session) RunCell(ctx context.Context, req *api.CellRequest) (*api.Execution, error) {
	var ex api.Execution
	if err := s.c.call(ctx, "POST", sessionPath(s.SandboxID, s.ID, "/run"), nil, req, &ex); err != nil {
		return nil, err
	}
	return &ex, nil
}

// RunStream runs a cell with its events streamed: on sees each (stdout
// and stderr chunks, results, errors) as it happens, and the whole
// Execution (its Stdout and Stderr empty: they were streamed) is
// returned at the end. Ending ctx interrupts the cell.
func (s *Session) RunStream(ctx context.Context, req *api.CellRequest, on func(api.SessionEvent)) (*api.Execution, error) {
	u := strings.Replace(s.c.base, "http", "ws", 1) + sessionPath(s.SandboxID, s.ID, "/run/ws")
	hdr := http.Header{}
	if s.c.token != "" {
		hdr.Set("Authorization", "Bearer "+s.c.token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: s.c.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFrom(resp)
		}
		return nil, fmt.Errorf("tine daemon: session stream: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(128 << 20) // a figure's PNG travels in one message
	b, _ := json.Marshal(req)
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, fmt.Errorf("tine daemon: session stream: %w", err)
	}
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return nil, fmt.Errorf("tine daemon: session stream ended before the cell did: %w", err)
		}
		var e api.SessionEvent
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("tine daemon: bad session event: %w", err)
		}
		switch {
		case e.Type == api.EventEnd && e.Execution != nil:
			conn.Close(websocket.StatusNormalClosure, "")
			return e.Execution, nil
		case e.Failure != nil:
			return nil, &Error{Code: e.Failure.Code, Message: e.Failure.Message}
		}
		if on != nil {
			on(e)
		}
	}
}

// Interrupt raises KeyboardInterrupt in the running cell; the session
// survives.
func (s *Session) Interrupt(ctx context.Context) error {
	return s.c.call(ctx, "POST", sessionPath(s.SandboxID, s.ID, "/interrupt"), nil, nil, nil)
}

// Restart replaces the interpreter with a fresh one (a dead session comes
// back).
func (s *Session) Restart(ctx context.Context) error {
	return s.c.call(ctx, "POST", sessionPath(s.SandboxID, s.ID, "/restart"), nil, nil, nil)
}

// Delete ends the session.
func (s *Session) Delete(ctx context.Context) error {
	return s.c.call(ctx, "DELETE", sessionPath(s.SandboxID, s.ID), nil, nil, nil)
}

// Fork forks a forkable session (api.SessionSpec.Forkable) live into
// count new sandboxes, each holding a session whose state is this one's
// now; this session goes on. It returns the children's sessions
// (res.Sandboxes[i] holds the i-th) and the whole answer.
func (s *Session) Fork(ctx context.Context, count int) ([]*Session, *api.ForkSessionResult, error) {
	var res api.ForkSessionResult
	if err := s.c.call(ctx, "POST", sessionPath(s.SandboxID, s.ID, "/fork"), nil, &api.ForkSessionRequest{Count: count}, &res); err != nil {
		return nil, nil, err
	}
	out := make([]*Session, len(res.Sessions))
	for i, info := range res.Sessions {
		out[i] = &Session{c: s.c, SandboxID: info.SandboxID, ID: info.ID}
	}
	return out, &res, nil
}
