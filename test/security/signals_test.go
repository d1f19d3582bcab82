package security

import (
	"context"
	_ "embed"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/testbin"
)

//go:embed testdata/tiocsti.py
var tiocstiProbe string

// reachProbe tries, for every pid of its argv, what a sandboxed process
// would do to a process outside: signal it, attach to it, open a pidfd,
// read its /proc entry. One line "pid what result" each.
const reachProbe = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(*a):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(x) for x in a])
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
for pid in map(int, sys.argv[1:]):
    try:
        os.kill(pid, 0); print(pid, "kill", "ok")
    except OSError as e:
        print(pid, "kill", e.strerror)
    print(pid, "pidfd", sc(434, pid, 0))
    r = sc(101, 16, pid, 0, 0)  # PTRACE_ATTACH
    if r == "ok":
        os.waitpid(pid, 0x40000000); sc(101, 17, pid, 0, 0)
    print(pid, "ptrace", r)
    print(pid, "proc", "ok" if os.path.exists("/proc/%d/status" % pid) else "absent")
print("probe-done")
`

// TestNeighboursUnreachable: from inside a sandbox, the daemon, another
// sandbox's command and a one-shot run's command are out of reach by
// their host pids — no signal, no ptrace, no pidfd, no /proc entry. The
// control: the same probe on the host reaches each of them (and the targets
// are alive after the attempts).
func TestNeighboursUnreachable(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	other, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseUint(marker()[:8], 16, 64)
	mark := strconv.FormatUint(n, 10) // sleep takes decimals only
	go d.c.Exec(ctx, other.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "exec sleep 3600.1" + mark}})
	oneShot := exec.Command(tineBin, "run", "--in-process", "--", "/bin/sh", "-c", "exec sleep 3600.2"+mark)
	if err := oneShot.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oneShot.Process.Kill(); oneShot.Wait() })
	var sibling, runCmd []int
	if !testbin.Eventually(patience, func() bool {
		sibling, runCmd = hostPidsArgv("sleep", "3600.1"+mark), hostPidsArgv("sleep", "3600.2"+mark)
		return len(sibling) == 1 && len(runCmd) == 1
	}) {
		t.Fatalf("the target commands did not start: %v %v", sibling, runCmd)
	}
	targets := []string{strconv.Itoa(d.pid()), strconv.Itoa(sibling[0]), strconv.Itoa(runCmd[0])}
	// Control on the host; the probe only signals 0 and attaches/detaches.
	out, err := execCombined(python, append([]string{"-c", reachProbe}, targets...)...)
	if err != nil {
		t.Fatalf("the probe on the host: %v\n%s", err, out)
	}
	for _, pid := range targets {
		for _, what := range []string{"kill", "pidfd", "proc"} {
			if !strings.Contains(out, pid+" "+what+" ok\n") {
				t.Errorf("control: on the host, %s of pid %s fails:\n%s", what, pid, out)
			}
		}
	}
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: append([]string{python, "-c", reachProbe}, targets...)})
	if err != nil {
		t.Fatal(err)
	}
	inside := string(res.Stdout) + string(res.Stderr)
	if !strings.Contains(inside, "probe-done") {
		t.Fatalf("the probe did not run inside:\n%s", inside)
	}
	for _, pid := range targets {
		for _, what := range []string{"kill", "pidfd", "ptrace", "proc"} {
			if strings.Contains(inside, pid+" "+what+" ok\n") {
				t.Errorf("inside a sandbox, %s of host pid %s succeeded:\n%s", what, pid, inside)
			}
		}
		n, _ := strconv.Atoi(pid)
		if err := syscall.Kill(n, 0); err != nil {
			t.Errorf("target pid %s is gone after the attempts: %v", pid, err)
		}
	}
	d.healthy("the neighbour probes")
}

// TestTerminalInjection: the command's stdin is the caller's terminal (tine
// run without -t passes its stdio as they are); with TIOCSTI it would type
// a command into the host shell reading that terminal. The control: root on
// the host types into the same terminal and reads it back, and the command
// inside sees a terminal on stdin. With the terminal as the controlling
// terminal of tine's session (an interactive shell), the command runs in a
// session of its own and cannot type (EPERM); under --seccomp strict it
// cannot either way. A terminal that is nobody's controlling terminal,
// under --seccomp default, was a hole (the command took it with TIOCSCTTY
// and typed); every mode now refuses TIOCSTI.
func TestTerminalInjection(t *testing.T) {
	gate(t)
	t.Parallel()
	for _, c := range []struct{ mode, seccomp string }{
		{"ctty", "default"}, {"ctty", "strict"}, {"none", "default"}, {"none", "strict"},
	} {
		t.Run(c.mode+"-"+c.seccomp, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), patience+10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, python, "-c", tiocstiProbe, tineBin, c.mode, "--seccomp", c.seccomp).CombinedOutput()
			if err != nil {
				t.Fatalf("the terminal probe: %v\n%s", err, out)
			}
			got := string(out)
			if !strings.Contains(got, "control b'C'") || !strings.Contains(got, "isatty True") || !strings.Contains(got, "injected ") {
				t.Fatalf("control: the host cannot type into the terminal, or the command did not get it as stdin:\n%s", got)
			}
			if !strings.Contains(got, "injected 0") || !strings.Contains(got, "typed b''") {
				t.Errorf("the sandboxed command typed into its caller's terminal (%s, --seccomp %s):\n%s", c.mode, c.seccomp, got)
			}
		})
	}
}
