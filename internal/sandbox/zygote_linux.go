package sandbox

import (
	"fmt"
	"unsafe"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/landlock"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"golang.org/x/sys/unix"
)

// RequestWalls are the walls a process forked inside a zygote sandbox
// (Spec.Zygote) puts up around itself before it runs user code: the same
// a launched command gets from PID 1 in any other sandbox, applied by the
// request itself after it has mounted its private /tmp.
type RequestWalls struct {
	// Landlock is the ruleset to create (nil when the kernel has none).
	Landlock *LandlockRuleset `json:"landlock,omitempty"`
	// Seccomp is the filter to load on top of the zygote's, as raw struct
	// sock_filter entries (8 bytes each); empty for an unconfined sandbox.
	Seccomp []byte `json:"seccomp"`
	// KeepCaps is the capability set to keep (bit N: capability N).
	KeepCaps uint64 `json:"keep_caps"`
	// DropCaps are the capabilities to drop from the bounding set.
	DropCaps []int `json:"drop_caps"`
	// Syscalls are this architecture's numbers of the calls the request
	// makes through libc's syscall().
	Syscalls map[string]uintptr `json:"syscalls"`
}

// LandlockRuleset describes a ruleset in the kernel's terms.
type LandlockRuleset struct {
	// Attr is struct landlock_ruleset_attr, sized for the host's ABI.
	Attr []byte `json:"attr"`
	// Rules are path-beneath rules: sandbox paths and their rights.
	Rules []LandlockRule `json:"rules"`
}

// LandlockRule grants Rights beneath Path.
type LandlockRule struct {
	Path   string `json:"path"`
	Rights uint64 `json:"rights"`
}

// RequestWalls returns the walls for requests forked in this sandbox.
func (sb *Sandbox) RequestWalls() (*RequestWalls, error) {
	if !sb.plan.Spec.Zygote {
		return nil, fmt.Errorf("%w: not a zygote sandbox", ErrInvalidSpec)
	}
	// Default stacked on Zygote is Zygote undone; Strict is loaded whole.
	filter := seccomp.UndoZygote()
	if mode := sb.plan.Spec.Seccomp; mode != seccomp.Default {
		var err error
		if filter, err = seccomp.Program(mode); err != nil {
			return nil, err
		}
	}
	w := &RequestWalls{KeepCaps: sb.h.keepCaps, DropCaps: sb.h.dropCaps}
	if len(filter) > 0 {
		w.Seccomp = unsafe.Slice((*byte)(unsafe.Pointer(&filter[0])), len(filter)*int(unsafe.Sizeof(unix.SockFilter{})))
	}
	// Requests of one function share the sandbox for its whole life: what
	// one wrote to the root (a module, a .pyc) another would run. So a
	// request writes nowhere but its own /tmp and /dev/shm (fresh tmpfs
	// mounts of its mount namespace) and the device nodes; and Landlock's
	// signal and abstract-socket scoping (ABI 6) is what keeps it from the
	// zygote and its siblings, all uid 0 in one user namespace.
	abi := sb.h.landlockABI
	if abi < 6 {
		return nil, fmt.Errorf("%w: warm functions need Landlock ABI 6 or later (Linux 6.12) so that a request cannot signal the zygote or another request; this kernel has ABI %d", ErrUnsupported, abi)
	}
	w.Landlock = &LandlockRuleset{Attr: landlock.RulesetAttr(abi), Rules: []LandlockRule{
		{Path: "/tmp", Rights: landlock.Supported(landlock.Writable, abi)},
		{Path: "/dev/shm", Rights: landlock.Supported(landlock.Writable, abi)},
		{Path: "/dev", Rights: landlock.Supported(landlock.FileWrite, abi)},
	}}
	w.Syscalls = map[string]uintptr{
		"capset": unix.SYS_CAPSET, "seccomp": unix.SYS_SECCOMP,
		"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET,
		"landlock_add_rule":       unix.SYS_LANDLOCK_ADD_RULE,
		"landlock_restrict_self":  unix.SYS_LANDLOCK_RESTRICT_SELF,
	}
	return w, nil
}

// RequestGroup creates a cgroup for one request inside the sandbox's own,
// with the request's limits; the request's process admits itself through
// the group's JoinFiles. The caller kills and removes it afterwards.
func (sb *Sandbox) RequestGroup(name string, lim cgroup.Limits) (*cgroup.Group, error) {
	release, err := sb.use()
	if err != nil {
		return nil, err
	}
	defer release()
	if sb.init.group == nil {
		return nil, fmt.Errorf("%w: per-request limits need the sandbox's cgroup, which tine drives only as root", ErrRootlessOnly)
	}
	return sb.init.group.Child(name, lim)
}
