package policy

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/elastic/go-seccomp-bpf/arch"
	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/tine-run/tine/internal/kernel/caps"
	"golang.org/x/sys/unix"
)

// dockerProfile resolves Docker's default profile for caps.Default on
// this host. Rules in it depend on capabilities, on the architecture and, for
// ptrace and process_vm_*, on the kernel being at least 4.8.
func dockerProfile() (*specs.LinuxSeccomp, error) {
	spec := &specs.Spec{Process: &specs.Process{
		Capabilities: &specs.LinuxCapabilities{Bounding: caps.Default},
	}}
	p, err := moby.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("resolve docker's default seccomp profile: %w", err)
	}
	return p, nil
}

// nativeArch is the architecture the program is for: the one this binary
// runs as. Other ABIs the kernel offers (i386 on x86_64, arm on arm64) are
// refused whole by the program's first instructions.
func nativeArch() (*arch.Info, error) {
	a, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp on %s: %w", runtime.GOARCH, err)
	}
	return a, nil
}

// table is what the filter decides, per syscall number, before assembly.
type table struct {
	defaultAction uint32 // for syscalls that no rule names
	syscalls      map[uint32]*decision
	skipped       []string // profile names this architecture does not have
}

// decision is the policy for one syscall: the first rule whose conditions
// all hold gives the action; when none does, fallback does.
type decision struct {
	rules    []rule
	fallback uint32
}

type rule struct {
	conds  []cond // all must hold
	action uint32
}

// cond compares one 64-bit syscall argument, as libseccomp does: unsigned,
// and for SCMP_CMP_MASKED_EQ as arg&value == valueTwo.
type cond struct {
	arg      uint32
	op       specs.LinuxSeccompOperator
	value    uint64
	valueTwo uint64
}

// translate turns an OCI seccomp profile into a decision table for architecture a.
//
// Rules naming the same syscall combine so that the specific beats the
// general: the argument-filtered rules are tried first, in profile order, and
// an unconditional rule's action (else the default) applies when none of them
// matches. So a specific ERRNO rule refuses its case of a syscall that is
// otherwise allowed, whichever comes first in the profile.
func translate(profile *specs.LinuxSeccomp, a *arch.Info) (table, error) {
	defaultAction, err := action(profile.DefaultAction, profile.DefaultErrnoRet)
	if err != nil {
		return table{}, fmt.Errorf("default action: %w", err)
	}
	p := table{defaultAction: defaultAction, syscalls: map[uint32]*decision{}}
	unconditional := map[uint32]uint32{}
	for _, s := range profile.Syscalls {
		act, err := action(s.Action, s.ErrnoRet)
		if err != nil {
			return table{}, fmt.Errorf("rule for %s: %w", strings.Join(s.Names, ","), err)
		}
		var condSets [][]cond
		for _, args := range splitRepeatedArgs(s.Args) {
			conds, err := conditions(args)
			if err != nil {
				return table{}, fmt.Errorf("rule for %s: %w", strings.Join(s.Names, ","), err)
			}
			condSets = append(condSets, conds)
		}
		for _, name := range s.Names {
			num, ok := a.SyscallNames[name]
			if !ok {
				if !slices.Contains(p.skipped, name) {
					p.skipped = append(p.skipped, name)
				}
				continue
			}
			nr := uint32(num)
			d := p.syscalls[nr]
			if d == nil {
				d = &decision{fallback: defaultAction}
				p.syscalls[nr] = d
			}
			if len(condSets[0]) > 0 {
				for _, conds := range condSets {
					d.rules = append(d.rules, rule{conds: conds, action: act})
				}
				continue
			}
			if prev, ok := unconditional[nr]; ok && prev != act {
				return table{}, fmt.Errorf("%s has two unconditional actions: %#x and %#x", name, prev, act)
			}
			unconditional[nr] = act
			d.fallback = act
		}
	}
	for _, d := range p.syscalls {
		// A rule that gives the fallback anyway matters only where it
		// overlaps a rule with another verdict, and there the other, more
		// specific one should win. Without rules, the kernel can also cache
		// the syscall's verdict.
		d.rules = slices.DeleteFunc(d.rules, func(r rule) bool { return r.action == d.fallback })
	}
	slices.Sort(p.skipped)
	return p, nil
}

// action encodes an OCI action as a seccomp return value.
func action(act specs.LinuxSeccompAction, errnoRet *uint) (uint32, error) {
	switch act {
	case specs.ActAllow:
		return unix.SECCOMP_RET_ALLOW, nil
	case specs.ActErrno:
		errno := uint(unix.EPERM)
		if errnoRet != nil {
			errno = *errnoRet
		}
		if errno > unix.SECCOMP_RET_DATA {
			return 0, fmt.Errorf("errno %d does not fit a seccomp return value", errno)
		}
		return unix.SECCOMP_RET_ERRNO | uint32(errno), nil
	case specs.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS, nil
	case specs.ActKill, specs.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD, nil
	case specs.ActTrap:
		return unix.SECCOMP_RET_TRAP, nil
	case specs.ActLog:
		return unix.SECCOMP_RET_LOG, nil
	}
	return 0, fmt.Errorf("action %s is not supported", act)
}

// conditions checks an OCI rule's argument comparisons, which all must hold.
func conditions(args []specs.LinuxSeccompArg) ([]cond, error) {
	var compared [6]bool
	conds := make([]cond, 0, len(args))
	for _, a := range args {
		if a.Index >= uint(len(compared)) {
			return nil, fmt.Errorf("argument index %d out of range", a.Index)
		}
		// (splitRepeatedArgs made rules that compare one twice several.)
		if compared[a.Index] {
			return nil, fmt.Errorf("argument %d compared twice", a.Index)
		}
		compared[a.Index] = true
		switch a.Op {
		case specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
			specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual:
		default:
			return nil, fmt.Errorf("comparison %s is not supported", a.Op)
		}
		conds = append(conds, cond{arg: uint32(a.Index), op: a.Op, value: a.Value, valueTwo: a.ValueTwo})
	}
	return conds, nil
}

// splitRepeatedArgs is runc's reading of a rule that compares one argument
// more than once (old Docker profiles have them, for personality): one
// rule per comparison, any of which may match (OR), where libseccomp would
// AND them. A rule without repeats stays one.
func splitRepeatedArgs(args []specs.LinuxSeccompArg) [][]specs.LinuxSeccompArg {
	seen := map[uint]bool{}
	repeated := false
	for _, a := range args {
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
	}
	if !repeated {
		return [][]specs.LinuxSeccompArg{args}
	}
	out := make([][]specs.LinuxSeccompArg, len(args))
	for i, a := range args {
		out[i] = []specs.LinuxSeccompArg{a}
	}
	return out
}
