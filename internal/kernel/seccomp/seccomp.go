// Package seccomp owns the sandbox's system call policy: it turns Docker's
// default seccomp profile (github.com/moby/profiles/seccomp, read as data)
// into a classic BPF program for the native architecture, offers a stricter
// variant of it, and installs a program on the calling process.
//
// The program is assembled here rather than by github.com/elastic/go-seccomp-bpf,
// whose syscall tables it still uses; docs/decisions/0003-seccomp-policy.md
// says why.
package seccomp

//go:generate go test -run ^TestGeneratedProgramsAreCurrent$ -update

import (
	"fmt"
	"slices"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Mode selects how much of the kernel a sandbox may call.
type Mode string

const (
	// Default is Docker's default profile for DefaultCapabilities.
	Default Mode = "default"
	// Strict is Default minus the calls listed in strict.go.
	Strict Mode = "strict"
	// Unconfined installs no filter.
	Unconfined Mode = "unconfined"
)

// DefaultCapabilities is Docker's default capability set. The sandbox keeps
// exactly these, and the profile allows some calls only to holders of certain
// capabilities, so the filter is compiled for this list.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Default, Strict, Unconfined:
		return m, nil
	}
	return "", fmt.Errorf("%w %q: use %q, %q or %q", ErrUnknownMode, s, Default, Strict, Unconfined)
}

// generated holds programs compiled ahead of time by go generate, for the
// architectures that have a zprogram_linux_GOARCH.go. Compiling takes about
// 0.4 ms, too much for the start path of every sandbox; a test keeps these
// in step with the libraries.
var generated map[Mode][]unix.SockFilter

// Program returns the filter for mode on the native architecture, ready to
// be passed to seccomp(SECCOMP_SET_MODE_FILTER) as a unix.SockFprog (see
// Install); nil for Unconfined. Each call returns a fresh slice.
func Program(mode Mode) ([]unix.SockFilter, error) {
	if mode == Unconfined {
		return nil, nil
	}
	if prog, ok := generated[mode]; ok {
		return slices.Clone(prog), nil
	}
	c, err := compile(mode)
	if err != nil {
		return nil, err
	}
	return toSockFilter(c.program)
}

// compiled is a mode's program and what was left out of it on the way.
type compiled struct {
	program []bpf.Instruction
	// skipped lists the profile's syscall names this architecture does not
	// have (other ABIs' calls such as "stat64" or "socketcall").
	skipped []string
}

func compile(mode Mode) (compiled, error) {
	profile, err := dockerProfile()
	if err != nil {
		return compiled{}, err
	}
	switch mode {
	case Default:
	case Strict:
		profile = strict(profile)
	default:
		return compiled{}, fmt.Errorf("compile %q: %w", mode, ErrUnknownMode)
	}
	a, err := nativeArch()
	if err != nil {
		return compiled{}, err
	}
	p, err := translate(profile, a)
	if err != nil {
		return compiled{}, fmt.Errorf("translate %s seccomp profile: %w", mode, err)
	}
	prog, err := assemble(p, a)
	if err != nil {
		return compiled{}, fmt.Errorf("assemble %s seccomp profile: %w", mode, err)
	}
	return compiled{program: prog, skipped: p.skipped}, nil
}

func toSockFilter(prog []bpf.Instruction) ([]unix.SockFilter, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("encode seccomp program: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}
