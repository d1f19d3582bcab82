// Package landlock computes a sandbox's Landlock write rules — the second
// wall behind read-only mounts — and creates the ruleset in the parent.
//
// The sandbox's child side adds the path rules and restricts itself with raw
// syscalls (it runs between clone and exec, where the Go runtime is not
// usable), so this package hands out plain data: rights masks, the rule list
// and a ruleset fd. Reads are not handled; writes, node creation, removal,
// renames across directories and truncation are, and are granted only
// beneath the sandbox's writable paths. Device nodes can be created nowhere.
package landlock

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filesystem access rights (include/uapi/linux/landlock.h).
const (
	WriteFile  uint64 = 1 << 1
	RemoveDir  uint64 = 1 << 4
	RemoveFile uint64 = 1 << 5
	MakeChar   uint64 = 1 << 6
	MakeDir    uint64 = 1 << 7
	MakeReg    uint64 = 1 << 8
	MakeSock   uint64 = 1 << 9
	MakeFifo   uint64 = 1 << 10
	MakeBlock  uint64 = 1 << 11
	MakeSym    uint64 = 1 << 12
	Refer      uint64 = 1 << 13 // ABI 2
	Truncate   uint64 = 1 << 14 // ABI 3

	scopeAbstractUnixSocket uint64 = 1 << 0 // ABI 6
	scopeSignal             uint64 = 1 << 1 // ABI 6
)

// Write is every write-side right tine handles.
const Write = WriteFile | RemoveDir | RemoveFile | MakeChar | MakeDir | MakeReg |
	MakeSock | MakeFifo | MakeBlock | MakeSym | Refer | Truncate

// Writable is what a writable path grants: everything but device nodes.
const Writable = Write &^ (MakeChar | MakeBlock)

// FileWrite is what a writable non-directory grants (Landlock refuses
// directory rights on files), and what /dev grants: writing to the nodes
// that are there.
const FileWrite = WriteFile | Truncate

// ABI returns the kernel's Landlock ABI version, 0 if Landlock is off.
func ABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// Supported masks rights down to what ABI abi knows.
func Supported(rights uint64, abi int) uint64 {
	if abi < 2 {
		rights &^= Refer
	}
	if abi < 3 {
		rights &^= Truncate
	}
	return rights
}

// Rule grants Rights beneath Path (a path inside the sandbox's root).
type Rule struct {
	Path   string
	Rights uint64
}

// Entry is a directory entry as the sandbox will see it.
type Entry struct {
	Name string
	Dir  bool
}

// Rules computes the write rules for a sandbox whose writable trees are
// writable (absolute sandbox paths) and whose read-only subtrees are
// readOnly (each inside some writable tree, e.g. a read-only bind).
// Landlock grants a right on a directory to everything beneath it, so a
// writable tree that contains a read-only one is granted child by child,
// skipping the read-only entry: children(dir) must list a directory's
// entries as the sandbox will see them.
func Rules(writable, readOnly []string, children func(dir string) []Entry) []Rule {
	var rules []Rule
	for _, w := range writable {
		rules = append(rules, grant(path.Clean(w), true, readOnly, children)...)
	}
	sort.Slice(rules, func(i, j int) bool { return rules[i].Path < rules[j].Path })
	return rules
}

func grant(p string, isDir bool, readOnly []string, children func(string) []Entry) []Rule {
	inside := false
	for _, r := range readOnly {
		r = path.Clean(r)
		if r == p {
			return nil
		}
		if isBeneath(r, p) {
			inside = true
		}
	}
	if !isDir {
		return []Rule{{Path: p, Rights: FileWrite}}
	}
	if !inside {
		return []Rule{{Path: p, Rights: Writable}}
	}
	var rules []Rule
	for _, e := range children(p) {
		rules = append(rules, grant(path.Join(p, e.Name), e.Dir, readOnly, children)...)
	}
	return rules
}

// isBeneath reports whether p lies strictly beneath dir.
func isBeneath(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

// rulesetAttr is struct landlock_ruleset_attr (ABI 6 size).
type rulesetAttr struct {
	handledFS  uint64
	handledNet uint64
	scoped     uint64
}

// PathBeneathAttr is struct landlock_path_beneath_attr; the child side fills
// ParentFd with an O_PATH descriptor of the rule's path.
type PathBeneathAttr struct {
	Allowed  uint64
	ParentFd int32
}

// RuleTypePathBeneath is LANDLOCK_RULE_PATH_BENEATH.
const RuleTypePathBeneath = 1

// NewRuleset creates a ruleset handling the write rights and returns its
// fd, close-on-exec. The caller adds rules and restricts itself. It scopes
// nothing: a live sandbox's processes are one tenant, kept from other
// sandboxes by their pid and network namespaces, and criu's parasite must
// reach criu's abstract socket from inside the domain (ADR 0016). Warm
// function requests, which share one sandbox, scope (RulesetAttr).
func NewRuleset(abi int) (int, error) {
	attr := attrBytes(abi, false)
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)), 0)
	if errno != 0 {
		return -1, fmt.Errorf("create landlock ruleset (ABI %d): %w", abi, errno)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// RulesetAttr returns struct landlock_ruleset_attr as bytes, sized for ABI
// abi (older kernels refuse a larger struct with nonzero tail), for a
// process that creates its ruleset itself: the write rights and, from ABI
// 6, signals and abstract unix sockets scoped to the domain.
func RulesetAttr(abi int) []byte { return attrBytes(abi, true) }

// UnscopedRulesetAttr is RulesetAttr without the scoping: the ruleset
// NewRuleset makes, for a process that creates it itself (a live fork's
// copy, walled in as an exec).
func UnscopedRulesetAttr(abi int) []byte { return attrBytes(abi, false) }

// SignalScopeAttr is a ruleset that handles no access and scopes signals
// only (nil before ABI 6, which has no scoping): a layer that walls a
// process off from processes outside its domain, for ptrace and /proc as
// every domain does, and for signals, and nothing else. A live fork's
// parent interpreter puts one up after each fork, so that the copies,
// forked before it, are outside its domain (ADR 0013). Abstract sockets
// stay unscoped: they are per network namespace, and the children have
// their own.
func SignalScopeAttr(abi int) []byte {
	if abi < 6 {
		return nil
	}
	attr := rulesetAttr{scoped: scopeSignal}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))...)
}

func attrBytes(abi int, scoped bool) []byte {
	attr := rulesetAttr{handledFS: Supported(Write, abi)}
	size := unsafe.Sizeof(uint64(0))
	if abi >= 4 {
		size = 2 * unsafe.Sizeof(uint64(0))
	}
	if abi >= 6 && scoped {
		attr.scoped = scopeAbstractUnixSocket | scopeSignal
		size = unsafe.Sizeof(attr)
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&attr)), size)...)
}
