// Package checkpoint owns the memory tier of snapshots: it dumps the
// process trees of a live sandbox with criu (every child of its PID 1 and
// their descendants, left stopped until the caller has the files too),
// with its tmpfs directories, and restores them into another live sandbox
// made from the same snapshot's files, so a replica's processes continue
// from the golden's memory with the same pids (ADR 0016).
//
// criu runs inside the sandbox's pid, mount, network, IPC, UTS and cgroup
// namespaces, so to criu the sandbox is the whole world: it dumps
// processes, not namespaces or mounts, and tine's own PID 1, its
// namespaces, cgroup and mounts stay tine's to make, in the replica too.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tine-run/tine/internal/probe"
)

// FormatVersion is the version of the images manifest this code writes.
const FormatVersion = 1

const manifestName = "manifest.json"

// Errors a caller can test for.
var (
	// ErrUnavailable: this host or daemon cannot use the memory tier
	// (no working criu, not root); the message says why and what to do.
	ErrUnavailable = errors.New("the memory tier is unavailable")
	// ErrCRIU: criu ran and failed; the message carries its reason.
	ErrCRIU = errors.New("criu failed")
	// ErrRefused: the sandbox holds something that would let it take
	// over criu; the message says what.
	ErrRefused = errors.New("the sandbox cannot be checkpointed safely")
)

// Sandbox is what the tier needs of a live sandbox.
type Sandbox interface {
	// Pid is the host pid of its PID 1.
	Pid() int
	// Adopt moves a host process into its cgroup.
	Adopt(pid int) error
	// RestrictThread puts the calling (locked) OS thread into a Landlock
	// domain with its write rules, and writes to each of also.
	RestrictThread(also ...*os.File) error
	// Freeze stops every process of the sandbox until Thaw.
	Freeze() error
	Thaw() error
}

// Tier checkpoints and restores with one criu binary.
type Tier struct {
	criu *launcher
	why  error // nil when usable
}

// New finds criu as tine doctor does (probe.CRIUPath) and keeps why it
// cannot be used, if it cannot: doctor's check, root, nsenter.
func New() *Tier { return newTier(os.Geteuid()) }

func newTier(euid int) *Tier {
	t := &Tier{}
	if euid != 0 {
		t.why = fmt.Errorf("%w: checkpoint and restore need a daemon running as root (criu ptraces the sandbox's processes and restores them into its namespaces); take an fs snapshot", ErrUnavailable)
		return t
	}
	c := probe.Get("criu")
	if !c.OK {
		t.why = fmt.Errorf("%w: %s; to fix: %s", ErrUnavailable, c.Detail, c.Fix)
		return t
	}
	path, err := probe.CRIUPath()
	if err != nil {
		t.why = fmt.Errorf("%w: %v (tine doctor says what to install)", ErrUnavailable, err)
		return t
	}
	if _, err := exec.LookPath(nsenter); err != nil {
		t.why = fmt.Errorf("%w: nsenter not found (apt-get install util-linux): %v", ErrUnavailable, err)
		return t
	}
	if t.criu, err = newLauncher(path); err != nil {
		t.why = fmt.Errorf("%w: criu at %s: %v", ErrUnavailable, path, err)
	}
	return t
}

// Usable is nil when the tier works here, else ErrUnavailable saying why
// and what to do.
func (t *Tier) Usable() error { return t.why }

// Dumped is what Dump captured; its processes are stopped until Resume.
type Dumped struct {
	// Processes is how many were dumped; Bytes the images' size.
	Processes int
	Bytes     int64

	stopped []int // pidfds of the processes to continue
	once    sync.Once
}

// Options are for sandboxes whose processes hold descriptors from outside
// the sandbox: an OCI container's stdio, pipes or files of containerd's
// shim, which the restored container must get from its new shim.
type Options struct {
	// External (for a dump) are files from outside the sandbox that the
	// processes hold, as criu's keys ("file[MNTID:INODE]", in hex): criu
	// dumps them as references instead of refusing them ("Can't lookup
	// mount"), to be given back at restore through Inherit.
	External []string
	// Inherit (for a restore) gives the restored processes File wherever
	// they held the file criu knows as Key: an external file or a pipe
	// whose other end was outside ("pipe:[INODE]").
	Inherit []Inherit
}

// Inherit is one descriptor handed to the restored processes.
type Inherit struct {
	Key  string
	File *os.File
}

// Restored is what Restore brought back.
type Restored struct {
	Processes int
	Took      time.Duration
}

// Manifest lists the trees of one dump (manifest.json in its directory).
type Manifest struct {
	Version int    `json:"version"`
	Trees   []Tree `json:"trees"`
	// Tmpfs lists the sandbox's tmpfs directories (/tmp, /run, /dev/shm)
	// kept with the images, as the trees' processes left them.
	Tmpfs []string `json:"tmpfs,omitempty"`
}

// Tree is one child of the sandbox's PID 1 and its descendants, dumped by
// one criu run into its own directory.
type Tree struct {
	Dir string `json:"dir"`
	// Root and Pids are pids in the sandbox's pid namespace; Top the
	// highest id of their threads there.
	Root int   `json:"root"`
	Pids []int `json:"pids"`
	Top  int   `json:"top"`
}

func (m *Manifest) maxPid() int {
	top := 1
	for _, t := range m.Trees {
		top = max(top, t.Top, slices.Max(append([]int{t.Root}, t.Pids...)))
	}
	return top
}

// ReadManifest reads the manifest of the dump in dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, fmt.Errorf("the memory images: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("the memory images' manifest: %w", err)
	}
	if m.Version != FormatVersion {
		return nil, fmt.Errorf("the memory images' manifest has format %d; this tine reads %d", m.Version, FormatVersion)
	}
	for _, t := range m.Trees {
		if !filepath.IsLocal(t.Dir) {
			return nil, fmt.Errorf("the memory images' manifest names %q, outside its directory", t.Dir)
		}
	}
	return &m, nil
}

// execNsenter runs argv inside pid1's pid namespace and returns its output.
func execNsenter(pid1 int, argv ...string) (string, error) {
	cmd := exec.Command(nsenter, append([]string{"--target", strconv.Itoa(pid1), "--pid", "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
