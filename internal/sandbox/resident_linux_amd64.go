//go:build !cgo

package sandbox

import "unsafe"

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

// unmapsItsCopy: whether PID 1 drops its copy of tine (tests).
const unmapsItsCopy = true
