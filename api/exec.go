package api

// ExecRequest runs a command in a live sandbox: the body of
// POST /v1/sandboxes/{id}/exec, and the first (text) message a client sends
// on GET /v1/sandboxes/{id}/exec/ws.
type ExecRequest struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// sandbox's PATH when it has no slash.
	Argv []string `json:"argv"`
	// Env is KEY=VALUE pairs added to (and overriding) the sandbox's.
	Env []string `json:"env,omitempty"`
	// Workdir is the working directory (default: the sandbox's).
	Workdir string `json:"workdir,omitempty"`
	// Stdin is the command's whole standard input (JSON mode only; base64
	// in JSON). Without it the command reads end of file.
	Stdin []byte `json:"stdin,omitempty"`
	// TimeoutMs kills the command (and what it started) after this long:
	// exit code 124, reason "timeout". 0: no timeout.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// MaxOutputBytes caps each of stdout and stderr kept in JSON mode
	// (default 1 MiB); output past it is read and dropped, and the
	// result says it was truncated.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// TTY gives the command a pseudo-terminal (WebSocket mode only):
	// stdout carries everything it writes and stderr stays empty.
	TTY bool `json:"tty,omitempty"`
	// Cols and Rows are the terminal's initial size when TTY is set.
	Cols uint16 `json:"cols,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
}

// ExecExit is how an exec'd command ended.
type ExecExit struct {
	// ExitCode follows the shell: the command's code, 128+N when killed
	// by signal N, 137 on OOM, 124 on timeout, 127 when not found, 126
	// when not executable.
	ExitCode int `json:"exit_code"`
	// Reason is "exit", "signal", "oom", "timeout", "not-found" or
	// "not-executable".
	Reason string `json:"reason"`
	// Signal is the signal that killed the command, if one did.
	Signal int `json:"signal,omitempty"`
	// TimingsMs are wall-clock durations in milliseconds.
	TimingsMs Timings `json:"timings_ms"`
}

// Timings of one exec, in milliseconds.
type Timings struct {
	// Start: from the request until the command was exec'd.
	Start float64 `json:"start"`
	// Run: from exec until the command ended and was reaped.
	Run float64 `json:"run"`
	// Total: from the request until the result, output drained.
	Total float64 `json:"total"`
}

// ExecResult is the answer of the JSON exec mode.
type ExecResult struct {
	ExecExit
	// Stdout and Stderr are the captured output (base64 in JSON).
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
	// StdoutTruncated and StderrTruncated say that output past
	// MaxOutputBytes was dropped.
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
}

// Stream tags: the first byte of every binary WebSocket message of an
// exec stream; the rest of the message is data.
const (
	// StreamStdin (client to daemon): bytes for the command's stdin.
	StreamStdin byte = 0
	// StreamStdout (daemon to client): bytes the command wrote to stdout
	// (with a TTY: everything it wrote).
	StreamStdout byte = 1
	// StreamStderr (daemon to client): bytes the command wrote to stderr.
	StreamStderr byte = 2
)

// ControlType names a text (JSON) message of an exec stream.
type ControlType string

// Control message types.
const (
	// ControlCloseStdin (client): the command's stdin reads end of file.
	ControlCloseStdin ControlType = "close_stdin"
	// ControlResize (client): the terminal's new Cols and Rows (TTY only).
	ControlResize ControlType = "resize"
	// ControlSignal (client): send Signal to the command.
	ControlSignal ControlType = "signal"
	// ControlExit (daemon): the command ended, all output was sent; Exit
	// says how. The daemon closes the connection next.
	ControlExit ControlType = "exit"
	// ControlError (daemon): the exec could not start or the request was
	// bad; Error says why. The daemon closes the connection next.
	ControlError ControlType = "error"
)

// Control is a text message of an exec stream, in either direction.
type Control struct {
	Type   ControlType `json:"type"`
	Cols   uint16      `json:"cols,omitempty"`
	Rows   uint16      `json:"rows,omitempty"`
	Signal int         `json:"signal,omitempty"`
	Exit   *ExecExit   `json:"exit,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}
