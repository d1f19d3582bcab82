package seccomp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/tine-run/tine/internal/kernel/seccomp/policy"
	"golang.org/x/sys/unix"
)

// The kernel tests re-execute the test binary as a helper that installs a
// mode's program, attempts each probe below and prints one "name result"
// line per probe. An unconfined run of the same probes is the control: an
// allowed call must give what it gives unconfined, a refused one must give
// the filter's errno where unconfined gives something else.

const helperEnv = "TINE_SECCOMP_TEST_HELPER"

// addrNoRandomize is the personality flag that turns ASLR off.
const addrNoRandomize = 0x0040000

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(Mode(mode)))
	}
	os.Exit(m.Run())
}

func runHelper(mode Mode) int {
	prog, err := Program(mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if prog != nil {
		if err := install(prog); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for _, p := range probes {
		fmt.Printf("%s %s\n", p.name, p.try())
	}
	return 0
}

type probe struct {
	name string
	try  func() string // "ok", an errno name, or a value
}

// Arguments are chosen so that an allowed call fails harmlessly with its own
// errno (ENOENT, EINVAL, EBADF, EFAULT) and changes nothing on the host.
var probes = []probe{
	{"seccomp", func() string { return statusField("Seccomp") }},
	{"seccomp-filters", func() string { return statusField("Seccomp_filters") }},
	{"getpid", func() string { return result(nil) }},
	{"read-file", func() string { _, err := os.ReadFile("/proc/self/cmdline"); return result(err) }},
	{"fork-exec", func() string { return result(exec.Command("/bin/true").Run()) }},
	{"mount", func() string { return result(unix.Mount("none", "/nonexistent-tine-probe", "tmpfs", 0, "")) }},
	{"kexec-load", func() string { return syscallResult(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }},
	{"bpf", func() string { return syscallResult(unix.SYS_BPF, 0xffff, 0, 0) }},
	{"unshare-user", func() string { return result(unix.Unshare(unix.CLONE_NEWUSER)) }},
	{"clone3", func() string { return syscallResult(unix.SYS_CLONE3, 0, 0) }},
	{"userfaultfd", func() string { return syscallResult(unix.SYS_USERFAULTFD, 0xffff) }},
	{"keyctl", func() string { return syscallResult(unix.SYS_KEYCTL, 0xffff) }},
	{"io-uring-setup", func() string { return syscallResult(unix.SYS_IO_URING_SETUP, 1, 0) }},
	{"perf-event-open", func() string { return syscallResult(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0, 0, 0) }},
	{"ptrace-attach", ptraceChild},
	{"process-vm-readv", func() string {
		buf := make([]byte, 8)
		_, err := unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &buf[0], Len: 8}}, []unix.RemoteIovec{{Base: 0, Len: 8}}, 0)
		return result(err)
	}},
	{"modify-ldt", func() string { return syscallByName("modify_ldt", 0, 0, 0) }},
	{"socket-unix", func() string { return socket(unix.AF_UNIX, unix.SOCK_STREAM) }},
	{"socket-inet", func() string { return socket(unix.AF_INET, unix.SOCK_STREAM) }},
	{"socket-inet6", func() string { return socket(unix.AF_INET6, unix.SOCK_DGRAM) }},
	{"socket-netlink", func() string { return socket(unix.AF_NETLINK, unix.SOCK_RAW) }},
	// An out-of-range type makes the kernel answer EINVAL before it looks at
	// the family or at capabilities.
	{"socket-packet", func() string { return socket(unix.AF_PACKET, 99) }},
	{"socket-alg", func() string { return socket(unix.AF_ALG, 99) }},
	{"socket-vsock", func() string { return socket(unix.AF_VSOCK, 99) }},
	{"personality-query", func() string { return syscallResult(unix.SYS_PERSONALITY, 0xffffffff) }},
	{"personality-no-aslr", func() string { return syscallResult(unix.SYS_PERSONALITY, addrNoRandomize) }},
	{"ioctl-tcgets", func() string { return syscallResult(unix.SYS_IOCTL, ^uintptr(0), unix.TCGETS) }},
	{"ioctl-tiocsti", func() string { return syscallResult(unix.SYS_IOCTL, ^uintptr(0), unix.TIOCSTI) }},
	{"ioctl-tiocsti-high-bits", func() string { return syscallResult(unix.SYS_IOCTL, ^uintptr(0), 1<<32|unix.TIOCSTI) }},
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

func syscallResult(nr uintptr, args ...uintptr) string {
	var a [6]uintptr
	copy(a[:], args)
	if _, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]); errno != 0 {
		return unix.ErrnoName(errno)
	}
	return "ok"
}

func syscallByName(name string, args ...uintptr) string {
	a, err := arch.GetInfo("")
	if err != nil {
		return result(err)
	}
	nr, ok := a.SyscallNames[name]
	if !ok {
		return "absent"
	}
	return syscallResult(uintptr(nr), args...)
}

func socket(domain, typ int) string {
	fd, err := unix.Socket(domain, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

// ptraceChild attaches to a child of its own, never to a process the test
// did not start.
func ptraceChild() string {
	child := exec.Command("/bin/sleep", "10")
	if err := child.Start(); err != nil {
		return result(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return result(unix.PtraceAttach(child.Process.Pid))
}

func statusField(name string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return result(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "missing"
}

func runProbes(t *testing.T, mode Mode) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(mode))
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("%s helper: %v: %s", mode, err, exit.Stderr)
		}
		t.Fatalf("%s helper: %v", mode, err)
	}
	results := map[string]string{}
	for line := range strings.Lines(string(out)) {
		name, res, _ := strings.Cut(strings.TrimSpace(line), " ")
		results[name] = res
	}
	if len(results) != len(probes) {
		t.Fatalf("%s helper reported %d probes, want %d:\n%s", mode, len(results), len(probes), out)
	}
	return results
}

// refusedBy lists, per mode, the probes the filter must refuse and with which
// errno. Every other probe must behave as it does unconfined.
var refusedBy = map[Mode]map[string]string{
	Default: {
		"mount": "EPERM", "kexec-load": "EPERM", "bpf": "EPERM", "unshare-user": "EPERM",
		"clone3": "ENOSYS", "userfaultfd": "EPERM", "keyctl": "EPERM", "io-uring-setup": "EPERM",
		"perf-event-open": "EPERM", "socket-alg": "EPERM", "socket-vsock": "EPERM",
		"personality-no-aslr": "EPERM",
		"ioctl-tiocsti":       "EPERM", "ioctl-tiocsti-high-bits": "EPERM",
	},
	Strict: {
		"mount": "EPERM", "kexec-load": "EPERM", "bpf": "EPERM", "unshare-user": "EPERM",
		"clone3": "ENOSYS", "userfaultfd": "EPERM", "keyctl": "EPERM", "io-uring-setup": "EPERM",
		"perf-event-open": "EPERM", "socket-alg": "EPERM", "socket-vsock": "EPERM",
		"personality-no-aslr": "EPERM",
		"ptrace-attach":       "EPERM", "process-vm-readv": "EPERM", "socket-packet": "EPERM",
		"ioctl-tiocsti": "EPERM", "ioctl-tiocsti-high-bits": "EPERM",
	},
}

func init() {
	if runtime.GOARCH == "amd64" {
		refusedBy[Strict]["modify-ldt"] = "EPERM"
	}
}

func TestInstalledProgramRefusesWhatThePolicyRefuses(t *testing.T) {
	control := runProbes(t, Unconfined)
	// The calls every program must allow work at all, and the helper ran.
	for _, name := range []string{"getpid", "read-file", "fork-exec"} {
		if control[name] != "ok" {
			t.Fatalf("unconfined %s: %s, want ok", name, control[name])
		}
	}
	controlFilters, err := strconv.Atoi(control["seccomp-filters"])
	if err != nil {
		t.Fatalf("needs Seccomp_filters in /proc/self/status: %q", control["seccomp-filters"])
	}
	for _, mode := range []Mode{Default, Strict} {
		t.Run(string(mode), func(t *testing.T) {
			got := runProbes(t, mode)
			if got["seccomp"] != "2" || got["seccomp-filters"] != strconv.Itoa(controlFilters+1) {
				t.Fatalf("seccomp %s with %s filters, want 2 (filter mode) with %d: the filter did not load",
					got["seccomp"], got["seccomp-filters"], controlFilters+1)
			}
			for _, p := range probes[2:] {
				t.Run(p.name, func(t *testing.T) {
					want, refused := refusedBy[mode][p.name]
					switch {
					case !refused && got[p.name] != control[p.name]:
						t.Errorf("%s, want %s as unconfined: the filter refused an allowed call", got[p.name], control[p.name])
					case refused && control[p.name] == want:
						t.Skipf("needs a host where this call is not refused unconfined: got %s", want)
					case refused && got[p.name] != want:
						t.Errorf("%s, want %s (unconfined: %s)", got[p.name], want, control[p.name])
					}
					t.Logf("unconfined %s, %s %s", control[p.name], mode, got[p.name])
				})
			}
		})
	}
}

func BenchmarkProgram(b *testing.B) {
	for b.Loop() {
		if _, err := Program(Default); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile is what Program costs on an architecture without a
// generated program.
func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := policy.Compile(string(Default)); err != nil {
			b.Fatal(err)
		}
	}
}

// install confines every thread of the calling process to filter, as the
// sandbox's child does for itself (internal/sandbox), plus TSYNC for the Go
// runtime's other threads.
func install(filter []unix.SockFilter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// TSYNC puts the filter on the Go runtime's other threads too.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter: thread %d could not be synchronized", r)
	}
	return nil
}
