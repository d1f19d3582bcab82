// Package api holds the wire types of tine's daemon: the JSON bodies of the
// REST API under /v1, the frames of the exec WebSocket, and the error codes.
// It has no logic. api/openapi.yaml is the specification these types
// follow; a test in internal/server keeps the daemon's routes and that file
// in step, and docs/api.md introduces both.
package api

// Version is the path prefix of every route of this API.
const Version = "v1"

// Health is the body of GET /v1/health.
type Health struct {
	// Status is "ok" while the daemon serves.
	Status string `json:"status"`
	// Version is the API version, "v1".
	Version string `json:"version"`
	// Pid is the daemon's process id.
	Pid int `json:"pid"`
	// PoolReady counts sandboxes ready for `tine run` hand-offs.
	PoolReady int `json:"pool_ready"`
}

// Feature is one host feature check, as `tine doctor` reports it.
type Feature struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail"`
	Affects string `json:"affects,omitempty"`
	Fix     string `json:"fix,omitempty"`
	Value   int    `json:"value,omitempty"`
	Version string `json:"version,omitempty"`
}

// Features is the body of GET /v1/features.
type Features struct {
	Checks []Feature `json:"checks"`
}
