package api

import "time"

// SandboxSpec is the body of POST /v1/sandboxes: what a live sandbox is
// made of. Every field is optional.
type SandboxSpec struct {
	// RootFS is a host directory used as the read-only base of the root;
	// empty means the host's own root filesystem.
	RootFS string `json:"rootfs,omitempty"`
	// Image is an OCI image to use as the root instead (pulled into the
	// daemon's layer store when missing); its Env and WorkingDir apply.
	Image string `json:"image,omitempty"`
	// HostView is what a sandbox over the host's root sees of it: "os"
	// (the default: the operating system, not the host's data) or "full".
	HostView string `json:"host_view,omitempty"`
	// UserNS maps the sandbox's root to an unprivileged host uid range
	// (as root too): no DAC override on host files.
	UserNS bool `json:"userns,omitempty"`
	// DiskBytes caps the writable layer over the root (default 256 MiB).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Env is KEY=VALUE pairs every exec gets (an exec's own env overrides).
	Env []string `json:"env,omitempty"`
	// Workdir is the default working directory of execs (default /).
	Workdir string `json:"workdir,omitempty"`
	// Hostname is the sandbox's host name (default "tine").
	Hostname string `json:"hostname,omitempty"`
	// Network is "none" (lo down: no usable interface), "loopback" (lo
	// only, the default) or "egress" (an interface out through the host,
	// under Allow and Deny; docs/network.md).
	Network string `json:"network,omitempty"`
	// Allow and Deny are an egress sandbox's policy (see NetworkPolicy).
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Publish makes ports of the sandbox reachable from the host.
	Publish []Port `json:"publish,omitempty"`
	// Inject are an egress sandbox's header injections (its proxy's).
	Inject []Injection `json:"inject,omitempty"`
	// Seccomp is "default" (Docker's policy), "strict" or "unconfined".
	Seccomp string `json:"seccomp,omitempty"`
	// Binds are host paths made visible inside.
	Binds []Bind `json:"binds,omitempty"`
	// Limits are enforced through the sandbox's cgroup.
	Limits Limits `json:"limits,omitzero"`
	// TTLSeconds destroys the sandbox this long after creation (0: never).
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// IdleTimeoutSeconds destroys the sandbox after this long without an
	// exec or file request (0: never). A running exec keeps it busy.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
}

// Limits are a sandbox's cgroup limits; zero means unlimited.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
}

// Bind makes host path Source visible at Target inside the sandbox.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// State is where a sandbox is in its life.
type State string

// Sandbox states.
const (
	// StateRunning: ready for execs and file requests.
	StateRunning State = "running"
	// StateStopping: being destroyed (deleted, or expired).
	StateStopping State = "stopping"
	// StateExited: its PID 1 died on its own (killed from outside, or the
	// host ran out of memory). Its resources are freed; delete it to
	// forget it.
	StateExited State = "exited"
)

// States lists every state, in the order metrics report them.
var States = []State{StateRunning, StateStopping, StateExited}

// Sandbox describes a live sandbox: the body of GET /v1/sandboxes/{id}
// and of the 201 answer to a create.
type Sandbox struct {
	ID    string `json:"id"`
	State State  `json:"state"`
	// Pid is the host pid of the sandbox's PID 1.
	Pid       int       `json:"pid"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the TTL runs out, if the sandbox has one.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// LastActiveAt is the start or end of the latest exec or file request.
	LastActiveAt time.Time `json:"last_active_at"`
	// IdleExpiresAt is when the idle timeout runs out if nothing happens
	// until then, if the sandbox has one and no request is in flight.
	IdleExpiresAt *time.Time `json:"idle_expires_at,omitempty"`
	// Execs counts the commands running in it now.
	Execs int         `json:"execs"`
	Spec  SandboxSpec `json:"spec"`
	// ForkedFrom is the snapshot the sandbox was forked from, if any.
	ForkedFrom string `json:"forked_from,omitempty"`
	Usage      Usage  `json:"usage"`
	// Network is the sandbox's network now: mode, address, policy,
	// published ports.
	Network *Network `json:"network,omitempty"`
}

// Usage is what a sandbox uses now, read from its cgroup.
type Usage struct {
	MemoryBytes     int64   `json:"memory_bytes"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	Pids            int64   `json:"pids"`
	CPUTimeMs       float64 `json:"cpu_time_ms"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}
