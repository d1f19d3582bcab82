// Package sandbox turns a Spec into a Plan (plain data: mounts, rules,
// limits, policies) and runs it: the parent side (run_linux.go) creates the
// cgroup and clones the namespaced child; the child side (init_linux.go)
// applies the plan with raw syscalls and becomes the sandbox's PID 1, which
// forks the command and reaps.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/caps"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"golang.org/x/sys/unix"
)

// DefaultDisk is the default size of a sandbox's writable storage: the
// layer over the root, /tmp and /run together.
const DefaultDisk = 256 << 20

// The limits tine run gives a sandbox that asks for none (Spec.DefaultLimits),
// where tine drives cgroups.
const (
	DefaultMemory = 1 << 30
	DefaultPids   = 1024
)

// DefaultPath is the PATH a sandboxed command gets unless -e sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Spec is what the user asks for.
type Spec struct {
	// Args is the command and its arguments; Args[0] is looked up in the
	// sandbox's PATH when it has no slash.
	Args []string
	// Env is KEY=VALUE pairs; PATH, HOME and HOSTNAME get defaults.
	Env []string
	// Workdir is the command's working directory inside the sandbox.
	Workdir string
	// Hostname is the sandbox's private host name.
	Hostname string
	// RootFS is a directory used as the read-only base of the root; empty
	// means the host's own root filesystem.
	RootFS string
	// Layers are read-only directories stacked over the base, topmost
	// first (a snapshot's layers: a fork starts from them).
	Layers []string
	// HostView is what a sandbox over the host's root sees of it: the
	// operating system only (HostViewOS, the default), or all of it
	// (HostViewFull). It does not apply to a RootFS.
	HostView HostView
	// DiskBytes caps the writable layer over the root.
	DiskBytes int64
	// Binds are host paths made visible inside.
	Binds []Bind
	// UserNS runs the sandbox in a user namespace as root too: its root is
	// mapped to an unprivileged host uid and gid range (UserNSRange), so it
	// has no DAC override on host files. (A rootless sandbox always has one.)
	UserNS bool
	// Limits are enforced through the cgroup driver.
	Limits cgroup.Limits
	// DefaultLimits fill the zero fields of Limits where tine drives
	// cgroups (as root). A rootless sandbox has no cgroup, and ignores
	// them: a default never makes a run fail.
	DefaultLimits cgroup.Limits
	// Timeout kills the whole sandbox after this long (0: none).
	Timeout time.Duration
	// Seccomp selects the syscall policy.
	Seccomp seccomp.Mode
	// TTY gives the command a new pseudo-terminal as its controlling tty.
	TTY bool
	// Stdio are the command's stdin, stdout and stderr.
	Stdio [3]*os.File
	// RootInPlace makes RootFS the root itself, written in place (an OCI
	// bundle's rootfs, prepared by the caller), instead of the read-only
	// base of an overlay with a writable layer of tine's.
	RootInPlace bool
	// ReadOnlyRoot mounts an in-place root read-only.
	ReadOnlyRoot bool
	// Mounts are more kernel filesystems mounted inside (tmpfs, mqueue),
	// after tine's own /proc, /dev and /sys and before the binds.
	Mounts []Mount
	// MaskedPaths and ReadOnlyPaths add to tine's own masks and read-only
	// paths (plan.go); a path missing inside is skipped.
	MaskedPaths, ReadOnlyPaths []string
	// Capabilities, when not nil, is the command's capability set (names
	// such as "CAP_CHOWN") instead of the default; it may only narrow it.
	Capabilities []string
	// CommandFilter is a second seccomp filter, loaded last in the command's
	// process, just before its execve (an OCI config's own profile, as
	// runc loads it): the kernel applies both it and Seccomp's, the
	// stricter verdict winning.
	CommandFilter []unix.SockFilter
	// Detach makes a sandbox that outlives the tine that starts it (an OCI
	// container: tine oci create exits, and containerd's shim, a
	// subreaper, inherits PID 1). PID 1 gets no parent-death signal, is
	// set up and then waits for StartSignal before it forks the command,
	// and exits with the command's exit code (128+signal when a signal
	// ended it). Start returns once PID 1 waits.
	Detach bool
	// Adopt, for a detached sandbox, makes PID 1 fork no command at
	// start: it waits instead for this process of its pid namespace, as it
	// would for the command (signals forwarded, its exit status PID 1's).
	// An OCI restore: criu restores the command's tree into the created
	// sandbox, and criu's exit leaves it to PID 1 (the namespace's init),
	// which reaps it.
	Adopt int
	// CgroupPath puts the sandbox in this cgroup (a path below each
	// hierarchy's root, such as /default/c1) instead of one of tine's
	// own; tine's reaper never touches it.
	CgroupPath string
	// User, when set, runs the command as that user (an image's USER);
	// otherwise it runs as the sandbox's root.
	User *User
	// Setuid lets set-user-ID programs work inside (sudo in an OSWorld
	// desktop): no no_new_privs, and the root's overlay without nosuid.
	// What such a program gains is bounded by the rest of the walls — the
	// capability bounding set, seccomp, Landlock, the namespaces — as the
	// sandbox's root is; Docker runs containers so by default.
	Setuid bool
	// Zygote makes a live sandbox for a warm function: what PID 1 launches
	// may fork requests that wall themselves in (RequestWalls) before user
	// code runs. PID 1 therefore has no Landlock domain (a domain forbids
	// mounting a request's private /tmp) and seccomp's Zygote filter, which
	// adds unshare of a user, mount, IPC and network namespace and mount to
	// Seccomp's.
	Zygote bool
	// NetNS is a network namespace made ready by internal/network (none:
	// lo down; egress: a veth to the host), joined instead of a fresh one
	// with lo up. The caller keeps it open until the sandbox has started.
	NetNS *os.File
	// ForkOf makes a sandbox that receives live-forked copies of a
	// forkable session's interpreter in that sandbox (livefork_linux.go):
	// it runs in a user namespace whose owner is the host's root and
	// where every id maps to itself, so the copy, euid 0 outside it, may
	// join it with its capabilities dropped; and its pid namespace is
	// nested in ForkOf's, the only kind a process of ForkOf can join. It
	// implies UserNS, and it dies with ForkOf's PID 1.
	ForkOf *Sandbox
	// spare, with ForkOf, makes the child ahead of its root (CreateSpare).
	spare *spare
	// IPCNS and UTSNS are IPC and UTS namespaces joined instead of fresh
	// ones (an OCI container's pod's, by path), for a detached sandbox
	// only. With UTSNS and no Hostname, the namespace's host name is kept.
	IPCNS, UTSNS *os.File
	// ExtraFiles are descriptors the command gets as 3, 4, ... (an OCI
	// create's --preserve-fds), for a detached sandbox only.
	ExtraFiles []*os.File
	// CgroupFS shows the sandbox its own cgroup, read-only, at
	// /sys/fs/cgroup (an OCI config's cgroup mount).
	CgroupFS bool
	// OOMScoreAdj is the command's oom_score_adj (PID 1, tine's reaper,
	// keeps -1000).
	OOMScoreAdj int
}

// maxExtraFiles bounds Spec.ExtraFiles.
const maxExtraFiles = 64

// StartSignal starts a detached sandbox's command (Spec.Detach).
const StartSignal = syscall.SIGUSR2

// Mount is a kernel filesystem mounted at Target inside the sandbox.
type Mount struct {
	Type, Source, Target string
	Flags                uintptr
	Data                 string
}

// HostView selects how much of the host's root a sandbox sees.
type HostView string

const (
	// HostViewOS shows the operating system (/usr, /etc, /opt, the
	// package databases, ...) and hides the host's data: every other
	// top-level directory, most of /var, and the files of /etc that are
	// not world-readable are empty (see hostview.go).
	HostViewOS HostView = "os"
	// HostViewFull shows the whole host root, less the password hashes,
	// SSH host keys, /root and tine's own state.
	HostViewFull HostView = "full"
)

// ParseHostView parses --host-view; "" is the default, os.
func ParseHostView(v string) (HostView, error) {
	switch HostView(v) {
	case "", HostViewOS:
		return HostViewOS, nil
	case HostViewFull:
		return HostViewFull, nil
	}
	return "", fmt.Errorf("%w: host view %q: want os (the operating system only, the default) or full (the whole host root)", ErrInvalidSpec, v)
}

// Bind makes host path Source visible at Target inside the sandbox.
type Bind struct {
	Source   string
	Target   string
	ReadOnly bool
}

// ParseBind parses HOST:GUEST[:ro|:rw].
func ParseBind(s string) (Bind, error) {
	parts := strings.Split(s, ":")
	var b Bind
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		b.ReadOnly = parts[2] == "ro"
	default:
		return b, fmt.Errorf("bind %q: want HOST:GUEST or HOST:GUEST:ro", s)
	}
	b.Source, b.Target = parts[0], parts[1]
	if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) {
		return b, fmt.Errorf("bind %q: both paths must be absolute", s)
	}
	return b, nil
}

// Errors a caller can test for.
var (
	ErrNotFound     = errors.New("not found in sandbox")
	ErrPermission   = errors.New("permission denied in sandbox")
	ErrInvalidSpec  = errors.New("invalid sandbox spec")
	ErrSetup        = errors.New("sandbox setup failed")
	ErrRootlessOnly = errors.New("not available without root")
	ErrUnsupported  = errors.New("not supported on this host")
)

// reservedTargets are trees tine builds itself; binds may not cover them,
// or resolve into them through a symlink.
var reservedTargets = []string{"/proc", "/sys", "/dev"}

// Validate checks the spec for what can be known before anything is created.
// A spec without Args describes a live sandbox (see Create).
func (s *Spec) Validate() error {
	if err := NoNUL("args", s.Args...); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"workdir", s.Workdir}, {"hostname", s.Hostname}, {"rootfs", s.RootFS}} {
		if err := NoNUL(f.name, f.v); err != nil {
			return err
		}
	}
	if err := NoNUL("env", s.Env...); err != nil {
		return err
	}
	for _, b := range s.Binds {
		if err := NoNUL("bind", b.Source, b.Target); err != nil {
			return err
		}
	}
	if len(s.Args) > 0 && s.Args[0] == "" {
		return fmt.Errorf("%w: empty command name", ErrInvalidSpec)
	}
	if s.RootFS != "" {
		st, err := os.Stat(s.RootFS)
		if err != nil {
			return fmt.Errorf("%w: --rootfs %s: %v", ErrInvalidSpec, s.RootFS, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("%w: --rootfs %s is not a directory", ErrInvalidSpec, s.RootFS)
		}
	}
	if err := s.validateOCI(); err != nil {
		return err
	}
	if _, err := ParseHostView(string(s.HostView)); err != nil {
		return err
	}
	if s.RootFS != "" && s.HostView == HostViewFull {
		return fmt.Errorf("%w: --host-view full is a view of the host's root; with --rootfs the root is %s as it is", ErrInvalidSpec, s.RootFS)
	}
	if s.Workdir != "" && !path.IsAbs(s.Workdir) {
		return fmt.Errorf("%w: --workdir %q must be an absolute path", ErrInvalidSpec, s.Workdir)
	}
	for _, b := range s.Binds {
		if _, err := checkBindSource(b.Source); err != nil {
			return err
		}
		if err := checkReserved(b.Target); err != nil {
			return err
		}
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrInvalidSpec, e)
		}
	}
	if s.Zygote && len(s.Args) > 0 {
		return fmt.Errorf("%w: only a live sandbox can be a zygote", ErrInvalidSpec)
	}
	if s.NetNS != nil && s.UserNS {
		return fmt.Errorf("%w: a network other than loopback needs the host's user namespace: a sandbox in a user namespace of its own cannot join a namespace the host made (drop userns, or use the loopback network)", ErrInvalidSpec)
	}
	if len(s.ExtraFiles) > 0 && (!s.Detach || len(s.ExtraFiles) > maxExtraFiles) {
		return fmt.Errorf("%w: extra descriptors are for a detached sandbox, at most %d", ErrInvalidSpec, maxExtraFiles)
	}
	if (s.IPCNS != nil || s.UTSNS != nil) && (!s.Detach || s.UserNS) {
		return fmt.Errorf("%w: joining an IPC or UTS namespace is for a detached sandbox in the host's user namespace", ErrInvalidSpec)
	}
	if len(s.Hostname) > 64 {
		return fmt.Errorf("%w: hostname longer than 64 bytes", ErrInvalidSpec)
	}
	return nil
}

// limits returns the limits enforced on the sandbox: Limits, with
// DefaultLimits in its zero fields when cgroups are driven.
func (s *Spec) limits(driven bool) cgroup.Limits {
	lim := s.Limits
	if !driven {
		return lim
	}
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = s.DefaultLimits.MemoryBytes
	}
	if lim.Pids == 0 {
		lim.Pids = s.DefaultLimits.Pids
	}
	if lim.CPUs == 0 {
		lim.CPUs = s.DefaultLimits.CPUs
	}
	return lim
}

// NoNUL refuses values of field that hold a NUL byte. No system call
// takes one: the kernel reads a string as cut short there, so a bind
// target "/proc\x00" that passed the checks would be mounted on /proc.
func NoNUL(field string, vals ...string) error {
	for _, v := range vals {
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: %s %q holds a NUL byte, which no system call takes", ErrInvalidSpec, field, v)
		}
	}
	return nil
}

// Outcome is how a sandboxed command ended.
type Outcome struct {
	// ExitCode follows the shell: the command's code, 128+N when killed by
	// signal N, 137 on OOM, 124 on timeout, 127 when not found.
	ExitCode int `json:"exit_code"`
	// Reason is "exit", "signal", "oom", "timeout" or "not-found".
	Reason string `json:"reason"`
	// Signal is the signal that killed the command, if any.
	Signal int `json:"signal,omitempty"`
	// Phases times plan (spec to plan), start (until the command is
	// exec'd) and run (until it ended and was reaped), in milliseconds.
	Phases Phases `json:"phases_ms"`
	// PeakMemoryBytes is the cgroup's peak memory use (0 when unknown).
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// CPUTime is user+system CPU time of the whole tree, in milliseconds.
	CPUTimeMs float64 `json:"cpu_time_ms"`
	// Cgroup names the cgroup version that enforced the limits.
	Cgroup string `json:"cgroup"`
	// Rootless is true when the sandbox ran in a user namespace.
	Rootless bool `json:"rootless"`
}

// Phases are wall-clock phase durations in milliseconds.
type Phases struct {
	Plan  float64 `json:"plan"`
	Start float64 `json:"start"`
	Run   float64 `json:"run"`
}

// validateOCI checks the fields an OCI runtime sets (internal/oci).
func (s *Spec) validateOCI() error {
	if s.RootInPlace && s.RootFS == "" {
		return fmt.Errorf("%w: an in-place root needs a rootfs", ErrInvalidSpec)
	}
	if s.ReadOnlyRoot && !s.RootInPlace {
		return fmt.Errorf("%w: a read-only root is only for an in-place rootfs (tine's own roots are an overlay)", ErrInvalidSpec)
	}
	if s.Detach && len(s.Args) == 0 {
		return fmt.Errorf("%w: a detached sandbox needs a command", ErrInvalidSpec)
	}
	if s.Adopt < 0 || s.Adopt == 1 || s.Adopt > 0 && !s.Detach {
		return fmt.Errorf("%w: adopting process %d: want a pid above 1, for a detached sandbox", ErrInvalidSpec, s.Adopt)
	}
	if s.Detach && s.UserNS {
		return fmt.Errorf("%w: a detached sandbox in a user namespace is not supported", ErrInvalidSpec)
	}
	if s.CgroupPath != "" && (!path.IsAbs(s.CgroupPath) || path.Clean(s.CgroupPath) != s.CgroupPath || s.CgroupPath == "/") {
		return fmt.Errorf("%w: cgroup path %q: want a clean absolute path below the hierarchy's root, such as /default/c1", ErrInvalidSpec, s.CgroupPath)
	}
	for _, m := range s.Mounts {
		if m.Type != "tmpfs" && m.Type != "mqueue" {
			return fmt.Errorf("%w: mount of type %q at %s: only tmpfs and mqueue are mounted from a spec (tine makes /proc, /dev, /dev/pts, /dev/shm and /sys itself)", ErrInvalidSpec, m.Type, m.Target)
		}
		if !path.IsAbs(m.Target) || path.Clean(m.Target) == "/" {
			return fmt.Errorf("%w: mount target %q must be an absolute path below /", ErrInvalidSpec, m.Target)
		}
	}
	for _, p := range append(append([]string(nil), s.MaskedPaths...), s.ReadOnlyPaths...) {
		if !path.IsAbs(p) || path.Clean(p) == "/" {
			return fmt.Errorf("%w: masked or read-only path %q must be an absolute path below /", ErrInvalidSpec, p)
		}
	}
	if s.Capabilities != nil {
		if err := CheckCapabilities(s.Capabilities); err != nil {
			return err
		}
	}
	return NoNUL("oci fields", append([]string{s.CgroupPath}, append(s.MaskedPaths, s.ReadOnlyPaths...)...)...)
}

// CheckCapabilities checks a capability set for Spec.Capabilities: known
// names, within tine's default set.
func CheckCapabilities(list []string) error {
	want, err := caps.Mask(list)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	def, _ := caps.Mask(caps.Default)
	if extra := want &^ def; extra != 0 {
		return fmt.Errorf("%w: capabilities %v are beyond tine's default set (%s); a sandbox's set can only be narrowed", ErrInvalidSpec, caps.Names(extra), strings.Join(caps.Default, " "))
	}
	return nil
}
