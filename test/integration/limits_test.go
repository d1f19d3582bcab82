package integration

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/testbin"

	"github.com/tine-run/tine/internal/require"
)

// sleepArg returns a unique argument for sleep, e.g. "1000.4711", so the
// sleep's host process can be found by its exact argv.
func sleepArg() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(1_000_000_000))
	return fmt.Sprintf("1000.%d", n.Int64()+1)
}

// A fork bomb is held by --pids; the host can still fork meanwhile, and
// the run ends with a failure and leaves nothing.
func TestForkBombContained(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	// The bomb forks in the background; the command itself then waits
	// in sleep (exec needs no new pid) until --timeout ends the sandbox.
	script := fmt.Sprintf(`echo bomb-start # %s
f() { f | f & }
f
exec sleep 100`, h.marker)
	out := filepath.Join(t.TempDir(), "outcome.json")
	p := h.start(runConfig{}, "run", "--pids", "64", "--timeout", "5s", "--outcome", out, "--", "bash", "-c", script)
	p.waitStdout("bomb-start", 20*time.Second)

	forks, failed := 0, []string{}
	for running := true; running; {
		select {
		case <-p.done:
			running = false
		case <-time.After(200 * time.Millisecond):
			if err := exec.Command("/bin/true").Run(); err != nil {
				failed = append(failed, err.Error())
			}
			forks++
		}
	}
	r := p.wait()
	if forks == 0 || len(failed) > 0 {
		t.Errorf("the host could not fork /bin/true during the bomb: %d tries, failures %v", forks, failed)
	}
	// Negative check: the bomb ran into the limit.
	if !strings.Contains(r.Stderr, "Resource temporarily unavailable") {
		t.Errorf("the fork bomb never hit the pids limit (no EAGAIN from fork):\n%s", r)
	}
	if r.Code == 0 {
		t.Errorf("the fork bomb run exited 0, want a failure:\n%s", r)
	}
	if o, _ := readOutcome(t, out); o.Reason != "timeout" || o.ExitCode != r.Code {
		t.Errorf("outcome: reason %q, exit_code %d; want timeout and %d", o.Reason, o.ExitCode, r.Code)
	}
}

// A command that allocates past --memory is killed: exit 137, reason oom.
func TestMemoryBombKilled(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	require.Binary(t, python)
	out := filepath.Join(t.TempDir(), "outcome.json")
	bomb := `print("allocating", flush=True)
chunks = []
for i in range(1024):
    chunks.append(b"x" * (1 << 20))
print("survived", len(chunks), "MiB", flush=True)`
	r := h.run("run", "--memory", "64m", "--outcome", out, "--", python, "-c", bomb, h.marker)
	if !strings.Contains(r.Stdout, "allocating") {
		t.Fatalf("the memory bomb did not start:\n%s", r)
	}
	if strings.Contains(r.Stdout, "survived") {
		t.Errorf("the command allocated 1 GiB under --memory 64m:\n%s", r)
	}
	if r.Code != 137 {
		t.Errorf("memory bomb: exit %d, want 137\n%s", r.Code, r)
	}
	o, _ := readOutcome(t, out)
	if o.Reason != "oom" || o.ExitCode != 137 {
		t.Errorf("outcome: reason %q, exit_code %d; want oom, 137", o.Reason, o.ExitCode)
	}
	if o.PeakMemoryBytes <= 0 || o.PeakMemoryBytes > 80<<20 {
		t.Errorf("outcome: peak_memory_bytes %d, want within (0, 80 MiB] under a 64 MiB limit", o.PeakMemoryBytes)
	}
}

// --timeout kills the whole tree, including a grandchild that left the
// command's session and process tree.
func TestTimeoutKillsDaemonizedGrandchild(t *testing.T) {
	h := setup(t)
	arg := sleepArg()
	dir := t.TempDir()
	out := filepath.Join(dir, "outcome.json")
	pidDir := filepath.Join(dir, "pids")
	os.Mkdir(pidDir, 0o755)
	// ( ... & ) is the double fork: the subshell exits, so the sleep is
	// reparented to PID 1 and, with setsid, leads its own session.
	script := fmt.Sprintf(`(setsid sleep %s </dev/null >/dev/null 2>&1 & echo $! > /pids/daemon)
echo started-%s
sleep 100`, arg, h.marker)
	p := h.start(runConfig{}, "run", "--timeout", "2s", "--outcome", out, "-v", pidDir+":/pids", "--", "bash", "-c", script)
	p.waitStdout("started-"+h.marker, 20*time.Second)
	// Negative check: the daemon is alive on the host before the timeout.
	if !testbin.Eventually(5*time.Second, func() bool { return len(hostProcs(argvIs("sleep", arg))) > 0 }) {
		t.Fatalf("the daemonized sleep %s never showed up in the host's /proc", arg)
	}
	if pid, err := os.ReadFile(filepath.Join(pidDir, "daemon")); err != nil || strings.TrimSpace(string(pid)) == "" {
		t.Errorf("the sandbox did not record the daemon's pid through the volume: %q, %v", pid, err)
	}
	r := p.wait()
	if r.Code != 124 {
		t.Errorf("--timeout 2s: exit %d, want 124\n%s", r.Code, r)
	}
	if o, _ := readOutcome(t, out); o.Reason != "timeout" || o.ExitCode != 124 {
		t.Errorf("outcome: reason %q, exit_code %d; want timeout, 124", o.Reason, o.ExitCode)
	}
	var left []int
	if !testbin.Eventually(3*time.Second, func() bool {
		left = hostProcs(argvContains(arg))
		return len(left) == 0
	}) {
		t.Errorf("after --timeout, processes of the sandbox remain on the host:%s", describe(left))
	}
}

// Concurrent sandboxes each have their own /tmp and root overlay.
func TestConcurrentRunsIsolated(t *testing.T) {
	h := setup(t)
	const n = 20
	_, hostHadX := os.Stat("/etc/x")
	var wg sync.WaitGroup
	results := make([]result, n)
	procs := make([]*proc, n)
	for i := range n {
		v := fmt.Sprintf("%s-%d", h.marker, i)
		procs[i] = h.start(runConfig{}, "run", "--", "sh", "-c",
			fmt.Sprintf(`echo %[1]s > /tmp/x && echo %[1]s > /etc/x && sleep 0.5 && echo "$(cat /tmp/x) $(cat /etc/x)"`, v))
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-procs[i].done:
			case <-time.After(runLimit):
				procs[i].cmd.Process.Kill()
				<-procs[i].done
			}
			results[i] = procs[i].res
		}()
	}
	wg.Wait()
	for i, r := range results {
		v := fmt.Sprintf("%s-%d", h.marker, i)
		if r.Code != 0 || strings.TrimSpace(r.Stdout) != v+" "+v {
			t.Errorf("run %d: want %q, got:\n%s", i, v+" "+v, r)
		}
	}
	if _, err := os.Stat("/etc/x"); hostHadX != nil && err == nil {
		t.Errorf("/etc/x written inside the sandboxes appeared on the host")
	}
}

// When tine is SIGKILLed, its sandbox's processes die with it and no mount
// shows on the host; its cgroup stays until `tine gc`, which removes it.
func TestLeftoversAfterSIGKILL(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	arg := sleepArg()
	p := h.start(runConfig{}, "run", "--", "sleep", arg)
	if !testbin.Eventually(10*time.Second, func() bool { return len(hostProcs(argvIs("sleep", arg))) > 0 }) {
		t.Fatalf("sleep %s never showed up in the host's /proc\nstderr: %s", arg, p.stderr.String())
	}
	// Negative check: the run's cgroup exists where the leftover checks look.
	if len(testbin.CgroupsOf(p.pid())) == 0 {
		t.Errorf("no cgroup named after tine pid %d under /sys/fs/cgroup while it runs; the leftover checks look in the wrong place", p.pid())
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := p.wait()
	if r.Signal != syscall.SIGKILL {
		t.Fatalf("tine was not killed by SIGKILL:\n%s", r)
	}
	var left []int
	if !testbin.Eventually(5*time.Second, func() bool {
		left = hostProcs(argvContains(arg))
		return len(left) == 0
	}) {
		t.Errorf("after SIGKILL of tine, its sandbox's processes remain:%s", describe(left))
	}
	if m := testbin.StageMounts(); len(m) > 0 {
		t.Errorf("after SIGKILL of tine, the host's mountinfo mentions %s:\n%s", stageDir, strings.Join(m, "\n"))
	}
	gc, err := exec.Command(tineBin, "gc").CombinedOutput()
	if err != nil {
		t.Errorf("tine gc: %v\n%s", err, gc)
	}
	if dirs := testbin.CgroupsOf(p.pid()); len(dirs) > 0 {
		t.Errorf("after tine gc, cgroups of the killed tine (pid %d) remain: %v\ngc said: %s", p.pid(), dirs, gc)
	}
}

// The tenant cannot change its reaper's OOM score (raising it would let
// it choose when PID 1 dies): every write to PID 1's score files fails and
// the score stays; the same write to its own score works (the attempt is
// real: the files are writable in general).
func TestReaperOOMScoreReadOnly(t *testing.T) {
	h := setup(t)
	r := h.run("run", "--", "sh", "-c", `before=$(cat /proc/1/oom_score_adj); echo "before $before"
for f in /proc/1/oom_score_adj /proc/1/task/1/oom_score_adj; do echo 1000 > $f && echo "wrote $f"; done
for f in /proc/1/oom_adj /proc/1/task/1/oom_adj; do echo 15 > $f && echo "wrote $f"; done
echo "after $(cat /proc/1/oom_score_adj)"
echo 500 > /proc/self/oom_score_adj && echo "self $(cat /proc/self/oom_score_adj)"`)
	if !strings.Contains(r.Stdout, "self 500\n") {
		t.Fatalf("negative control: the command could not write its own oom_score_adj: %s", r)
	}
	if strings.Contains(r.Stdout, "wrote") {
		t.Errorf("a write to PID 1's OOM score succeeded: %s", r)
	}
	lines := strings.Split(r.Stdout, "\n")
	before, after := strings.TrimPrefix(lines[0], "before "), ""
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "after "); ok {
			after = v
		}
	}
	if before == "" || before != after || after == "1000" {
		t.Errorf("PID 1's oom_score_adj went from %q to %q: %s", before, after, r)
	}
}

// /tmp and /run share the --disk bytes with the writable layer: filling
// either past --disk fails with ENOSPC inside (a write below it works),
// and the run itself ends normally.
func TestTmpAndRunBoundedByDisk(t *testing.T) {
	h := setup(t)
	for _, dir := range []string{"/tmp", "/run"} {
		r := h.run("run", "--disk", "32m", "--", "sh", "-c",
			"dd if=/dev/zero of="+dir+"/small bs=1M count=16 2>/dev/null && echo small-ok && rm "+dir+"/small; "+
				"dd if=/dev/zero of="+dir+"/fill bs=1M count=64 || echo fill-failed; echo size $(stat -c %s "+dir+"/fill)")
		if !strings.Contains(r.Stdout, "small-ok\n") {
			t.Fatalf("%s: negative control: a 16 MiB write failed: %s", dir, r)
		}
		if !strings.Contains(r.Stdout, "fill-failed\n") || !strings.Contains(r.Stderr, "No space left on device") {
			t.Errorf("%s: a 64 MiB write with --disk 32m did not fail with ENOSPC: %s", dir, r)
		}
		if r.Code != 0 {
			t.Errorf("%s: the run did not end normally: %s", dir, r)
		}
	}
}

// Without --pids, a run as root is held at the default pids limit: a
// process that forks without end stops with EAGAIN below 1024.
func TestDefaultPidsLimit(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	require.Binary(t, python)
	r := h.run("run", "--timeout", "60s", "--", python, "-c", `
import os, time
n = 0
try:
    while n < 3000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped", n, e.errno, flush=True)
print("forked", n, flush=True)`)
	var n, errno int
	if _, err := fmt.Sscanf(r.Stdout, "stopped %d %d", &n, &errno); err != nil || errno != int(syscall.EAGAIN) {
		t.Fatalf("forking without --pids never hit a limit (want \"stopped N %d\"): %s", syscall.EAGAIN, r)
	}
	if n < 900 || n >= 1024 {
		t.Errorf("forks stopped after %d processes, want just under the default 1024: %s", n, r)
	}
}

// Without --memory, a run as root is held at the default memory limit: a
// command that allocates 1.5 GiB is OOM-killed (exit 137, reason oom).
func TestDefaultMemoryLimit(t *testing.T) {
	h := setup(t)
	require.Feature(t, "cgroup")
	require.Binary(t, python)
	out := filepath.Join(t.TempDir(), "outcome.json")
	r := h.run("run", "--outcome", out, "--", python, "-c", `
print("allocating", flush=True)
chunks = [bytearray(1 << 20) for _ in range(1536)]
print("survived", len(chunks), "MiB", flush=True)`)
	if !strings.Contains(r.Stdout, "allocating") {
		t.Fatalf("the command did not run: %s", r)
	}
	if strings.Contains(r.Stdout, "survived") || r.Code != 137 {
		t.Errorf("1.5 GiB without --memory was not killed: %s", r)
	}
	if o, _ := readOutcome(t, out); o.Reason != "oom" {
		t.Errorf("outcome reason %q, want oom", o.Reason)
	}
	if !strings.Contains(r.Stderr, "--memory") {
		t.Errorf("the OOM message does not say how to raise the default: %s", r)
	}
}
