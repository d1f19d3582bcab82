package api

import "fmt"

// ErrorCode is a machine-readable error class. The set is small and fixed;
// each code has one HTTP status.
type ErrorCode string

// The error codes and the HTTP status each travels with.
const (
	// CodeInvalidArgument (400): malformed JSON, an unknown field, a bad
	// value or path.
	CodeInvalidArgument ErrorCode = "invalid_argument"
	// CodeUnauthorized (401): the TCP listener needs a bearer token.
	CodeUnauthorized ErrorCode = "unauthorized"
	// CodeForbidden (403): the sandbox refuses the file operation (a
	// read-only file system or bind, missing permission).
	CodeForbidden ErrorCode = "forbidden"
	// CodeNotFound (404): no such sandbox, file or route.
	CodeNotFound ErrorCode = "not_found"
	// CodeMethodNotAllowed (405): the path is a route, but not for this
	// method; the Allow header and the message list the methods it takes.
	CodeMethodNotAllowed ErrorCode = "method_not_allowed"
	// CodeConflict (409): the request does not fit the resource's state: the
	// sandbox is no longer running, the file already exists.
	CodeConflict ErrorCode = "conflict"
	// CodeTooLarge (413): the body or the file is larger than allowed, or
	// the sandbox's disk is full.
	CodeTooLarge ErrorCode = "too_large"
	// CodeCapacity (429): the host budget is spent; retry after the
	// Retry-After header's seconds, or free a sandbox.
	CodeCapacity ErrorCode = "capacity"
	// CodeInternal (500): the daemon failed; the message says how.
	CodeInternal ErrorCode = "internal"
	// CodeUnsupported (501): this host cannot do what was asked (e.g.
	// memory limits without a cgroup controller).
	CodeUnsupported ErrorCode = "unsupported"
	// CodeUnavailable (503): the daemon is shutting down.
	CodeUnavailable ErrorCode = "unavailable"
)

// Error is the body of every error response, and the "error" frame of the
// exec WebSocket.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }
