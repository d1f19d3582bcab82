package sandbox

// cloneCleanup is in cleanup_linux_amd64.s.
//
//go:noescape
func cloneCleanup(stackTop uintptr, c *cleanupProgram) (errno uintptr)

// forkCleanup starts the cleanup process: on amd64 a clone that shares
// this process's memory (CLONE_VM, no CLONE_VFORK) onto the stack at the
// top of the program's mapping, so the fork copies no page tables and the
// caller's exit leaves the unmapping of its memory to the child's. The
// child touches nothing but that mapping.
//
//go:nosplit
//go:norace
func forkCleanup(top uintptr, c *cleanupProgram) uintptr {
	return cloneCleanup(top, c)
}
