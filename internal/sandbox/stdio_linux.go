package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// stdioNames name the command's descriptors in errors.
var stdioNames = [3]string{"stdin", "stdout", "stderr"}

// checkStdio refuses a stdio descriptor that is a handle on the host's
// filesystem or kernel objects rather than a stream: a directory or an
// O_PATH descriptor (through /proc/self/fd/N the command would open any
// host file beneath it — /proc/self/fd/0/etc/shadow — past the new root
// and the mount namespace), a namespace file (setns into the host's
// namespaces) or a pidfd (signals to a host process). Files, pipes,
// sockets, terminals and other devices are what a redirect gives, and
// pass: they reach only what the caller handed over.
func checkStdio(fds [3]int) error {
	for i, fd := range fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return fmt.Errorf("%w: %s (descriptor %d): %v", ErrInvalidSpec, stdioNames[i], fd, err)
		}
		var st unix.Stat_t
		var sfs unix.Statfs_t
		unix.Fstat(fd, &st)
		unix.Fstatfs(fd, &sfs)
		opens := fmt.Sprintf("open the host's files beneath it through /proc/self/fd/%d/...", i)
		var what, risk string
		switch {
		case flags&unix.O_PATH != 0:
			what, risk = "an O_PATH descriptor", opens
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			what, risk = "a directory", opens
		case sfs.Type == unix.NSFS_MAGIC:
			what, risk = "a namespace", "enter it"
		case sfs.Type == unix.PID_FS_MAGIC || sfs.Type == unix.ANON_INODE_FS_MAGIC && isAnonPidfd(fd):
			what, risk = "a pidfd", "signal a host process"
		default:
			continue
		}
		name, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		return fmt.Errorf("%w: %s is %s (%s): a sandboxed command could %s; redirect it from a file, a pipe or /dev/null", ErrInvalidSpec, stdioNames[i], what, name, risk)
	}
	return nil
}

// isAnonPidfd recognizes a pidfd on kernels before pidfs (6.9), where it
// is an anonymous inode named anon_inode:[pidfd].
func isAnonPidfd(fd int) bool {
	name, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return err == nil && name == "anon_inode:[pidfd]"
}
