package api

// The screencast: after screencast_start, the guest sends binary messages
// of kind "frame" on the same session, between replies (docs/aci.md,
// "Screencast"). Each is laid out like an image reply (ACIJoin): the JSON
// ACIFrame, then the rectangles' encoded images one after another.

// ACIScreencast configures screencast_start.
type ACIScreencast struct {
	// FPS caps the frame rate (1–60, default 10).
	FPS int `json:"fps,omitempty"`
	// Format of every image: png (lossless, the default) or jpeg.
	Format  string `json:"format,omitempty"`
	Quality int    `json:"quality,omitempty"` // jpeg: 1–100 (default 80)
	// MaxLongEdge scales the stream down so its longer edge is at most
	// this (area averaging, as screenshots).
	MaxLongEdge int `json:"max_long_edge,omitempty"`
	// Delta sends only the changed rectangles after the first keyframe
	// (default false: every changed frame is a keyframe).
	Delta bool `json:"delta,omitempty"`
	// KeyframeIntervalMs: a changed screen is sent as a keyframe when the
	// last keyframe is older than this (100–600000, default 5000).
	KeyframeIntervalMs int `json:"keyframe_interval_ms,omitempty"`
	// Cursor composites the pointer into the frames (and streams its
	// moves: one XFixes round trip per frame slot).
	Cursor bool `json:"cursor,omitempty"`
	// Poll captures and diffs the whole screen every frame slot instead
	// of waiting for XDamage: the baseline `tine bench stream` compares
	// against, and what a server without DAMAGE gets anyway.
	Poll bool `json:"poll,omitempty"`
}

// ACIFrame is the header of one screencast message.
type ACIFrame struct {
	Type string `json:"type"` // "frame"
	// Seq counts the stream's messages from 1, without gaps: a gap means
	// the client lost a message.
	Seq uint64 `json:"seq"`
	// Kind is "key" (one rectangle, the whole frame) or "delta"
	// (rectangles to draw over the previous frame).
	Kind   string `json:"kind"`
	Format string `json:"format"`
	// Width and Height of the whole (scaled) frame.
	Width  int `json:"width"`
	Height int `json:"height"`
	// FrameHash is the XXH3-128 of the whole frame's raw pixels after
	// this message, as a screenshot's frame_hash: a lossless stream's
	// composite hashes to it.
	FrameHash string `json:"frame_hash"`
	// TimeMs is when the frame was captured, in ms since screencast_start.
	TimeMs float64 `json:"t_ms"`
	// Skipped counts the frame slots that passed with changes waiting
	// while the previous message was still being sent: those changes are
	// all in this message (a slow client gets the latest state, late).
	Skipped int `json:"skipped,omitempty"`
	// Cursor is the pointer position, with cursor: true.
	Cursor *[2]int `json:"cursor,omitempty"`
	// Rects are the rectangles, in the order their images follow.
	Rects []ACIRect `json:"rects"`
}

// ACIRect is one encoded rectangle of a frame, in frame coordinates.
type ACIRect struct {
	X     int `json:"x"`
	Y     int `json:"y"`
	W     int `json:"w"`
	H     int `json:"h"`
	Bytes int `json:"bytes"`
}

// ACIFrameType is ACIFrame.Type: what tells a frame from a reply.
const ACIFrameType = "frame"
