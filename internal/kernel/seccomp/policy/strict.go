package policy

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Strict mode refuses, on top of Docker's default profile, the calls below.
// Each is allowed by Default (a test checks it), so none of them is dead.
// Docker's profile already refuses, for these capabilities: bpf,
// perf_event_open, userfaultfd, keyctl/add_key/request_key, io_uring_*, kcmp,
// mount and the new mount API, unshare, setns, clone with namespace flags,
// and clone3 (ENOSYS, so libc falls back to clone).

// strictRefused are syscalls strict refuses whatever their arguments.
var strictRefused = []string{
	// Reading and writing other processes' memory and registers: debuggers
	// and strace stop working; ptrace is a rich source of kernel bugs
	// (CVE-2019-13272).
	"ptrace", "process_vm_readv", "process_vm_writev",
	// x86 local descriptor tables, needed only by 16-bit code and Wine
	// (CVE-2015-5157, CVE-2017-17053).
	"modify_ldt",
}

// strictSocketDomains are the only address families strict lets socket(2)
// create. Docker allows about 25 (AF_PACKET, AF_TIPC, AF_RDS, AF_CAN, ...),
// whose protocol code is where socket CVEs come from; AF_NETLINK stays
// because libc's getaddrinfo and ip(8) use it.
var strictSocketDomains = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// strict returns Docker's profile p with strict's refusals applied.
func strict(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *p
	out.Syscalls = nil
	for _, s := range p.Syscalls {
		s.Names = slices.DeleteFunc(slices.Clone(s.Names), func(name string) bool {
			return name == "socket" || slices.Contains(strictRefused, name)
		})
		if len(s.Names) > 0 {
			out.Syscalls = append(out.Syscalls, s)
		}
	}
	for _, domain := range strictSocketDomains {
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
			Names:  []string{"socket"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpEqualTo, Value: domain}},
		})
	}
	return &out
}

// terminalIoctls are ioctl(2) requests every mode refuses, beyond Docker's
// profile: TIOCSTI types into a terminal, and a sandbox given its caller's
// terminal as stdio without -t (which nobody holds as a controlling
// terminal) can take it with TIOCSCTTY and type commands that the
// caller's shell then runs, where the kernel still allows it
// (dev.tty.legacy_tiocsti=1); TIOCLINUX reads and pastes the console's
// selection. Found by the security suite (test/security).
var terminalIoctls = []uint64{unix.TIOCSTI, unix.TIOCLINUX}

// refuseTerminalInjection adds terminalIoctls' refusals to profile p.
func refuseTerminalInjection(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *p
	out.Syscalls = slices.Clone(p.Syscalls)
	for _, request := range terminalIoctls {
		// The kernel reads the request as a 32-bit int, so compare only the
		// low half: TIOCSTI|1<<32 is still TIOCSTI to the kernel.
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
			Names:  []string{"ioctl"},
			Action: specs.ActErrno,
			Args: []specs.LinuxSeccompArg{{
				Index: 1, Op: specs.OpMaskedEqual, Value: 0xffffffff, ValueTwo: request,
			}},
		})
	}
	return &out
}
