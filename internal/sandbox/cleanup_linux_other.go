//go:build linux && !amd64

package sandbox

import "syscall"

// forkCleanup starts the cleanup process: a plain fork (a copy of this
// process) where there is no CLONE_VM trampoline.
//
//go:nosplit
//go:norace
func forkCleanup(top uintptr, c *cleanupProgram) uintptr {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return uintptr(e)
	}
	if pid == 0 {
		cleanupMain(c)
	}
	return 0
}
