// Package policy owns what the sandbox's seccomp filter decides and how that
// becomes classic BPF: it resolves Docker's default seccomp profile
// (github.com/moby/profiles/seccomp, read as data) for caps.Default, derives
// the stricter variant (strict.go), translates either into a per-syscall
// decision table and lays that out as a BPF program for the native
// architecture (assemble.go). It uses github.com/elastic/go-seccomp-bpf only
// for its syscall name tables; docs/decisions/0003-seccomp-policy.md says why
// the assembler is our own.
//
// Compiling is the expensive half of package seccomp, and its dependencies
// (moby's profile, the OCI runtime spec, go-seccomp-bpf, x/net/bpf) cost
// package initialisation on every process start. So package seccomp links
// this package only on architectures without a program generated ahead of
// time; elsewhere only seccomp's tests import it, to generate those programs
// and to check that they are current.
package policy

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The modes Compile knows, by the names package seccomp gives them. This
// package cannot import seccomp's Mode: seccomp imports it.
const (
	// Default is Docker's default profile for caps.Default.
	Default = "default"
	// Strict is Default minus the calls listed in strict.go.
	Strict = "strict"
	// Zygote is Default plus what a warm function's request needs to wall
	// itself in (zygote.go).
	Zygote = "zygote"
	// Session is Default plus setns with an explicit namespace type, for a
	// forkable session's interpreter (session.go).
	Session = "session"
)

// Compile returns the filter for mode (Default or Strict) on the native
// architecture, ready to be passed to seccomp(SECCOMP_SET_MODE_FILTER) as a
// unix.SockFprog. It takes 0.2–0.4 ms and about 1 900 allocations.
func Compile(mode string) ([]unix.SockFilter, error) {
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

// profileFor is mode's profile: Docker's, with every mode's refusals of
// terminal injection, and the mode's own changes.
func profileFor(mode string) (*specs.LinuxSeccomp, error) {
	profile, err := dockerProfile()
	if err != nil {
		return nil, err
	}
	profile = refuseTerminalInjection(profile)
	switch mode {
	case Default:
	case Strict:
		profile = strict(profile)
	case Zygote:
		profile = zygote(profile)
	case Session:
		profile = session(profile)
	default:
		return nil, fmt.Errorf("compile seccomp mode %q: not %q, %q, %q or %q", mode, Default, Strict, Zygote, Session)
	}
	return profile, nil
}

func compile(mode string) (compiled, error) {
	profile, err := profileFor(mode)
	if err != nil {
		return compiled{}, err
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

// CompileProfile compiles a profile as given (an OCI config's) for the
// native architecture. Callers stack it on a mode's filter: the kernel
// applies both, the stricter verdict winning.
func CompileProfile(profile *specs.LinuxSeccomp) ([]unix.SockFilter, error) {
	if profile.ListenerPath != "" || len(profile.Flags) > 0 {
		return nil, fmt.Errorf("seccomp profile: flags %v and a listener path (user notification) are not supported", profile.Flags)
	}
	a, err := nativeArch()
	if err != nil {
		return nil, err
	}
	p, err := translate(profile, a)
	if err != nil {
		return nil, fmt.Errorf("translate the seccomp profile: %w", err)
	}
	prog, err := assemble(p, a)
	if err != nil {
		return nil, fmt.Errorf("assemble the seccomp profile: %w", err)
	}
	return toSockFilter(prog)
}
