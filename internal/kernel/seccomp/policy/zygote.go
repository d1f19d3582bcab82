package policy

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Zygote mode is Default plus what a warm function's forked request needs
// to build its own walls before user code runs: unshare of a user, a mount,
// an IPC and a network namespace (nothing else), and mount/umount2 for its
// private /tmp.
// Outside a user namespace of its own the process lacks CAP_SYS_ADMIN, so
// mount stays refused by the kernel; inside one, every mount it inherited
// is locked. Each request then loads Default on top (filters stack; the
// strictest answer wins), so user code in a request never has these calls.
// The zygote itself runs this mode: docs/decisions/0007-warm-functions.md.

// zygoteUnshareFlags are the only flags unshare may carry.
const zygoteUnshareFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET

func zygote(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *p
	out.Syscalls = append(append([]specs.LinuxSyscall(nil), p.Syscalls...),
		specs.LinuxSyscall{
			Names:  []string{"unshare"},
			Action: specs.ActAllow,
			// (flags & ~allowed) == 0.
			Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: ^uint64(zygoteUnshareFlags), ValueTwo: 0}},
		},
		specs.LinuxSyscall{Names: []string{"mount", "umount2"}, Action: specs.ActAllow},
	)
	return &out
}
