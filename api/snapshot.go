package api

import "time"

// Snapshot tiers.
const (
	// TierFS captures the sandbox's files (its writable layer); a fork
	// boots fresh processes over them.
	TierFS = "fs"
	// TierMemory also captures the whole process tree (criu).
	TierMemory = "memory"
)

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	// Tier is "fs" (default) or "memory".
	Tier string `json:"tier,omitempty"`
	// Name is a label for people; ids name snapshots.
	Name string `json:"name,omitempty"`
}

// Snapshot describes an immutable capture of a sandbox or desktop.
type Snapshot struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Tier string `json:"tier"`
	// Kind is "sandbox" or "desktop": what its forks are.
	Kind string `json:"kind"`
	// Source is the sandbox it was taken from; Parent the snapshot that
	// sandbox was forked from (lineage), empty for a sandbox made fresh.
	Source    string    `json:"source"`
	Parent    string    `json:"parent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Depth is how many layers a fork stacks over the base.
	Depth int `json:"depth"`
	// Bytes is what the snapshot added on disk.
	Bytes int64 `json:"bytes"`
	// PausedMs is how long the source was frozen (and, in the memory
	// tier, its processes stopped) to take it.
	PausedMs float64 `json:"paused_ms"`
	// Processes is how many processes the memory tier captured (0 for fs).
	Processes int `json:"processes,omitempty"`
	// Forks counts the live sandboxes running from it now; a snapshot
	// with forks cannot be deleted (409).
	Forks int `json:"forks"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// ForkRequest is the body of POST /v1/snapshots/{id}/fork and
// POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Count is how many replicas (default 1). Either all are made or
	// none (429 when the budget cannot hold them all).
	Count int `json:"count,omitempty"`
	// Tier of the snapshot POST /v1/sandboxes/{id}/fork takes first.
	Tier string `json:"tier,omitempty"`
	// TTLSeconds and IdleTimeoutSeconds of each replica (default: the
	// source's).
	TTLSeconds         *int64 `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds *int64 `json:"idle_timeout_seconds,omitempty"`
	// Limits of each replica (default: the source's).
	Limits *Limits `json:"limits,omitempty"`
	// Env adds to (and overrides) the source's environment.
	Env []string `json:"env,omitempty"`
	// Hostname of each replica (default: the source's, which tools that
	// recorded it expect).
	Hostname string `json:"hostname,omitempty"`
}

// ForkResult is the answer to a fork: the snapshot forked and the
// replicas, as sandboxes or, for a desktop's snapshot, desktops.
type ForkResult struct {
	Snapshot  Snapshot  `json:"snapshot"`
	Sandboxes []Sandbox `json:"sandboxes,omitempty"`
	Desktops  []Desktop `json:"desktops,omitempty"`
	// ForkMs is the wall time from the request to every replica ready.
	ForkMs float64 `json:"fork_ms"`
}
