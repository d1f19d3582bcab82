//go:build linux && (!amd64 || cgo)

package sandbox

// serveResident serves from the resident buffers on the stack it has: no
// stack switch (assembly, amd64), or a cgo build, whose threads' stacks and
// thread-local storage are glibc's (PID 1 died unmapping them, seen in a
// test binary that linked cgo), so nothing is unmapped.
//
//go:nosplit
//go:norace
func serveResident(r *resident) { serve(&r.launch, &r.vfork) }

// unmapsItsCopy: whether PID 1 drops its copy of tine (tests).
const unmapsItsCopy = false
