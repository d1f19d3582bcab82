package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/zygote"
)

// Functions runs warm functions and the runtime pool (internal/zygote's
// Manager in the real daemon).
type Functions interface {
	Up(spec api.FunctionSpec) (*api.Function, error)
	Get(name string) (*api.Function, error)
	List() []api.Function
	Remove(name string) error
	Invoke(ctx context.Context, name string, payload []byte, raw bool) (*api.Invocation, error)
	PutScript(src []byte) (*api.Script, error)
	InvokeScript(ctx context.Context, digest string, payload []byte, raw bool) (*api.Invocation, error)
	// CountAgainst makes function sandboxes count against the host budget.
	CountAgainst(admit zygote.AdmitFunc)
	Close()
}

func (s *Server) functions() (Functions, error) {
	if s.cfg.Functions == nil {
		return nil, fmt.Errorf("%w: this daemon runs no functions", ErrNoFunctions)
	}
	if s.isClosing() {
		return nil, ErrShuttingDown
	}
	return s.cfg.Functions, nil
}

func (s *Server) putFunction(w http.ResponseWriter, r *http.Request) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	var spec api.FunctionSpec
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &spec); err != nil {
		return err
	}
	name := r.PathValue("name")
	if spec.Name == "" {
		spec.Name = name
	}
	if spec.Name != name {
		return fmt.Errorf("%w: the spec's name %q differs from the path's %q", ErrInvalidArgument, spec.Name, name)
	}
	f, err := fns.Up(spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}

func (s *Server) listFunctions(w http.ResponseWriter, r *http.Request) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fns.List())
	return nil
}

func (s *Server) getFunction(w http.ResponseWriter, r *http.Request) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	f, err := fns.Get(r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}

func (s *Server) deleteFunction(w http.ResponseWriter, r *http.Request) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	if err := fns.Remove(r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readPayload reads an invocation's body: JSON (checked here, so a
// malformed one is the client's 400, not the handler's error), or raw
// bytes with Content-Type application/octet-stream.
func (s *Server) readPayload(w http.ResponseWriter, r *http.Request) (payload []byte, raw bool, err error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	raw = ct == "application/octet-stream"
	payload, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return nil, false, err
	}
	if !raw && len(payload) > 0 && !json.Valid(payload) {
		return nil, false, fmt.Errorf("%w: the payload is not valid JSON; send application/octet-stream for raw bytes", ErrInvalidArgument)
	}
	return payload, raw, nil
}

func (s *Server) invokeFunction(w http.ResponseWriter, r *http.Request) error {
	return s.invokeWith(w, r, func(fns Functions, payload []byte, raw bool) (*api.Invocation, error) {
		return fns.Invoke(r.Context(), r.PathValue("name"), payload, raw)
	})
}

// invokeWith reads an invocation's payload, makes the call and answers
// with its outcome (a function's or a pool script's).
func (s *Server) invokeWith(w http.ResponseWriter, r *http.Request, call func(fns Functions, payload []byte, raw bool) (*api.Invocation, error)) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	payload, raw, err := s.readPayload(w, r)
	if err != nil {
		return err
	}
	inv, err := call(fns, payload, raw)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, inv)
	return nil
}

func (s *Server) putScript(w http.ResponseWriter, r *http.Request) error {
	fns, err := s.functions()
	if err != nil {
		return err
	}
	src, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	sc, err := fns.PutScript(src)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sc)
	return nil
}

func (s *Server) invokeScript(w http.ResponseWriter, r *http.Request) error {
	return s.invokeWith(w, r, func(fns Functions, payload []byte, raw bool) (*api.Invocation, error) {
		return fns.InvokeScript(r.Context(), r.PathValue("digest"), payload, raw)
	})
}
