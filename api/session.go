package api

import (
	"encoding/base64"
	"time"
)

// SessionSpec is the body of POST /v1/sandboxes/{id}/sessions: a stateful
// code interpreter in the sandbox.
type SessionSpec struct {
	// Language is "python" (the default, and the only one).
	Language string `json:"language,omitempty"`
	// Env is KEY=VALUE pairs added to (and overriding) the sandbox's.
	Env []string `json:"env,omitempty"`
	// Workdir is the interpreter's first working directory (default: the
	// sandbox's); a cell may change it, and the change persists.
	Workdir string `json:"workdir,omitempty"`
	// Forkable makes a session that POST …/sessions/{sid}/fork can fork
	// live. Its interpreter has every wall of an exec but two: no Landlock
	// domain, and a seccomp filter that also allows setns with an explicit
	// namespace type (each forked copy walls itself in fully in its child
	// sandbox). docs/security.md says what that means.
	Forkable bool `json:"forkable,omitempty"`
}

// SessionState is where a session is in its life.
type SessionState string

// Session states.
const (
	// SessionIdle: no cell is running.
	SessionIdle SessionState = "idle"
	// SessionBusy: a cell is running (others queue behind it).
	SessionBusy SessionState = "busy"
	// SessionDead: the interpreter is gone (DeadReason says why); restart
	// brings a new one.
	SessionDead SessionState = "dead"
)

// Session describes one session.
type Session struct {
	ID        string       `json:"id"`
	SandboxID string       `json:"sandbox_id"`
	Language  string       `json:"language"`
	State     SessionState `json:"state"`
	// DeadReason says why a dead session's interpreter went.
	DeadReason string `json:"dead_reason,omitempty"`
	// ExecutionCount counts the cells run since the session (re)started.
	ExecutionCount int `json:"execution_count"`
	// Queued counts the cells waiting for the running one.
	Queued int `json:"queued"`
	// Pid is the interpreter's pid inside the sandbox.
	Pid       int         `json:"pid"`
	CreatedAt time.Time   `json:"created_at"`
	Spec      SessionSpec `json:"spec"`
}

// SessionList is the body of GET /v1/sandboxes/{id}/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// CellRequest is one cell: the body of POST …/sessions/{sid}/run, and the
// first message of GET …/sessions/{sid}/run/ws.
type CellRequest struct {
	Code string `json:"code"`
	// TimeoutMs interrupts the cell after this long (KeyboardInterrupt);
	// an interpreter that does not stop within a grace period is killed
	// and the session reported dead. 0: no timeout. The time spent queued
	// behind another cell does not count.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Env sets environment variables (os.environ) for this cell only: what
	// they replaced is put back when it ends.
	Env map[string]string `json:"env,omitempty"`
}

// Execution statuses.
const (
	// ExecOK: the cell ran to its end.
	ExecOK = "ok"
	// ExecError: the cell raised (Error says what); the session goes on.
	ExecError = "error"
	// ExecInterrupted: an interrupt raised KeyboardInterrupt in the cell.
	ExecInterrupted = "interrupted"
	// ExecTimeout: the cell ran past its timeout and was interrupted (or,
	// when it did not stop, the interpreter was killed: SessionDead).
	ExecTimeout = "timeout"
	// ExecOOM: the sandbox ran out of memory and its kernel killed the
	// interpreter; the session is dead.
	ExecOOM = "oom"
	// ExecDead: the interpreter ended during the cell (it exited, was
	// killed, or the session was restarted or deleted).
	ExecDead = "dead"
)

// Execution is the whole result of one cell.
type Execution struct {
	// ExecutionCount is the cell's number in the session (as Jupyter's
	// In [n]).
	ExecutionCount int `json:"execution_count"`
	// Status is "ok", "error", "interrupted", "timeout", "oom" or "dead".
	Status string `json:"status"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutTruncated and StderrTruncated say output past the daemon's
	// cap (1 MiB each) was dropped (the stream mode drops nothing).
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	// Results are display() calls, shown figures and, last, the value of
	// the cell's last expression (IsMain), in the order they happened.
	Results []Result `json:"results"`
	// Error is what the cell raised (status "error", "interrupted",
	// "timeout"), or why the interpreter went ("oom", "dead").
	Error *CellError `json:"error,omitempty"`
	// SessionDead is set when the session did not survive the cell: why.
	SessionDead string  `json:"session_dead,omitempty"`
	DurationMs  float64 `json:"duration_ms"`
}

// Text is the text/plain of the main result ("" without one).
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMain {
			return r.Text()
		}
	}
	return ""
}

// Result is one rich result: the same value in several MIME types.
type Result struct {
	// Data maps a MIME type to the value: a string for text types,
	// base64 for image/png and image/jpeg, a JSON value for
	// application/json.
	Data map[string]any `json:"data"`
	// IsMain marks the value of the cell's last expression.
	IsMain bool `json:"is_main_result,omitempty"`
}

// Text is the result's text/plain.
func (r Result) Text() string {
	s, _ := r.Data["text/plain"].(string)
	return s
}

// PNG is the result's image/png, decoded (nil without one).
func (r Result) PNG() []byte {
	s, _ := r.Data["image/png"].(string)
	b, _ := base64.StdEncoding.DecodeString(s)
	return b
}

// CellError is an exception a cell raised.
type CellError struct {
	// Name is the exception's type ("NameError"), Value its message.
	Name  string `json:"name"`
	Value string `json:"value"`
	// Traceback is formatted as Python prints it, starting at the user's
	// code.
	Traceback string `json:"traceback"`
}

// SessionEventType names a message of a streamed cell.
type SessionEventType string

// Streamed cell messages (daemon to client), in the order they happen.
const (
	EventStdout SessionEventType = "stdout"
	EventStderr SessionEventType = "stderr"
	EventResult SessionEventType = "result"
	EventError  SessionEventType = "error"
	// EventEnd carries the whole Execution (its Stdout and Stderr empty:
	// they were streamed); the daemon closes the connection next.
	EventEnd SessionEventType = "end"
)

// SessionEvent is one text message of GET …/sessions/{sid}/run/ws. A
// request the daemon refuses ends the stream with a message of type
// "error" carrying Failure instead.
type SessionEvent struct {
	Type      SessionEventType `json:"type"`
	Text      string           `json:"text,omitempty"`
	Result    *Result          `json:"result,omitempty"`
	Error     *CellError       `json:"error,omitempty"`
	Execution *Execution       `json:"execution,omitempty"`
	Failure   *Error           `json:"failure,omitempty"`
}

// ForkSessionRequest is the body of POST …/sessions/{sid}/fork.
type ForkSessionRequest struct {
	// Count is how many children to make (1 to the host's capacity).
	Count int `json:"count"`
}

// ForkSessionResult is the answer to a live fork: Count new sandboxes,
// each holding one session whose state is the parent session's at the
// fork (Sessions[i] is in Sandboxes[i]).
type ForkSessionResult struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	Sessions  []Session `json:"sessions"`
	// Snapshot is the file-tier snapshot the children's files start from.
	Snapshot string `json:"snapshot"`
	// ForkMs is how long the fork took in the daemon, until every child
	// session was ready.
	ForkMs float64 `json:"fork_ms"`
}
