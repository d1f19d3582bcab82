package inroot

import "errors"

// Sentinel errors. Every error a Root returns wraps at most one of them, so
// callers can map it with errors.Is (the daemon turns them into HTTP
// statuses). Errors the kernel reports that have no sentinel here (EACCES,
// EROFS, ENOSPC, ...) are wrapped as they are and still satisfy errors.Is
// against fs.ErrPermission and the like.
var (
	// ErrNotFound: the path, or a directory on the way to it, does not exist.
	ErrNotFound = errors.New("no such file or directory")
	// ErrExists: something already exists where a new file was to be made.
	ErrExists = errors.New("file exists")
	// ErrNotDir: a directory was needed and something else was found.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a non-directory was needed and a directory was found.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a directory to remove without recursion has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrTooLarge: more bytes than the caller's limit.
	ErrTooLarge = errors.New("too large")
	// ErrInvalidPath: an empty path, a NUL byte, a path or archive entry that
	// climbs above its root, a magic link, a symlink loop, or the root where
	// it cannot be used.
	ErrInvalidPath = errors.New("invalid path")
	// ErrNotRegular: a regular file was needed (a symlink, device, FIFO or
	// socket was found).
	ErrNotRegular = errors.New("not a regular file")
	// ErrUnsupported: the kernel or filesystem lacks what the operation
	// needs (openat2 before Linux 5.6), or an archive holds an entry type
	// that is refused (devices, FIFOs).
	ErrUnsupported = errors.New("unsupported")
)
