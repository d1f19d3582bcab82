package api

import "encoding/json"

// FunctionSpec is the body of PUT /v1/functions/{name}: a warm function.
// `tine fn up` reads it from a TOML file (see docs/functions.md).
type FunctionSpec struct {
	Name string `json:"name"`
	// Runtime is "python" (a zygote forked per request), "node" (workers
	// started ahead, one per request) or "exec" (a fresh process of
	// Command per request in a sandbox kept up, walled in as a Python
	// request is: it may write only its private /tmp and /dev/shm).
	Runtime string `json:"runtime"`
	// Entry is the host path of the handler's .py file (python) or
	// module (node: .js, .cjs, .mjs); its
	// directory is visible read-only inside at /tine/fn, first on the
	// module path.
	Entry string `json:"entry,omitempty"`
	// Handler is the function in Entry called per request (default
	// "handler"); it takes the decoded JSON payload (bytes when raw).
	Handler string `json:"handler,omitempty"`
	// Command is the program and its arguments (exec); the payload is its
	// stdin, its stdout the result.
	Command []string `json:"command,omitempty"`
	// Preload are modules imported once in the zygote.
	Preload []string `json:"preload,omitempty"`
	// Python is the interpreter (default: python3 on the sandbox's PATH).
	// Node and exec functions need it too: their workers and commands
	// start from a Python zygote.
	Python string `json:"python,omitempty"`
	// Image is an OCI image whose root the function's sandbox has instead
	// of the host's (pulled when missing): the zygote runs its python3.
	Image string `json:"image,omitempty"`
	// Requirements is the host path of a pip requirements file installed
	// into a virtual environment over Image (built once per image, file
	// and package sources, shared), from the wheels and sdists in
	// FindLinks (a host directory) and/or the PEP 503 index at IndexURL
	// (reached over the daemon's egress network, only its host and port).
	Requirements string `json:"requirements,omitempty"`
	FindLinks    string `json:"find_links,omitempty"`
	IndexURL     string `json:"index_url,omitempty"`
	// Node is the node binary (default: node on the sandbox's PATH).
	Node string `json:"node,omitempty"`
	// Network is "isolated" (the default: each request has a network
	// namespace of its own, with its own loopback, so no request can reach
	// another's listeners) or "shared" (the function's requests share the
	// sandbox's loopback and can talk to each other; about 1.5 ms of CPU
	// less per request), or "egress" (the requests share the function's
	// egress network, under Allow and Deny; docs/network.md).
	Network string `json:"network,omitempty"`
	// Allow and Deny are an egress function's policy (as a sandbox's).
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Concurrency is how many requests run at once (default 4); more wait.
	Concurrency int `json:"concurrency,omitempty"`
	// ColdAfterSeconds drops the warm sandbox after this long unused
	// (default 600); the next call warms it again.
	ColdAfterSeconds float64        `json:"cold_after_seconds,omitempty"`
	Limits           FunctionLimits `json:"limits,omitzero"`
}

// FunctionLimits hold per request.
type FunctionLimits struct {
	MemoryBytes    int64   `json:"memory_bytes,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	Pids           int64   `json:"pids,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Function describes a registered function.
type Function struct {
	Spec FunctionSpec `json:"spec"`
	// State is "warm", "warming" or "cold".
	State string `json:"state"`
	// Pid is the host pid of the sandbox's PID 1 while warm.
	Pid int `json:"pid,omitempty"`
	// Calls counts requests since it was registered.
	Calls int64 `json:"calls"`
	// WarmMs is how long the last warm-up took.
	WarmMs float64 `json:"warm_ms,omitempty"`
}

// Invocation statuses.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusTimeout = "timeout"
	StatusOOM     = "oom"
	StatusCrashed = "crashed"
)

// Invocation is the answer to POST /v1/functions/{name}/invoke and
// POST /v1/scripts/{digest}/invoke.
type Invocation struct {
	// Status is ok, error (the handler raised; see Error), timeout, oom
	// or crashed (the request's process died without answering).
	Status string `json:"status"`
	// Result is the handler's JSON return value.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultBase64 is the handler's return value when it returned bytes
	// (exec: its stdout, always).
	ResultBase64 string `json:"result_base64,omitempty"`
	// Error is what the handler raised, or why the request failed.
	Error *InvocationError `json:"error,omitempty"`
	// Stdout and Stderr are what the request printed, each capped.
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
	// ExitCode is the process's exit code (exec runtime).
	ExitCode *int              `json:"exit_code,omitempty"`
	Timings  InvocationTimings `json:"timings"`
}

// InvocationError is a handler's exception or the daemon's reason.
type InvocationError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
	// Line is the line of a syntax error in a script.
	Line int `json:"line,omitempty"`
}

// InvocationTimings are one request's phases in milliseconds.
type InvocationTimings struct {
	// Cold is true when this request had to warm the function first;
	// WarmMs is how long that took.
	Cold   bool    `json:"cold"`
	WarmMs float64 `json:"warm_ms,omitempty"`
	// Queue: waiting for a free slot and preparing the request's cgroup
	// and descriptors; Dispatch: until the zygote had the request.
	Queue    float64 `json:"queue"`
	Dispatch float64 `json:"dispatch"`
	// Fork: until the request's child ran — the hand-off to a spare
	// child (forked and walled in ahead) or a fork; Admit: joining the
	// request's cgroup; Isolate: reading the payload, and private /tmp,
	// Landlock, capabilities and seccomp when the child was not a spare.
	Fork    float64 `json:"fork"`
	Admit   float64 `json:"admit"`
	Isolate float64 `json:"isolate"`
	// Run is the handler; Reply is until the daemon had the answer.
	Run   float64 `json:"run"`
	Reply float64 `json:"reply"`
	// Total is from the request's arrival to its answer.
	Total float64 `json:"total"`
	// Throttled is true when the request's cgroup hit its CPU quota.
	Throttled bool `json:"throttled,omitempty"`
}

// Script is the answer to PUT /v1/scripts.
type Script struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}
