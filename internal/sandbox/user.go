package sandbox

// User is who a sandbox's command runs as instead of its root (an image's
// USER): its command process sets these ids after PID 1 has walled itself
// in, just before execve, and so loses its capabilities (they are kept
// only by a process whose ids are all 0).
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are the supplementary groups; none when empty.
	Groups []uint32 `json:"groups,omitempty"`
}
