package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/checkpoint"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/inroot"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
	"github.com/tine-run/tine/internal/snapshot"
	"github.com/tine-run/tine/internal/store"
	"github.com/tine-run/tine/internal/zygote"
)

// Errors of the daemon's own making; handlers wrap them with context.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnauthorized    = errors.New("unauthorized")
	ErrNoSandbox       = errors.New("no such sandbox")
	ErrNoRoute         = errors.New("no such route")
	ErrMethod          = errors.New("method not allowed")
	ErrNotRunning      = errors.New("sandbox is not running")
	ErrTooLarge        = errors.New("too large")
	ErrCapacity        = errors.New("host budget spent")
	ErrShuttingDown    = errors.New("the daemon is shutting down")
	ErrNoFunctions     = errors.New("functions are unavailable")
	ErrNoSnapshot      = errors.New("no such snapshot")
	ErrNoSnapshots     = errors.New("snapshots are unavailable")
	ErrConflictState   = errors.New("conflict")
	// ErrNoLiveFork: this runtime cannot fork a session live (ADR 0013).
	ErrNoLiveFork = errors.New("the live fork of a session is not available")
)

// methodError is ErrMethod with the methods the path takes, for the Allow
// header.
type methodError struct {
	msg     string
	allowed []string
}

func (e *methodError) Error() string { return e.msg }
func (e *methodError) Unwrap() error { return ErrMethod }

// capacityError is ErrCapacity with the seconds a client should wait.
type capacityError struct {
	msg        string
	retryAfter time.Duration
}

func (e *capacityError) Error() string { return e.msg }
func (e *capacityError) Unwrap() error { return ErrCapacity }

// statusOf decides the HTTP status and wire code of an error. It is the one
// place where errors meet HTTP.
func statusOf(err error) (int, api.ErrorCode) {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.Is(err, ErrInvalidArgument),
		errors.Is(err, sandbox.ErrInvalidSpec), errors.Is(err, network.ErrInvalid),
		errors.Is(err, inroot.ErrInvalidPath),
		errors.Is(err, inroot.ErrNotDir),
		errors.Is(err, inroot.ErrIsDir),
		errors.Is(err, inroot.ErrNotRegular),
		errors.Is(err, inroot.ErrUnsupported):
		return http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, zygote.ErrInvalidSpec), errors.Is(err, zygote.ErrEntry):
		return http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, session.ErrInvalid),
		errors.Is(err, session.ErrStart) && errors.Is(err, sandbox.ErrNotFound):
		return http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, session.ErrNoSession):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, session.ErrBusy), errors.Is(err, session.ErrDead), errors.Is(err, session.ErrHeld), errors.Is(err, session.ErrNotForkable),
		errors.Is(err, sandbox.ErrNotForkable):
		return http.StatusConflict, api.CodeConflict
	case errors.Is(err, zygote.ErrNoFunction):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, zygote.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, ErrNoFunctions), errors.Is(err, ErrNoSnapshots), errors.Is(err, cgroup.ErrNoFreezer), errors.Is(err, ErrNoLiveFork),
		errors.Is(err, checkpoint.ErrUnavailable):
		return http.StatusNotImplemented, api.CodeUnsupported
	case errors.Is(err, ErrNoSnapshot), errors.Is(err, snapshot.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, snapshot.ErrInUse), errors.Is(err, ErrConflictState), errors.Is(err, checkpoint.ErrCRIU), errors.Is(err, checkpoint.ErrRefused):
		return http.StatusConflict, api.CodeConflict
	case errors.Is(err, image.ErrInvalid), errors.Is(err, image.ErrUnsafeLayer):
		return http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, image.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, image.ErrInUse):
		return http.StatusConflict, api.CodeConflict
	case errors.Is(err, image.ErrPull):
		return http.StatusBadGateway, api.CodeUnavailable
	case errors.Is(err, ErrNoImages):
		return http.StatusNotImplemented, api.CodeUnsupported
	case errors.Is(err, store.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, api.CodeUnauthorized
	case errors.Is(err, ErrNoSandbox), errors.Is(err, ErrNoRoute), errors.Is(err, inroot.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, ErrMethod):
		return http.StatusMethodNotAllowed, api.CodeMethodNotAllowed
	case errors.Is(err, ErrNotRunning), errors.Is(err, sandbox.ErrSandboxGone),
		errors.Is(err, inroot.ErrExists), errors.Is(err, inroot.ErrNotEmpty):
		return http.StatusConflict, api.CodeConflict
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden, api.CodeForbidden
	case errors.Is(err, ErrTooLarge), errors.Is(err, inroot.ErrTooLarge), errors.As(err, &maxBytes),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, ErrCapacity):
		return http.StatusTooManyRequests, api.CodeCapacity
	case errors.Is(err, sandbox.ErrRootlessOnly), errors.Is(err, cgroup.ErrUnavailable), errors.Is(err, sandbox.ErrUnsupported),
		errors.Is(err, network.ErrUnavailable), errors.Is(err, network.ErrInUse):
		return http.StatusNotImplemented, api.CodeUnsupported
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable, api.CodeUnavailable
	}
	return http.StatusInternalServerError, api.CodeInternal
}

// wireError is err as the API reports it, with its HTTP status.
func wireError(err error) (int, *api.Error) {
	status, code := statusOf(err)
	msg := err.Error()
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		msg = fmt.Sprintf("request body larger than %d bytes; send less, or raise the daemon's limit", maxBytes.Limit)
	}
	return status, &api.Error{Code: code, Message: msg}
}

// report counts a failure by its code, logs what the daemon got wrong, and
// returns the error as the API reports it.
func (s *Server) report(err error, what string) (int, *api.Error) {
	status, body := wireError(err)
	s.metrics.failures.WithLabelValues(string(body.Code)).Inc()
	if status >= 500 {
		s.log.Error("request failed", "request", what, "status", status, "err", err)
	} else {
		s.log.Debug("request refused", "request", what, "status", status, "err", err)
	}
	return status, body
}

// writeError answers a request with err: status, Retry-After for capacity,
// and the JSON error body.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := s.report(err, r.Method+" "+r.URL.Path)
	var ce *capacityError
	if errors.As(err, &ce) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(ce.retryAfter.Round(time.Second)/time.Second))))
	}
	var me *methodError
	if errors.As(err, &me) {
		w.Header().Set("Allow", strings.Join(me.allowed, ", "))
	}
	writeJSON(w, status, body)
}
