package policy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The profile names syscalls of every architecture; those this one lacks are
// skipped. The skipped ones must not include a native syscall.
func TestSkippedSyscallsAreForeign(t *testing.T) {
	c, err := compile(Default)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d profile names skipped on %s: %s", len(c.skipped), runtime.GOARCH, strings.Join(c.skipped, " "))
	header := map[string]string{
		"amd64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
		"arm64": "/usr/include/aarch64-linux-gnu/asm/unistd.h",
	}[runtime.GOARCH]
	native, err := headerSyscalls(header)
	if err != nil {
		t.Skipf("needs the kernel's syscall header (linux-libc-dev): %v", err)
	}
	for _, name := range c.skipped {
		if native[name] {
			t.Errorf("%s is a %s syscall in %s but missing from the assembler's table", name, runtime.GOARCH, header)
		}
	}
}

// headerSyscalls reads the __NR_ names of a kernel uapi header.
func headerSyscalls(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if name, ok := strings.CutPrefix(s.Text(), "#define __NR_"); ok {
			names[strings.Fields(name)[0]] = true
		}
	}
	if len(names) < 100 {
		return nil, errors.New(path + " names fewer than 100 syscalls")
	}
	return names, s.Err()
}

// Every strict refusal must change something, or it is dead weight.
func TestStrictRefusalsAreAllowedByDefault(t *testing.T) {
	def, a := testedPolicy(t, Default)
	str, _ := testedPolicy(t, Strict)
	for _, name := range strictRefused {
		num, ok := a.SyscallNames[name]
		if !ok {
			continue // e.g. modify_ldt off x86
		}
		nr := uint32(num)
		if def.verdict(nr, [6]uint64{}) != allow {
			t.Errorf("%s: default already refuses it", name)
		}
		if str.verdict(nr, [6]uint64{}) == allow {
			t.Errorf("%s: strict allows it", name)
		}
	}
	socket := uint32(a.SyscallNames["socket"])
	for _, domain := range []uint64{unix.AF_PACKET, unix.AF_KEY, unix.AF_TIPC} {
		if def.verdict(socket, [6]uint64{domain}) != allow || str.verdict(socket, [6]uint64{domain}) != eperm {
			t.Errorf("socket(%d): want allowed by default, refused by strict", domain)
		}
	}
	for _, domain := range strictSocketDomains {
		if str.verdict(socket, [6]uint64{domain}) != allow {
			t.Errorf("socket(%d): strict refuses it", domain)
		}
	}
}

// Every mode refuses the terminal-injection ioctls (with the high half of
// the request set too: the kernel reads it as an int) and allows the rest.
func TestEveryModeRefusesTerminalInjection(t *testing.T) {
	for _, mode := range []string{Default, Strict, Zygote} {
		p, a := testedPolicy(t, mode)
		ioctl := uint32(a.SyscallNames["ioctl"])
		for _, request := range terminalIoctls {
			for _, arg := range []uint64{request, 1<<32 | request} {
				if got := p.verdict(ioctl, [6]uint64{0, arg}); got != eperm {
					t.Errorf("%s: ioctl(%#x) = %#x, want EPERM", mode, arg, got)
				}
			}
		}
		if p.verdict(ioctl, [6]uint64{0, unix.TCGETS}) != allow {
			t.Errorf("%s: ioctl(TCGETS) refused", mode)
		}
	}
}

func TestTranslateOrdersSpecificRulesFirst(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	ioctl := uint32(a.SyscallNames["ioctl"])
	enosys := uint(unix.ENOSYS)
	tiocsti := specs.LinuxSyscall{
		Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: &enosys,
		Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: unix.TIOCSTI}},
	}
	allowAll := specs.LinuxSyscall{Names: []string{"ioctl"}, Action: specs.ActAllow}
	redundant := specs.LinuxSyscall{
		Names: []string{"ioctl"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: unix.TCGETS}},
	}
	for _, order := range [][]specs.LinuxSyscall{{tiocsti, allowAll, redundant}, {redundant, allowAll, tiocsti}} {
		p, err := translate(&specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: order}, a)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.verdict(ioctl, [6]uint64{0, unix.TCGETS}); got != allow {
			t.Errorf("ioctl(TCGETS): got %#x, want allow", got)
		}
		if got, want := p.verdict(ioctl, [6]uint64{0, unix.TIOCSTI}), unix.SECCOMP_RET_ERRNO|uint32(enosys); got != want {
			t.Errorf("ioctl(TIOCSTI): got %#x, want ENOSYS", got)
		}
		if rules := p.syscalls[ioctl].rules; len(rules) != 1 {
			t.Errorf("ioctl has %d rules, want only the ERRNO one", len(rules))
		}
	}
}

func TestTranslateRefusesAmbiguousProfiles(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	for name, rules := range map[string][]specs.LinuxSyscall{
		"two unconditional actions": {
			{Names: []string{"getpid"}, Action: specs.ActAllow},
			{Names: []string{"getpid"}, Action: specs.ActErrno},
		},
		"unsupported action": {{Names: []string{"getpid"}, Action: specs.ActNotify}},
	} {
		if _, err := translate(&specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: rules}, a); err == nil {
			t.Errorf("%s: translated without error", name)
		}
	}
}

func TestStrictLeavesItsInputAlone(t *testing.T) {
	p, err := dockerProfile()
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprint(p.Syscalls)
	strict(p)
	if fmt.Sprint(p.Syscalls) != before {
		t.Error("strict changed Docker's profile")
	}
}

// TestRepeatedArgumentIsEitherComparison: a rule comparing one argument
// twice matches when either comparison holds, as runc reads it.
func TestRepeatedArgumentIsEitherComparison(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	p, err := translate(&specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{
		Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
			{Index: 0, Op: specs.OpEqualTo, Value: 0}, {Index: 0, Op: specs.OpEqualTo, Value: 8},
		}}}}, a)
	if err != nil {
		t.Fatal(err)
	}
	nr := uint32(a.SyscallNames["personality"])
	for arg, want := range map[uint64]uint32{0: unix.SECCOMP_RET_ALLOW, 8: unix.SECCOMP_RET_ALLOW, 4: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)} {
		if got := p.verdict(nr, [6]uint64{arg}); got != want {
			t.Errorf("personality(%d): got %#x, want %#x", arg, got, want)
		}
	}
}
