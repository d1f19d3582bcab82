package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// InterpreterPort is the code interpreter's port as @e2b/code-interpreter
// addresses it (E2B's Jupyter server).
const InterpreterPort = "49999"

// InterpreterTemplate is @e2b/code-interpreter's default template: the
// host's OS view, with the default context started at create.
const InterpreterTemplate = "code-interpreter-v1"

// The code interpreter is answered by the E2B layer itself, not by a
// server in the sandbox: an E2B context is a tine code-interpreter session
// (internal/session) of the sandbox, its id the session's, and /execute a
// cell streamed from the session turned into the NDJSON lines runCode
// reads. Sessions already run behind every wall of the sandbox; a second
// interpreter server inside it would only repeat them.

// codeContext is E2B's Context.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// executeRequest is the body of POST /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
}

// resultMIME maps the MIME types of a result to the fields the SDK reads;
// other types keep their name (the SDK puts them in Result.extra).
var resultMIME = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
}

// checkLanguage refuses what tine's sessions cannot run.
func checkLanguage(lang string) error {
	if lang != "" && lang != "python" {
		return errorf(http.StatusBadRequest, "language %q: tine's code contexts run python only (run other languages with commands.run)", lang)
	}
	return nil
}

// interpreter serves port 49999 of b: E2B's code-interpreter routes.
// /execute needs the sandbox's access token, as the SDK sends it; the
// context routes, which the SDK sends without one, take it when given.
func (s *Server) interpreter(w http.ResponseWriter, r *http.Request, b *box) {
	if r.Header.Get("X-Access-Token") != "" || r.URL.Path == "/execute" {
		if !s.tokenOK(b, r) {
			writeError(w, errorf(http.StatusUnauthorized, "sandbox %q: missing or wrong X-Access-Token (the envdAccessToken of its create or connect)", b.id))
			return
		}
	}
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		w.Write([]byte("OK"))
		return
	}
	tineID, _, err := s.running(r.Context(), b)
	if err != nil {
		writeError(w, errorFrom(err))
		return
	}
	var route handler
	switch rest, _ := strings.CutPrefix(r.URL.Path, "/contexts/"); {
	case r.Method == http.MethodPost && r.URL.Path == "/execute":
		route = func(w http.ResponseWriter, r *http.Request) error { return s.execute(w, r, b, tineID) }
	case r.Method == http.MethodPost && r.URL.Path == "/contexts":
		route = func(w http.ResponseWriter, r *http.Request) error {
			var req struct{ Language, Cwd string }
			if err := decode(r, &req); err != nil {
				return err
			}
			c, err := s.newContext(r.Context(), tineID, req.Language, req.Cwd)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, c)
			return nil
		}
	case r.Method == http.MethodGet && r.URL.Path == "/contexts":
		route = func(w http.ResponseWriter, r *http.Request) error {
			if _, err := s.defaultContext(r.Context(), b, tineID); err != nil {
				return err
			}
			list, err := s.cfg.Client.Sessions(r.Context(), tineID)
			if err != nil {
				return err
			}
			out := make([]codeContext, 0, len(list))
			for _, sess := range list {
				out = append(out, contextOf(&sess))
			}
			writeJSON(w, http.StatusOK, out)
			return nil
		}
	case r.Method == http.MethodDelete && rest != r.URL.Path && !strings.Contains(rest, "/"):
		route = func(w http.ResponseWriter, r *http.Request) error {
			if err := s.cfg.Client.Session(tineID, rest).Delete(r.Context()); err != nil {
				return contextError(err, rest)
			}
			w.WriteHeader(http.StatusOK)
			return nil
		}
	case r.Method == http.MethodPost && strings.HasSuffix(rest, "/restart") && !strings.Contains(strings.TrimSuffix(rest, "/restart"), "/"):
		id := strings.TrimSuffix(rest, "/restart")
		route = func(w http.ResponseWriter, r *http.Request) error {
			if err := s.cfg.Client.Session(tineID, id).Restart(r.Context()); err != nil {
				return contextError(err, id)
			}
			w.WriteHeader(http.StatusOK)
			return nil
		}
	default:
		route = func(w http.ResponseWriter, r *http.Request) error {
			return errorf(http.StatusNotFound, "%s %s: the code interpreter (port %s) serves POST /execute and /contexts", r.Method, r.URL.Path, InterpreterPort)
		}
	}
	route.ServeHTTP(w, r)
}

func contextOf(sess *api.Session) codeContext {
	cwd := sess.Spec.Workdir
	if cwd == "" {
		cwd = Home
	}
	return codeContext{ID: sess.ID, Language: sess.Language, Cwd: cwd}
}

// contextError names the context in a session's 404.
func contextError(err error, id string) error {
	if client.ErrorCode(err) == api.CodeNotFound {
		return errorf(http.StatusNotFound, "context %q not found (listCodeContexts lists them)", id)
	}
	return err
}

// newContext starts a session: python, in cwd (default E2B's home), with
// the home E2B's user has.
func (s *Server) newContext(ctx context.Context, tineID, lang, cwd string) (*codeContext, error) {
	if err := checkLanguage(lang); err != nil {
		return nil, err
	}
	if cwd == "" {
		cwd = Home
	}
	sess, err := s.cfg.Client.CreateSession(ctx, tineID, &api.SessionSpec{Language: "python", Workdir: cwd, Env: []string{"HOME=" + Home}})
	if err != nil {
		return nil, err
	}
	return &codeContext{ID: sess.ID, Language: "python", Cwd: cwd}, nil
}

// defaultContext is the context /execute uses when it names none: made on
// first use in each tine sandbox under b (a resume starts a new one), and
// again if it was removed.
func (s *Server) defaultContext(ctx context.Context, b *box, tineID string) (string, error) {
	b.ciMu.Lock()
	defer b.ciMu.Unlock()
	if b.ciTine == tineID && b.ciDefault != "" {
		if _, err := s.cfg.Client.Session(tineID, b.ciDefault).Info(ctx); err == nil {
			return b.ciDefault, nil
		} else if client.ErrorCode(err) != api.CodeNotFound {
			return "", err
		}
	}
	c, err := s.newContext(ctx, tineID, "python", "")
	if err != nil {
		return "", err
	}
	b.ciTine, b.ciDefault = tineID, c.ID
	return c.ID, nil
}

// execute runs one cell and streams what it does as E2B's NDJSON lines:
// stdout, stderr, result, error, then number_of_executions and
// end_of_execution. A cell that cannot run at all is an HTTP error
// (404 for an unknown context), answered before any line.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, b *box, tineID string) error {
	var req executeRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.ContextID != "" && req.Language != "" {
		return errorf(http.StatusBadRequest, "give context_id or language, not both")
	}
	if err := checkLanguage(req.Language); err != nil {
		return err
	}
	id := req.ContextID
	if id == "" {
		var err error
		if id, err = s.defaultContext(r.Context(), b, tineID); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	started, sawError := false, false
	line := func(v map[string]any) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		enc.Encode(v)
		rc.Flush()
	}
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	ex, err := s.cfg.Client.Session(tineID, id).RunStream(r.Context(), &api.CellRequest{Code: req.Code, Env: req.EnvVars}, func(e api.SessionEvent) {
		switch e.Type {
		case api.EventStdout, api.EventStderr:
			line(map[string]any{"type": string(e.Type), "text": e.Text, "timestamp": now()})
		case api.EventResult:
			if e.Result != nil {
				line(resultLine(e.Result))
			}
		case api.EventError:
			if e.Error != nil {
				sawError = true
				line(errorLine(e.Error))
			}
		}
	})
	if err != nil {
		if !started {
			return contextError(err, id)
		}
		if !errors.Is(err, context.Canceled) {
			line(map[string]any{"type": "error", "name": "TineError", "value": err.Error(), "traceback": ""})
			line(map[string]any{"type": "unexpected_end_of_execution"})
		}
		return nil
	}
	if ex.Error != nil && !sawError { // the interpreter died: say why
		line(errorLine(ex.Error))
	}
	line(map[string]any{"type": "number_of_executions", "execution_count": ex.ExecutionCount})
	line(map[string]any{"type": "end_of_execution"})
	return nil
}

func resultLine(res *api.Result) map[string]any {
	m := map[string]any{"type": "result", "is_main_result": res.IsMain}
	for mime, v := range res.Data {
		if k, ok := resultMIME[mime]; ok {
			m[k] = v
		} else {
			m[mime] = v
		}
	}
	return m
}

func errorLine(e *api.CellError) map[string]any {
	return map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": e.Traceback}
}

// endContexts ends every code context (session) of tine sandbox tineID.
func (s *Server) endContexts(ctx context.Context, tineID string) error {
	list, err := s.cfg.Client.Sessions(ctx, tineID)
	if err != nil {
		return err
	}
	for _, sess := range list {
		if err := s.cfg.Client.Session(tineID, sess.ID).Delete(ctx); err != nil && client.ErrorCode(err) != api.CodeNotFound {
			return fmt.Errorf("end code context %s before the pause: %w", sess.ID, err)
		}
	}
	return nil
}
