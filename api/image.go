package api

import "time"

// ImagePullRequest asks the daemon to pull an image into its layer store.
type ImagePullRequest struct {
	// Ref is the image reference, with Docker Hub's defaults
	// ("python:3.12-slim", "ghcr.io/org/img@sha256:…").
	Ref string `json:"ref"`
}

// ImagePullEvent is one line of a pull's progress stream
// (application/x-ndjson). The last line has status "done", with Image, or
// "error", with Error.
type ImagePullEvent struct {
	// Status: "resolved" (Total is the image's size), "cached", "fetching"
	// (Done of Total bytes of the layer Digest), "unpacked", "done", "error".
	Status string `json:"status"`
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"`
	Done   int64  `json:"done,omitempty"`
	Total  int64  `json:"total,omitempty"`
	Layers int    `json:"layers,omitempty"`
	Image  *Image `json:"image,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// Image is a stored image.
type Image struct {
	Refs    []string  `json:"refs"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Layers  int       `json:"layers"`
	Created time.Time `json:"created,omitzero"`
	// InUse: a sandbox, function or desktop runs from it (it cannot be
	// removed).
	InUse bool `json:"in_use"`
}

// ImageList is GET /v1/images's answer, newest first.
type ImageList struct {
	Images []Image `json:"images"`
}

// ImageRemoved is DELETE /v1/images/{ref}'s answer.
type ImageRemoved struct {
	// Removed: the image went (it was its last reference, or a digest
	// was named); otherwise only the reference did.
	Removed bool `json:"removed"`
}
