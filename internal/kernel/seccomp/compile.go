// This file's constraint excludes exactly the architectures that have a
// zprogram_linux_GOARCH.go: after go generate adds one, add it here too (the
// build fails with "program redeclared" until then).

//go:build !(linux && amd64)

package seccomp

import (
	"github.com/tine-run/tine/internal/kernel/seccomp/policy"
	"golang.org/x/sys/unix"
)

// program compiles mode's filter: this architecture has no program generated
// ahead of time. It costs 0.2–0.4 ms per call, and linking package policy costs
// about 0.25 ms of package initialisation per process start.
func program(mode Mode) ([]unix.SockFilter, error) {
	return policy.Compile(string(mode))
}
