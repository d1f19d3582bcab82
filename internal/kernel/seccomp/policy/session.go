package policy

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Session mode is Default plus setns with an explicit namespace type, for
// the interpreter of a forkable code-interpreter session: each forked copy
// joins the namespaces of a child sandbox the daemon made ahead (a user
// namespace owned by root, which is what gives the copy the right to join),
// then loads Default on top (filters stack; the strictest answer wins), so
// the copy's user code never has setns. Nothing else is added: no unshare,
// no mount, no clone with namespace flags.
// docs/decisions/0013-code-interpreter-sessions.md.

// sessionSetnsTypes are the nstype values setns may carry, one at a time
// (0, "any type", is refused: the type says what the copy means to join).
var sessionSetnsTypes = []uint64{
	unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWIPC, unix.CLONE_NEWUTS,
	unix.CLONE_NEWNET, unix.CLONE_NEWPID, unix.CLONE_NEWCGROUP,
}

func session(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *p
	out.Syscalls = append([]specs.LinuxSyscall(nil), p.Syscalls...)
	for _, t := range sessionSetnsTypes {
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
			Names:  []string{"setns"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: t}},
		})
	}
	return &out
}
