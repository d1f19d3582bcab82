package inroot

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Root is a directory that every path given to its methods stays beneath.
// It holds an O_PATH descriptor of the directory, so the directory stays
// reachable even if its host path goes away. Methods are safe for
// concurrent use; none may be called after Close.
type Root struct {
	fd  int
	dir string
}

// resolveInRoot is how every path is resolved: ".." and absolute symlinks
// stop at the root, and magic links (/proc/<pid>/root, /proc/self/fd/N,
// ...) are refused.
const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openRetries bounds the retries of an openat2 that fails with EAGAIN,
// which RESOLVE_IN_ROOT returns when a rename or mount raced with the walk.
const openRetries = 64

// Open opens dir as a root, e.g. "/proc/1234/root" for a sandbox whose
// PID 1 is 1234. The host path is resolved once, here; everything after is
// relative to the descriptor. It fails with ErrUnsupported where openat2 is
// unavailable, since nothing could then be confined.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, mapErrno(err))
	}
	probe, err := openat2(fd, ".", unix.O_PATH|unix.O_DIRECTORY, 0, 0)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("open root %s: openat2 is unavailable (needs Linux 5.6 or later, not blocked by seccomp): %w", dir, ErrUnsupported)
		}
		return nil, fmt.Errorf("open root %s: openat2: %w", dir, mapErrno(err))
	}
	unix.Close(probe)
	return &Root{fd: fd, dir: dir}, nil
}

// Close releases the root's descriptor.
func (r *Root) Close() error {
	if err := unix.Close(r.fd); err != nil {
		return fmt.Errorf("close root %s: %w", r.dir, err)
	}
	return nil
}

// OpenSocket returns an O_PATH descriptor of the unix socket at p, resolved
// inside the root; connecting to /proc/self/fd/N then reaches that socket
// and no other. Anything but a socket is refused.
func (r *Root) OpenSocket(p string) (int, error) {
	rel, err := clean(p)
	if err != nil {
		return -1, err
	}
	fd, err := r.open(rel, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", display(rel), mapErrno(err))
	}
	st, err := fstat(fd)
	if err != nil || !isType(&st, unix.S_IFSOCK) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w: not a socket", display(rel), ErrNotRegular)
	}
	return fd, nil
}

// open resolves a cleaned path inside the root.
func (r *Root) open(rel string, flags int) (int, error) {
	return openat2(r.fd, orDot(rel), flags, 0, 0)
}

// openParent resolves the directory holding a cleaned, non-root path and
// returns an O_PATH descriptor of it with the last element, which the
// caller uses only through *at calls that do not follow it.
//
// Changes happen in that directory, so one on a kernel interface
// filesystem is refused (see kernelFS).
func (r *Root) openParent(rel string) (int, string, error) {
	dir, base := split(rel)
	fd, err := openat2(r.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, 0)
	if err != nil {
		return -1, "", mapErrno(err)
	}
	if err := refuseKernelFS(fd); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, base, nil
}

// openat2 resolves name beneath dirfd as if dirfd were "/", with resolve
// added to resolveInRoot, retrying the EAGAIN and EINTR a racing rename or
// signal can cause.
func openat2(dirfd int, name string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveInRoot | resolve,
	}
	for range openRetries {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// kernelFilesystems are the filesystems whose files are kernel interfaces
// rather than data. The daemon holds host privileges the sandbox lacks
// (CAP_SYSLOG, CAP_SYS_RAWIO, ... and no LSM confinement), so reading
// /proc/kmsg or /proc/kcore, or making directories in a cgroup mount, on
// the sandbox's behalf would lend it those privileges. The file API
// refuses them; the sandbox's own processes can still use them with the
// sandbox's own privileges.
var kernelFilesystems = map[uint32]string{
	unix.PROC_SUPER_MAGIC:    "proc",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.BPF_FS_MAGIC:        "bpf",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.NSFS_MAGIC:          "nsfs",
}

// kernelFS names the kernel interface filesystem fd is on, or returns "".
func kernelFS(fd int) (string, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return "", fmt.Errorf("statfs: %w", err)
	}
	return kernelFilesystems[uint32(st.Type)], nil
}

// refuseKernelFS fails with ErrUnsupported if fd is on a kernel interface
// filesystem.
func refuseKernelFS(fd int) error {
	name, err := kernelFS(fd)
	if err != nil {
		return err
	}
	if name != "" {
		return fmt.Errorf("%w: on a kernel interface filesystem (%s); use a command inside the sandbox instead", ErrUnsupported, name)
	}
	return nil
}
