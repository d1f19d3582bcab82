package api

import "time"

// File types of FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other"
)

// FileInfo describes a file inside a sandbox: the body of
// GET /v1/sandboxes/{id}/files/stat and the entries of a listing.
type FileInfo struct {
	// Path is the file's absolute path inside the sandbox.
	Path string `json:"path"`
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits with setuid, setgid and sticky
	// (e.g. 420 = 0644).
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
	// Link is a symlink's target, unresolved.
	Link string `json:"link,omitempty"`
}

// FileList is the body of GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	Entries []FileInfo `json:"entries"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
	// Mode is the permission bits (default 0755).
	Mode uint32 `json:"mode,omitempty"`
	// Parents creates missing parents too, and accepts an existing
	// directory.
	Parents bool `json:"parents,omitempty"`
	// UID and GID own what is created (default 0).
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
}
