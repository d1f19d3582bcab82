//go:build linux && !amd64

package sandbox

import "syscall"

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
