// Package seccomp owns the sandbox's seccomp modes and hands out each mode's
// classic BPF program for the native architecture. Loading the program is the
// sandbox's child's job.
//
// The programs come from package policy (Docker's default profile, a stricter
// variant of it, and our own BPF layout). Compiling one takes 0.2–0.4 ms,
// and policy's dependencies cost package initialisation on every start of
// tine, so where a zprogram_linux_GOARCH.go exists the programs are compiled
// ahead of time and policy is not linked at all; compile.go, for the other
// architectures, compiles at run time. docs/decisions/0003-seccomp-policy.md
// says why.
package seccomp

//go:generate go test -run ^TestGeneratedProgramsAreCurrent$ -update

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Mode selects how much of the kernel a sandbox may call.
type Mode string

const (
	// Default is Docker's default profile for caps.Default.
	Default Mode = "default"
	// Strict is Default minus the calls listed in policy/strict.go.
	Strict Mode = "strict"
	// Unconfined installs no filter.
	Unconfined Mode = "unconfined"
	// Zygote is Default plus unshare(CLONE_NEWUSER|CLONE_NEWNS) and mount,
	// for a warm function's zygote, whose forked requests wall themselves
	// in and load Default on top. Not a user-selectable mode.
	Zygote Mode = "zygote"
	// Session is Default plus setns with an explicit namespace type, for
	// the interpreter of a forkable code-interpreter session, whose forked
	// copies join child sandboxes and load Default on top. Not a
	// user-selectable mode.
	Session Mode = "session"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Default, Strict, Unconfined:
		return m, nil
	}
	return "", fmt.Errorf("%w %q: use %q, %q or %q", ErrUnknownMode, s, Default, Strict, Unconfined)
}

// Program returns the filter for mode on the native architecture, ready to
// be passed to seccomp(SECCOMP_SET_MODE_FILTER) as a unix.SockFprog; nil for
// Unconfined. Each call returns a fresh slice.
func Program(mode Mode) ([]unix.SockFilter, error) {
	switch mode {
	case Unconfined:
		return nil, nil
	case Default, Strict, Zygote, Session:
		return program(mode)
	}
	return nil, fmt.Errorf("seccomp program %q: %w", mode, ErrUnknownMode)
}
