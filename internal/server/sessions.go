package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
)

// The code-interpreter sessions of a sandbox (internal/session): routes
// under /v1/sandboxes/{id}/sessions. A session's interpreter is a process
// of its sandbox (launched like an exec), so it goes with the sandbox.

// sessionsOf returns b's session set, made on first use.
func (b *box) sessionsOf() *session.Set {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions == nil {
		b.sessions = session.NewSet(b.id, b.launcher())
	}
	return b.sessions
}

// launcher starts session interpreters in b's sandbox.
func (b *box) launcher() session.Launcher {
	inst := b.inst
	return session.LaunchFunc(func(e *sandbox.ExecSpec) (session.Process, error) { return inst.Exec(e) })
}

// closeSessions ends b's sessions (before its sandbox goes); a session
// still starting is ended when it is ready (the set is closed).
func (b *box) closeSessions() { b.sessionsOf().Close() }

// useSession finds the running sandbox and the session a request names;
// done ends the sandbox's use (see use).
func (s *Server) useSession(r *http.Request) (*box, *session.Session, func(), error) {
	b, done, err := s.use(r)
	if err != nil {
		return nil, nil, nil, err
	}
	sess, err := b.sessionsOf().Get(r.PathValue("sid"))
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return b, sess, done, nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req api.SessionSpec
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	sess, err := b.sessionsOf().Start(session.Options{Spec: req, MaxOutput: DefaultMaxOutputBytes})
	if err != nil {
		return err
	}
	if r.Context().Err() != nil {
		b.sessionsOf().Delete(sess.ID()) // nobody got its id
		return fmt.Errorf("the client went away: %w", r.Context().Err())
	}
	s.log.Info("session started", "sandbox", b.id, "session", sess.ID())
	writeJSON(w, http.StatusCreated, sess.Info())
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	list := api.SessionList{Sessions: []api.Session{}}
	for _, sess := range b.sessionsOf().List() {
		list.Sessions = append(list.Sessions, sess.Info())
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	sess, err := b.sessionsOf().Get(r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sess.Info())
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	if err := b.sessionsOf().Delete(r.PathValue("sid")); err != nil {
		return err
	}
	s.dropSpares(b, r.PathValue("sid"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) runCell(w http.ResponseWriter, r *http.Request) error {
	var req api.CellRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	b, sess, done, err := s.useSession(r)
	if err != nil {
		return err
	}
	defer done()
	answer := holdDeadlines(w, r) // a cell may run longer than the write timeout
	ex, err := sess.Run(r.Context(), req, nil)
	answer()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ex)
	b.cellAnswered()
	s.refillSpares(b, sess)
	s.forkAhead(b, sess)
	return nil
}

// runCellStream runs a cell with its events over a WebSocket: the
// client's first text message is an api.CellRequest; then every event is
// a text api.SessionEvent, the last of type "end" (or "error" with a
// Failure, for a cell that could not run). A client that goes away
// interrupts the cell.
func (s *Server) runCellStream(w http.ResponseWriter, r *http.Request) error {
	b, sess, done, err := s.useSession(r)
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
	send := func(e api.SessionEvent) error {
		b, _ := json.Marshal(e)
		wctx, wcancel := context.WithTimeout(ctx, s.cfg.StreamWriteTimeout)
		defer wcancel()
		return c.Write(wctx, websocket.MessageText, b)
	}
	fail := func(err error) {
		_, body := s.report(err, "session run stream")
		send(api.SessionEvent{Type: api.EventError, Failure: body})
		c.Close(websocket.StatusPolicyViolation, string(body.Code))
	}

	rctx, rcancel := context.WithTimeout(ctx, firstMessageTimeout)
	typ, msg, err := c.Read(rctx)
	rcancel()
	if err != nil || typ != websocket.MessageText {
		fail(fmt.Errorf("%w: the first message must be a text message holding the run request as JSON", ErrInvalidArgument))
		return nil
	}
	var req api.CellRequest
	if err := decodeStrict(bytes.NewReader(msg), &req); err != nil {
		fail(err)
		return nil
	}
	// The client's only other message is its going away (a read error),
	// which interrupts the cell.
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				cancel()
				return
			}
		}
	}()
	broken := false
	ex, err := sess.Run(ctx, req, func(e session.Event) {
		if !broken && send(e) != nil {
			broken = true
			cancel()
		}
	})
	if err != nil {
		fail(err)
		return nil
	}
	ex.Stdout, ex.Stderr = "", "" // streamed
	if send(api.SessionEvent{Type: api.EventEnd, Execution: ex}) == nil {
		c.Close(websocket.StatusNormalClosure, "")
	}
	b.cellAnswered()
	s.refillSpares(b, sess)
	s.forkAhead(b, sess)
	return nil
}

func (s *Server) interruptSession(w http.ResponseWriter, r *http.Request) error {
	_, sess, done, err := s.useSession(r)
	if err != nil {
		return err
	}
	defer done()
	if err := sess.Interrupt(); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sess.Info())
	return nil
}

func (s *Server) restartSession(w http.ResponseWriter, r *http.Request) error {
	b, sess, done, err := s.useSession(r)
	if err != nil {
		return err
	}
	defer done()
	s.dropSpares(b, sess.ID()) // made again after its next cell
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	if err := sess.Restart(ctx); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sess.Info())
	return nil
}
