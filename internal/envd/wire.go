package envd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The messages of envd's process and filesystem services as the E2B SDKs
// send and read them: proto3's JSON mapping (lowerCamelCase names, default
// values omitted, enums by name, bytes in base64, int64 as a string,
// oneofs as the one field that is set). Written from the public .proto
// files' field names; the binary encoding is never used by the SDKs.

// ProcessConfig is what to run.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// PTY asks for a terminal of Size.
type PTY struct {
	Size *PTYSize `json:"size,omitempty"`
}

// PTYSize is a terminal's size in character cells.
type PTYSize struct {
	Cols uint32 `json:"cols,omitempty"`
	Rows uint32 `json:"rows,omitempty"`
}

// ProcessSelector names a process by pid or by the tag given at start.
type ProcessSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

func (s *ProcessSelector) String() string {
	switch {
	case s == nil:
		return "no process"
	case s.Pid != nil:
		return "pid " + strconv.FormatUint(uint64(*s.Pid), 10)
	case s.Tag != nil:
		return "tag " + strconv.Quote(*s.Tag)
	}
	return "no process"
}

type StartRequest struct {
	Process *ProcessConfig `json:"process"`
	PTY     *PTY           `json:"pty,omitempty"`
	Tag     *string        `json:"tag,omitempty"`
	// Stdin keeps the process's stdin open for SendInput (default true,
	// for SDKs from before the field).
	Stdin *bool `json:"stdin,omitempty"`
}

type ConnectRequest struct {
	Process *ProcessSelector `json:"process"`
}

type ListRequest struct{}

type ProcessInfo struct {
	Config *ProcessConfig `json:"config"`
	Pid    uint32         `json:"pid,omitempty"`
	Tag    *string        `json:"tag,omitempty"`
}

type ListResponse struct {
	Processes []ProcessInfo `json:"processes,omitempty"`
}

type ProcessInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

type SendInputRequest struct {
	Process *ProcessSelector `json:"process"`
	Input   *ProcessInput    `json:"input"`
}

// Signal is process.Signal: the SDKs send SIGTERM or SIGKILL, by name.
type Signal int32

const (
	SignalUnspecified Signal = 0
	SignalSIGTERM     Signal = 15
	SignalSIGKILL     Signal = 9
)

var signalNames = map[string]Signal{"SIGNAL_UNSPECIFIED": SignalUnspecified, "SIGNAL_SIGTERM": SignalSIGTERM, "SIGNAL_SIGKILL": SignalSIGKILL}

// UnmarshalJSON takes the enum's name or its number, as proto3 JSON does.
func (s *Signal) UnmarshalJSON(b []byte) error {
	var name string
	if json.Unmarshal(b, &name) == nil {
		v, ok := signalNames[name]
		if !ok {
			return fmt.Errorf("unknown signal %q", name)
		}
		*s = v
		return nil
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("signal: want a name or a number: %w", err)
	}
	*s = Signal(n)
	return nil
}

type SendSignalRequest struct {
	Process *ProcessSelector `json:"process"`
	Signal  Signal           `json:"signal"`
}

type CloseStdinRequest struct {
	Process *ProcessSelector `json:"process"`
}

type UpdateRequest struct {
	Process *ProcessSelector `json:"process"`
	PTY     *PTY             `json:"pty,omitempty"`
}

// Empty is every response without fields.
type Empty struct{}

// ProcessEvent is the oneof of a process stream: exactly one field set.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *Empty      `json:"keepalive,omitempty"`
}

type StartEvent struct {
	Pid uint32 `json:"pid,omitempty"`
}

type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type EndEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// StreamResponse is StartResponse and ConnectResponse: one event each.
type StreamResponse struct {
	Event *ProcessEvent `json:"event"`
}

// File types and watch event types, by their proto enum names.
const (
	FileTypeFile      = "FILE_TYPE_FILE"
	FileTypeDirectory = "FILE_TYPE_DIRECTORY"
	FileTypeSymlink   = "FILE_TYPE_SYMLINK"

	EventCreate = "EVENT_TYPE_CREATE"
	EventWrite  = "EVENT_TYPE_WRITE"
	EventRemove = "EVENT_TYPE_REMOVE"
	EventRename = "EVENT_TYPE_RENAME"
	EventChmod  = "EVENT_TYPE_CHMOD"
)

// EntryInfo describes a file.
type EntryInfo struct {
	Name          string    `json:"name"`
	Type          string    `json:"type,omitempty"`
	Path          string    `json:"path"`
	Size          int64     `json:"size,omitempty,string"`
	Mode          uint32    `json:"mode,omitempty"`
	Permissions   string    `json:"permissions,omitempty"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedTime  time.Time `json:"modifiedTime,omitzero"`
	SymlinkTarget *string   `json:"symlinkTarget,omitempty"`
	// Metadata is what uploads set with X-Metadata-* headers, kept as
	// the file's user.e2b.* extended attributes.
	Metadata map[string]string `json:"metadata,omitempty"`
}

type PathRequest struct {
	Path string `json:"path"`
}

type EntryResponse struct {
	Entry *EntryInfo `json:"entry"`
}

type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type ListDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth,omitempty"`
}

type ListDirResponse struct {
	Entries []*EntryInfo `json:"entries,omitempty"`
}

type WatchDirRequest struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive,omitempty"`
	IncludeEntry bool   `json:"includeEntry,omitempty"`
	// AllowNetworkMounts lets a watch cover network filesystems; a tine
	// sandbox has none, so every watch already may.
	AllowNetworkMounts bool `json:"allowNetworkMounts,omitempty"`
}

type FilesystemEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type,omitempty"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

type WatchDirResponse struct {
	Start      *Empty           `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *Empty           `json:"keepalive,omitempty"`
}

type CreateWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

type WatcherRequest struct {
	WatcherID string `json:"watcherId"`
}

type GetWatcherEventsResponse struct {
	Events []FilesystemEvent `json:"events,omitempty"`
}
