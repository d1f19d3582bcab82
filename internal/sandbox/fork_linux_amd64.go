package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneVM is in fork_linux_amd64.s.
//
//go:noescape
func cloneVM(stackTop uintptr, a *vforkArgs) (pid uintptr, errno uintptr)

// forkCommand forks the process that execs a command: on amd64 a vfork
// onto a stack of the program's own (see cloneVM), so the fork does not
// copy the page tables of a process that is a copy of tine.
//
//go:nosplit
//go:norace
func forkCommand(a *vforkArgs) (pid, errno uintptr) {
	top := uintptr(unsafe.Pointer(&a.stack[len(a.stack)-64])) &^ 15
	return cloneVM(top, a)
}

//go:noescape
func clone3VM(args *cloneArgs, size uintptr, a *vforkArgs) (pid uintptr, errno uintptr)

// cloneSandbox clones a sandbox's first process (PID 1, or an exec's
// reaper) with clone3. On amd64 it shares tine's memory (CLONE_VM) and runs
// on a stack of the program's own, so nothing is copied: the program and
// everything it points at must stay alive until that process is gone (the
// Process holds it), and the child writes only into the program.
func cloneSandbox(args *cloneArgs, pg *program) (uintptr, syscall.Errno) {
	args.flags |= unix.CLONE_VM
	args.stack = uint64(uintptr(unsafe.Pointer(&pg.boot.stack[0])))
	args.stackSize = uint64(len(pg.boot.stack))
	pid, errno := clone3VM(args, unsafe.Sizeof(*args), &pg.boot)
	return pid, syscall.Errno(errno)
}
