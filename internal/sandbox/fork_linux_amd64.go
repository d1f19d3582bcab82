package sandbox

import "unsafe"

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
