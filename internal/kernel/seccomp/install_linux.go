package seccomp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install confines every thread of the calling process, and all it later
// forks and execs, to filter. It first sets no_new_privs, which the kernel
// requires of a loader without CAP_SYS_ADMIN and which also stops setuid
// binaries from gaining privileges inside the sandbox. An empty filter is an
// error rather than a silent "unconfined".
func Install(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return errors.New("install seccomp filter: empty program")
	}
	if len(filter) > unix.BPF_MAXINSNS {
		return fmt.Errorf("install seccomp filter: %d instructions, the kernel takes at most %d", len(filter), unix.BPF_MAXINSNS)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// TSYNC puts the filter on the Go runtime's other threads too.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter: thread %d could not be synchronized", r)
	}
	return nil
}
