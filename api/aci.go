package api

import (
	"encoding/binary"
	"encoding/json"
)

// The ACI (agent-computer interface) wire protocol: a WebSocket at
// /v1/desktops/{id}/aci (and on `tine guest --listen`). docs/aci.md is the
// reference; these are its messages.

// ACIVersion is the protocol version the welcome announces.
const ACIVersion = 1

// ACIWelcome is the server's first message.
type ACIWelcome struct {
	Type         string   `json:"type"` // "welcome"
	Version      int      `json:"version"`
	Capabilities []string `json:"capabilities"`
	Width        int      `json:"width"`
	Height       int      `json:"height"`
	// Capture says how screenshots read the screen: "framebuffer" (Xvfb's
	// memory, mapped), "shm" (MIT-SHM) or "getimage". Informational.
	Capture string `json:"capture,omitempty"`
	// JPEG names the guest's JPEG encoder: "libjpeg-turbo" or "image/jpeg"
	// (a pure-Go build, several times slower). Informational.
	JPEG string `json:"jpeg,omitempty"`
}

// ACIRequest is one request: an action, an observation or a step. Which
// fields matter depends on Op (see docs/aci.md).
type ACIRequest struct {
	ID uint64 `json:"id"`
	Op string `json:"op"`

	// Pointer: move, click, mouse_down, mouse_up, drag, scroll.
	X      *int     `json:"x,omitempty"`
	Y      *int     `json:"y,omitempty"`
	Button string   `json:"button,omitempty"` // left, middle, right (default left)
	Count  int      `json:"count,omitempty"`  // clicks (default 1)
	Path   [][2]int `json:"path,omitempty"`   // drag: points, the first is where the button goes down
	DX     int      `json:"dx,omitempty"`     // scroll: horizontal steps (positive: right)
	DY     int      `json:"dy,omitempty"`     // scroll: vertical steps (positive: down)

	// Keyboard: key, key_down, key_up ("ctrl+shift+t"), type.
	Keys    string `json:"keys,omitempty"`
	Text    string `json:"text,omitempty"`
	DelayMs int    `json:"delay_ms,omitempty"` // type: pause after each key

	// Windows: focus_window, close_window; launch and exec run Cmd.
	Window uint32   `json:"window,omitempty"`
	Cmd    []string `json:"cmd,omitempty"`

	// exec: the command's whole stdin (base64 in JSON) and a timeout
	// (default 30 s, at most 10 min): exit code 124, reason "timeout".
	Stdin     []byte `json:"stdin,omitempty"`
	TimeoutMs int    `json:"timeout_ms,omitempty"`

	// read_file, write_file: an absolute path on the desktop; write_file's
	// content follows its header in a binary message (see docs/aci.md),
	// written with Mode (default 0644).
	File string `json:"file,omitempty"`
	Mode uint32 `json:"mode,omitempty"`

	// wait: sleep this long.
	Ms int `json:"ms,omitempty"`

	// screenshot (and step's observe).
	Screenshot *ACIScreenshot `json:"screenshot,omitempty"`

	// screencast_start (docs/aci.md, "Screencast").
	Screencast *ACIScreencast `json:"screencast,omitempty"`

	// step: actions in order, then one observation.
	Actions []ACIRequest `json:"actions,omitempty"`
	Observe *ACIObserve  `json:"observe,omitempty"`

	// anthropic, openai: a computer-use tool's action as the model emitted
	// it (Anthropic: a computer tool_use's input; OpenAI: a computer_call's
	// action, or its actions array), in coordinates of a screen of Scale
	// (width, height; default the real screen's). The reply carries the
	// screenshot the tool loop sends back, at that size (docs/aci.md).
	Input json.RawMessage `json:"input,omitempty"`
	Scale *[2]int         `json:"scale,omitempty"`

	// record_start: frames a second (default 15) and the container (mp4).
	// accessibility: format "json" (default) or "xml" (OSWorld's).
	FPS    int    `json:"fps,omitempty"`
	Format string `json:"format,omitempty"`
	// accessibility: "visible", "interactive" (OSWorld's filter) or none.
	Filter string `json:"filter,omitempty"`
}

// ACINode is one accessible object of a desktop's accessibility tree
// (the accessibility op's compact form).
type ACINode struct {
	Role     string     `json:"role"` // the AT-SPI role, spaces as '-': push-button
	Name     string     `json:"name,omitempty"`
	Text     string     `json:"text,omitempty"`
	States   []string   `json:"states,omitempty"` // enabled, focused, showing, visible, …
	Bounds   []int      `json:"bounds,omitempty"` // x, y, width, height on the screen
	Children []*ACINode `json:"children,omitempty"`
}

// ACIScreenshot asks for the screen (or a region) as an image.
type ACIScreenshot struct {
	Format      string `json:"format,omitempty"`  // png (default) or jpeg
	Quality     int    `json:"quality,omitempty"` // jpeg: 1–100 (default 80)
	MaxLongEdge int    `json:"max_long_edge,omitempty"`
	// Region is x, y, width, height; empty means the whole screen.
	Region []int `json:"region,omitempty"`
	Cursor bool  `json:"cursor,omitempty"`
	// IfNoneMatch: when the frame's hash equals it, the answer is
	// not_modified and carries no image. ACIAnyFrame ("*") matches any
	// frame: the answer is the hash alone.
	IfNoneMatch string `json:"if_none_match,omitempty"`
}

// ACIAnyFrame as IfNoneMatch asks for a frame's hash without its image
// (the guest's capability "frame_probe").
const ACIAnyFrame = "*"

// ACIObserve is what a step returns after its actions.
type ACIObserve struct {
	Screenshot *ACIScreenshot `json:"screenshot,omitempty"`
	Windows    bool           `json:"windows,omitempty"`
	Cursor     bool           `json:"cursor,omitempty"`
	// SettleMs waits for the screen to stay unchanged this long (at most
	// 1 s) before observing, so an action's effect is in the picture.
	SettleMs int `json:"settle_ms,omitempty"`
}

// ACIReply answers one request, as a text message, or as the header of a
// binary message that carries an image (see docs/aci.md).
type ACIReply struct {
	ID    uint64    `json:"id"`
	OK    bool      `json:"ok"`
	Error *ACIError `json:"error,omitempty"`

	// screenshot: the image's metadata (its bytes follow the header).
	FrameHash   string `json:"frame_hash,omitempty"`
	NotModified bool   `json:"not_modified,omitempty"`
	Format      string `json:"format,omitempty"`
	Width       int    `json:"width,omitempty"`
	Height      int    `json:"height,omitempty"`
	Bytes       int    `json:"bytes,omitempty"`

	Windows []ACIWindow `json:"windows,omitempty"`
	Cursor  *[2]int     `json:"cursor,omitempty"`
	Pid     int         `json:"pid,omitempty"` // launch

	// exec: how the command ended and its output.
	Exec *ExecResult `json:"exec,omitempty"`

	// step: each action's outcome, in order.
	Results []ACIResult `json:"results,omitempty"`

	// anthropic: the tool result's text (cursor_position's "X=…,Y=…").
	Output string `json:"output,omitempty"`
	// accessibility: the tree, compact, or OSWorld's XML.
	Tree []*ACINode `json:"tree,omitempty"`
	XML  string     `json:"xml,omitempty"`
	// record_stop: the recording's length.
	DurationMs float64 `json:"duration_ms,omitempty"`
	Frames     int     `json:"frames,omitempty"`
}

// ACIResult is one step action's outcome.
type ACIResult struct {
	Status string    `json:"status"` // ok, error or timeout
	Error  *ACIError `json:"error,omitempty"`
}

// ACIWindow is a top-level window.
type ACIWindow struct {
	ID       uint32 `json:"id"`
	Title    string `json:"title"`
	Class    string `json:"class"`
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	Focused  bool   `json:"focused"`
	Instance string `json:"instance,omitempty"`
	Pid      int    `json:"pid,omitempty"`
}

// ACIError is a typed failure of one request; the session goes on.
type ACIError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ACI error codes.
const (
	ACIBadRequest = "bad_request" // malformed JSON, unknown op, missing or bad field
	ACIOffScreen  = "off_screen"  // a coordinate outside the screen
	ACIUnknownKey = "unknown_key" // the message names the key
	ACIBadText    = "invalid_text"
	ACINoWindow   = "no_window" // the window is gone or never was
	ACINotFound   = "not_found" // read_file, write_file: no such file or directory
	ACITooLarge   = "too_large"
	ACITimeout    = "timeout"
	ACIInternal   = "internal"
	// ACIUnknownAction: an anthropic or openai action type the guest does
	// not know; the message names it.
	ACIUnknownAction = "unknown_action"
	ACIForbidden     = "forbidden" // a view-only session's input
)

// DesktopSpec is the body of POST /v1/desktops.
type DesktopSpec struct {
	// Width and Height of the screen (default 1280×800).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Apps are commands started once the window manager is up; create
	// returns when each has mapped a window.
	Apps [][]string `json:"apps,omitempty"`
	// GLX gives the X server software OpenGL (about 54 MiB more per
	// desktop); off by default.
	GLX bool `json:"glx,omitempty"`
	// MemoryTier is kept for clients that set it: every desktop is now
	// one the memory tier of snapshots can capture (its X server keeps
	// the screen in a file of the sandbox's /run, not in System V shared
	// memory, which criu cannot carry).
	MemoryTier bool `json:"memory_tier,omitempty"`
	// OSWorld serves OSWorld's guest API (docs/osworld.md) for the
	// desktop on a loopback TCP port the daemon publishes (Desktop.OSWorld).
	OSWorld bool `json:"osworld,omitempty"`
	// CDP publishes the desktop's 127.0.0.1:9222 (Chromium's DevTools,
	// when Chromium runs with --remote-debugging-port=9222) on a loopback
	// TCP port (Desktop.CDP); on with OSWorld.
	CDP bool `json:"cdp,omitempty"`
	// A11y starts a session bus so applications export their
	// accessibility trees (the ACI's accessibility op); on with OSWorld.
	A11y bool `json:"a11y,omitempty"`
	// Image is an OCI image with Xvfb, a window manager and the apps, used
	// as the desktop's root instead of the host's (pulled when missing);
	// the guest binary is bound in as usual.
	Image string `json:"image,omitempty"`
	// Limits of the desktop's sandbox (memory default 1 GiB).
	Limits Limits `json:"limits,omitzero"`
	// TTLSeconds and IdleTimeoutSeconds as for sandboxes.
	TTLSeconds         int64 `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// Network, Allow, Deny and Publish as for sandboxes: a desktop whose
	// browser loads real pages needs "egress".
	Network string      `json:"network,omitempty"`
	Allow   []string    `json:"allow,omitempty"`
	Deny    []string    `json:"deny,omitempty"`
	Publish []Port      `json:"publish,omitempty"`
	Inject  []Injection `json:"inject,omitempty"`
}

// Desktop describes a desktop: a sandbox (its ID works with the sandbox
// routes: exec, files) running Xvfb, a window manager and the guest.
type Desktop struct {
	Sandbox
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	ReadyMs float64 `json:"ready_ms"`
	// OSWorld is host:port of the desktop's OSWorld guest API (plain
	// HTTP, no path prefix) when it was created with osworld.
	OSWorld string `json:"osworld,omitempty"`
	// CDP is host:port of the desktop's Chromium DevTools port (cdp or
	// osworld): OSWorld's chromium port.
	CDP string `json:"cdp,omitempty"`
}

// ACIJoin lays out a binary ACI message: the 4-byte big-endian length of
// the JSON header, the header, then the payload (a reply's image, or
// write_file's content).
func ACIJoin(head, payload []byte) []byte {
	msg := make([]byte, 4, 4+len(head)+len(payload))
	binary.BigEndian.PutUint32(msg, uint32(len(head)))
	return append(append(msg, head...), payload...)
}

// ACISplit takes a binary ACI message apart; ok is false when it is too
// short for the header length it gives.
func ACISplit(msg []byte) (head, payload []byte, ok bool) {
	if len(msg) < 4 || uint64(binary.BigEndian.Uint32(msg)) > uint64(len(msg)-4) {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(msg)
	return msg[4 : 4+n], msg[4+n:], true
}
