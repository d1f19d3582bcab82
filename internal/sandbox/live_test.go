package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// execOutput runs args in sb and returns its stdout+stderr and outcome.
func execOutput(t *testing.T, sb *Sandbox, e *ExecSpec) (string, *Outcome) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e.Stdio = [3]*os.File{nil, w, w}
	p, err := sb.Exec(e)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("exec %v: %v", e.Args, err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	o, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(out), o
}

func TestLiveSandboxExecs(t *testing.T) {
	require.Root(t)
	sb, err := Create(&Spec{Hostname: "live", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64, MemoryBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()

	out, o := execOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", "hostname; echo $$; grep Seccomp: /proc/self/status; echo kept > /etc/live-marker"}})
	if o.ExitCode != 0 || !strings.Contains(out, "live\n") || !strings.Contains(out, "Seccomp:\t2") {
		t.Fatalf("first exec: %q %+v", out, o)
	}
	// The exec runs in the sandbox's pid namespace: a small pid, not the host's.
	var hostname string
	var pid int
	fmt.Sscanf(out, "%s\n%d", &hostname, &pid)
	if pid <= 1 || pid > 1000 {
		t.Fatalf("exec'd shell has pid %d: not inside the sandbox's pid namespace", pid)
	}
	// State persists between execs, and never reaches the host.
	out, _ = execOutput(t, sb, &ExecSpec{Args: []string{"cat", "/etc/live-marker"}})
	if out != "kept\n" {
		t.Fatalf("second exec read %q", out)
	}
	if _, err := os.Stat("/etc/live-marker"); err == nil {
		t.Fatal("the sandbox's write reached the host")
	}
	_, o = execOutput(t, sb, &ExecSpec{Args: []string{"sh", "-c", "exit 3"}})
	if o.ExitCode != 3 {
		t.Fatalf("exit code %d, want 3", o.ExitCode)
	}
	if _, err := sb.Exec(&ExecSpec{Args: []string{"no-such-command"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	_, o = execOutput(t, sb, &ExecSpec{Args: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
	if o.Reason != "timeout" || o.ExitCode != 124 {
		t.Fatalf("timeout outcome %+v", o)
	}

	// Concurrent execs do not interfere.
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, w, _ := os.Pipe()
			p, err := sb.Exec(&ExecSpec{Args: []string{"sh", "-c", fmt.Sprintf("echo %d > /tmp/c%d; sleep 0.1; cat /tmp/c%d", i, i, i)}, Stdio: [3]*os.File{nil, w, w}})
			w.Close()
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(r)
			r.Close()
			p.Wait()
			if strings.TrimSpace(string(b)) != fmt.Sprint(i) {
				errs <- fmt.Errorf("exec %d read %q", i, b)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if u := sb.Usage(); u.PeakMemoryBytes == 0 || u.CPUTimeMs == 0 {
		t.Errorf("usage not accounted: %+v", u)
	}
	dirs := sb.init.group.Dirs()
	pid1 := sb.Pid()
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s survived Destroy", d)
		}
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid1)); err == nil {
		t.Errorf("PID 1 (%d) survived Destroy", pid1)
	}
	if _, err := sb.Exec(&ExecSpec{Args: []string{"true"}}); !errors.Is(err, ErrSandboxGone) {
		t.Fatalf("exec after destroy: %v", err)
	}
}

func launchOutput(t *testing.T, sb *Sandbox, e *ExecSpec) (string, *Outcome, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e.Stdio = [3]*os.File{nil, w, w}
	l, err := sb.Launch(e)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("launch %v: %v", e.Args, err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	o, err := l.Wait()
	return string(out), o, err
}

func TestLaunchThroughPID1(t *testing.T) {
	require.Root(t)
	sb, err := Create(&Spec{Seccomp: seccomp.Default, Env: []string{"FROM_SPEC=1"}, Limits: cgroup.Limits{Pids: 64, MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	out, o, err := launchOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", "echo $$ $FROM_SPEC $X; pwd; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; exit 6"}, Env: []string{"X=2"}, Workdir: "/tmp"})
	if err != nil || o.ExitCode != 6 {
		t.Fatalf("outcome %+v, %v (output %q)", o, err, out)
	}
	for _, want := range []string{" 1 2\n", "/tmp\n", "Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t00000000a80425fb"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	var pid int
	fmt.Sscanf(out, "%d", &pid)
	if pid <= 1 || pid > 1000 {
		t.Errorf("launched shell has pid %d: not in the sandbox's pid namespace", pid)
	}
	if _, err := sb.Launch(&ExecSpec{Args: []string{"no-such-command"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	_, o, _ = launchOutput(t, sb, &ExecSpec{Args: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond})
	if o.Reason != "timeout" {
		t.Fatalf("timeout outcome %+v", o)
	}
	_, o, _ = launchOutput(t, sb, &ExecSpec{Args: []string{"/usr/bin/python3", "-c", "b = bytearray(256 << 20)"}})
	if o.Reason != "oom" {
		t.Fatalf("memory bomb outcome %+v, want oom", o)
	}
	// Many at once through the one PID 1.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, o, err := launchOutput(t, sb, &ExecSpec{Args: []string{"sh", "-c", fmt.Sprintf("echo %d", i)}})
			if err != nil || o.ExitCode != 0 || out != fmt.Sprintf("%d\n", i) {
				t.Errorf("launch %d: %q %+v %v", i, out, o, err)
			}
		}(i)
	}
	wg.Wait()
	sb.Destroy()
	if _, err := sb.Launch(&ExecSpec{Args: []string{"true"}}); !errors.Is(err, ErrSandboxGone) {
		t.Fatalf("launch after destroy: %v", err)
	}
}

// hostProcsWith counts host processes whose command line contains marker.
func hostProcsWith(marker string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			n++
		}
	}
	return n
}

// A killed (timed-out) exec takes its children with it, on both paths.
func TestKilledExecTakesItsChildren(t *testing.T) {
	require.Root(t)
	sb, err := Create(&Spec{Seccomp: seccomp.Default})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	for _, how := range []string{"exec", "launch"} {
		marker := fmt.Sprintf("1000.%d%d", time.Now().UnixNano()%1000, len(how))
		e := &ExecSpec{Args: []string{"sh", "-c", "sleep " + marker + " & sleep " + marker + "; echo done"}, Timeout: 300 * time.Millisecond}
		var o *Outcome
		if how == "exec" {
			_, o = execOutput(t, sb, e)
		} else {
			_, o, _ = launchOutput(t, sb, e)
		}
		if o.Reason != "timeout" {
			t.Fatalf("%s: outcome %+v, want timeout", how, o)
		}
		deadline := time.Now().Add(2 * time.Second)
		for hostProcsWith(marker) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := hostProcsWith(marker); n > 0 {
			t.Errorf("%s: %d children of the killed command survive", how, n)
		}
	}
}

// An exec that runs its live sandbox out of memory is what the OOM killer
// takes, never the sandbox's PID 1 (whose memory is a copy of tine's and
// can look bigger than the command's).
func TestOOMSparesPID1(t *testing.T) {
	require.Root(t)
	if !hasCapability(unix.CAP_SYS_RESOURCE) {
		t.Skip("needs CAP_SYS_RESOURCE (to lower PID 1's oom_score_adj): tine runs without it here")
	}
	// Make tine's (this test's) resident memory large, so PID 1's copy is.
	ballast := make([]byte, 64<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	sb, err := Create(&Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{MemoryBytes: 24 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	_ = ballast[len(ballast)-1]
	for _, how := range []string{"launch", "exec"} {
		e := &ExecSpec{Args: []string{"/usr/bin/python3", "-c", "b = bytearray(128 << 20)"}}
		var o *Outcome
		if how == "launch" {
			_, o, _ = launchOutput(t, sb, e)
		} else {
			_, o = execOutput(t, sb, e)
		}
		if o.ExitCode != 137 {
			t.Fatalf("%s: memory bomb outcome %+v, want 137", how, o)
		}
		select {
		case <-sb.Done():
			t.Fatalf("%s: the OOM killer took the sandbox's PID 1", how)
		default:
		}
		out, o2 := execOutput(t, sb, &ExecSpec{Args: []string{"cat", "/proc/self/oom_score_adj", "/proc/1/oom_score_adj"}})
		if o2.ExitCode != 0 || out != "0\n-1000\n" {
			t.Fatalf("%s: oom_score_adj of a command and of PID 1: %q (%+v), want 0 and -1000", how, out, o2)
		}
	}
	runtime.KeepAlive(ballast)
}

// hasCapability reports whether this process has capability c effective.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var eff uint64
			fmt.Sscanf(strings.TrimSpace(v), "%x", &eff)
			return eff&(1<<c) != 0
		}
	}
	return false
}

// TestPID1DropsItsCopyOfTine checks that a live sandbox's PID 1 keeps no
// writable mapping of the process it was cloned from (its heap, stacks,
// globals: they cost memory as the daemon rewrites its own) beyond its
// resident memory and the kernel's, and still launches commands.
func TestPID1DropsItsCopyOfTine(t *testing.T) {
	require.Root(t)
	if !unmapsItsCopy {
		t.Skip("PID 1 unmaps its copy only on amd64 (the stack switch is assembly) in a build without cgo (tine's: make build)")
	}
	sb, err := Create(&Spec{Seccomp: seccomp.Default})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	// The negative control: this process, which PID 1 is a copy of, has
	// many writable mappings.
	if n := len(writableMappings(t, os.Getpid())); n < 3 {
		t.Fatalf("this process has %d writable mappings: the check below would prove nothing", n)
	}
	// Its resident memory (one mapping) and [stack]. PID 1 unmaps the
	// rest right after it reported ready, so give it a moment.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if left = writableMappings(t, sb.Pid()); len(left) <= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 2 {
		t.Errorf("PID 1 keeps %d writable mappings, want its resident memory and [stack] only:\n%s", len(left), strings.Join(left, "\n"))
	}
	out, o := execOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", "echo served"}})
	if o.ExitCode != 0 || out != "served\n" {
		t.Fatalf("exec after PID 1 dropped its copy: %q %+v", out, o)
	}
}

// writableMappings lists pid's writable private mappings (/proc/pid/maps).
func writableMappings(t *testing.T, pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[1], "rw") && f[1][3] == 'p' {
			out = append(out, l)
		}
	}
	return out
}
