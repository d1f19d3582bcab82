//go:build linux && !amd64

package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forkCommand forks the process that execs a command (a plain fork where
// there is no vfork trampoline).
//
//go:nosplit
//go:norace
func forkCommand(a *vforkArgs) (pid, errno uintptr) {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, uintptr(e)
	}
	if pid == 0 {
		vforkChild(a)
	}
	return pid, 0
}

// cloneSandbox clones a sandbox's first process with clone3 (a copy of
// tine's memory where there is no CLONE_VM trampoline).
func cloneSandbox(args *cloneArgs, pg *program) (uintptr, syscall.Errno) {
	r, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if errno == 0 && r == 0 {
		childMain(pg) // the child: never returns
	}
	return r, errno
}
