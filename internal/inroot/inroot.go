// Package inroot owns file operations confined beneath a root directory: the
// daemon's file API for live sandboxes, where the root is the sandbox's
// /proc/<pid>/root and every path comes from a client.
//
// Every path is resolved by the kernel with openat2(2) and
// RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS relative to the root's descriptor:
// ".." and absolute symlinks stop at the root, and magic links such as
// /proc/self/root are refused. The work then happens on the resulting
// descriptors (fstat, fchmod, fchown, getdents) or, for a final component,
// through *at calls that never follow it (mkdirat, unlinkat, renameat,
// symlinkat, linkat, fstatat with AT_SYMLINK_NOFOLLOW) relative to a parent
// directory descriptor obtained the same way. No path string is resolved
// against the host, so neither a crafted path nor a symlink swapped in by a
// racing sandbox process can make a read or a write land outside the root.
//
// Client paths are slash-separated and relative to the root. A leading "/"
// is allowed and ignored ("/etc/hosts" and "etc/hosts" name the same file);
// a path that climbs above the root ("../x", "/../x") is refused with
// ErrInvalidPath rather than clamped.
//
// Confinement is not the only guard: the daemon holds host privileges the
// sandbox lacks, so files on kernel interface filesystems (/proc, /sys,
// cgroup mounts, ...) inside a root are not read, archived or changed
// through this package, devices and FIFOs are never opened, and recursive
// removal does not descend into other mounts.
package inroot

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// Info describes one file, as lstat(2) sees it.
type Info struct {
	Path    string    // cleaned, slash-separated, from the root: "/etc/hosts"; "/" for the root
	Name    string    // last element of Path
	Type    string    // "file", "dir", "symlink" or "other"
	Size    int64     // bytes
	Mode    uint32    // permission bits plus setuid, setgid and sticky (07777)
	ModTime time.Time // modification time
	UID     int       // owner, as stored on disk
	GID     int       // group, as stored on disk
	Link    string    // symlink target, as stored; empty unless Type is "symlink"
}

// File types reported in Info.Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// clean turns a client path into a slash-separated path relative to the
// root, "" naming the root itself. It refuses empty paths, NUL bytes and
// paths that climb above the root.
func clean(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: empty path", ErrInvalidPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: contains a NUL byte", ErrInvalidPath)
	}
	rel := path.Clean(strings.TrimLeft(p, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: climbs above the root", ErrInvalidPath)
	}
	if rel == "." {
		return "", nil
	}
	return rel, nil
}

// split splits a cleaned, non-root path into its directory ("." for the
// root) and its last element, which never contains "/" and is never "." or
// "..".
func split(rel string) (dir, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// orDot returns rel, or "." for the root: the name openat2 resolves.
func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// display renders a cleaned path the way Info.Path does.
func display(rel string) string {
	return "/" + rel
}
