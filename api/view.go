package api

import "time"

// ViewSpec is the body of POST /v1/desktops/{id}/view.
type ViewSpec struct {
	// ViewOnly makes the page watch only: its ACI session refuses input.
	ViewOnly bool `json:"view_only,omitempty"`
	// TTLSeconds is how long the token is good for (default 600, at most
	// 86400); sessions opened before it expires go on.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// View is a viewer page's address: Path (with its token) on the daemon's
// TCP listener, no bearer token needed.
type View struct {
	Path      string    `json:"path"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	ViewOnly  bool      `json:"view_only"`
}
