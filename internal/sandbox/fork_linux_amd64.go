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

// enterResident is in resident_linux_amd64.s.
//
//go:noescape
func enterResident(stackTop, tls uintptr, r *resident)

// serveResident runs a live sandbox's PID 1 from its resident memory, on
// its own stack, having unmapped the rest of its copy of tine.
//
//go:nosplit
//go:norace
func serveResident(r *resident) {
	top := uintptr(unsafe.Pointer(&r.stack[len(r.stack)-64])) &^ 15
	// g is read at FS-8: the middle of tls.
	enterResident(top, uintptr(unsafe.Pointer(&r.tls[len(r.tls)/2])), r)
}
