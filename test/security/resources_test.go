package security

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

const mib = 1 << 20

// fillScript writes 1 MiB blocks to path until the write fails or max MiB
// are written, and prints "filled N" (flushed after every block, so a
// command killed for memory still reports what it wrote).
const fillScript = `import os, sys
path, most = sys.argv[1], int(sys.argv[2])
n = 0
block = b"\xa5" * (1 << 20)
try:
    with open(path, "wb", buffering=0) as f:
        while n < most:
            f.write(block); n += 1
            print("filled", n, flush=True)
except OSError as e:
    print("stopped", e.strerror, flush=True)
`

// lastFilled is the last "filled N" count in out.
func lastFilled(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "filled "); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}

// TestFillsBounded fills the writable root, /tmp and /dev/shm far past the
// limits the run sets (--disk 32m, --memory 96m; tmpfs pages are charged to
// the sandbox's memory cgroup). Each fill stops at its bound — ENOSPC, or
// the command is killed for memory — and what it wrote never exceeds the
// bound. The control: each fill did write many MiB first. These pass
// explicit limits; the default bounds for /tmp and /run are another change
// (see docs/security.md).
func TestFillsBounded(t *testing.T) {
	gate(t)
	require.Feature(t, "cgroup")
	t.Parallel()
	for _, c := range []struct {
		name, path string
		bound      int // MiB
	}{
		{"root", "/fill", 32},
		{"tmp", "/tmp/fill", 96},
		{"shm", "/dev/shm/fill", 96},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			outcome := filepath.Join(t.TempDir(), "outcome.json")
			r := tineRun(t, "--disk", "32m", "--memory", "96m", "--outcome", outcome, "--", python, "-c", fillScript, c.path, "1024")
			n := lastFilled(r.Stdout)
			if n < 8 {
				t.Fatalf("control: the fill of %s wrote %d MiB, want at least 8 before any bound:\n%s", c.path, n, r)
			}
			stopped := strings.Contains(r.Stdout, "stopped No space left on device") || r.Code == 137
			if !stopped || n >= 1024 {
				t.Errorf("filling %s: want ENOSPC or an OOM kill before 1 GiB, got %d MiB:\n%s", c.path, n, r)
			}
			if n > c.bound {
				t.Errorf("filling %s wrote %d MiB, past its %d MiB bound", c.path, n, c.bound)
			}
			var o struct {
				PeakMemoryBytes int64 `json:"peak_memory_bytes"`
			}
			if raw, err := os.ReadFile(outcome); err == nil && json.Unmarshal(raw, &o) == nil && o.PeakMemoryBytes > 96*mib {
				t.Errorf("filling %s: peak memory %d bytes, past the 96 MiB limit", c.path, o.PeakMemoryBytes)
			}
		})
	}
}

// TestThreadBombBounded starts threads until the kernel refuses, under
// --pids 64 (threads count as tasks). The control: many threads did start;
// the effect: fewer than 64, and the run ends.
// test/integration's TestForkBombContained and TestMemoryBombKilled do
// processes and memory.
func TestThreadBombBounded(t *testing.T) {
	gate(t)
	require.Feature(t, "cgroup")
	t.Parallel()
	r := py(t, `import threading, time
ev = threading.Event()
n = 0
try:
    while n < 10000:
        threading.Thread(target=ev.wait, daemon=True).start(); n += 1
except RuntimeError as e:
    print("refused", e)
print("threads", n)
ev.set()`, "--pids", "64")
	got := lines(r.Stdout)
	n, _ := strconv.Atoi(got["threads"])
	if n < 16 {
		t.Fatalf("control: only %d threads started before the bound:\n%s", n, r)
	}
	if n >= 64 || !strings.Contains(r.Stdout, "refused") {
		t.Errorf("%d threads started under --pids 64:\n%s", n, r)
	}
}

// TestCgroupLimitsHold tries to lift the sandbox's own limits: write
// "max" into every limit, release_agent or cgroup.procs file it can find
// under /sys/fs/cgroup (there are none: sysfs shows no cgroup hierarchy),
// and mount a cgroup v2 or v1 hierarchy (whose release_agent runs as host
// root, CVE-2022-0492). The control: on the host the sandbox's cgroup
// exists with the 64 MiB limit, and mount exists inside; the effect: the
// mounts fail and the limit on the host is unchanged.
func TestCgroupLimitsHold(t *testing.T) {
	gate(t)
	require.Feature(t, "cgroup")
	t.Parallel()
	script := `for f in $(find /sys/fs/cgroup -name 'memory.max' -o -name 'memory.limit_in_bytes' -o -name 'pids.max' -o -name 'release_agent' -o -name 'cgroup.procs' 2>/dev/null); do
  (echo max > $f) 2>/dev/null && echo "WROTE $f"
done
command -v mount >/dev/null && echo has-mount
mkdir -p /tmp/cg2 /tmp/cg1
mount -t cgroup2 none /tmp/cg2 2>/dev/null && echo MOUNTED-V2
mount -t cgroup -o memory none /tmp/cg1 2>/dev/null && echo MOUNTED-V1
echo attempted; cat /proc/self/cgroup | head -3 | sed 's/^/cg /'
echo ready; read x`
	tine := exec.Command(tineBin, "run", "--in-process", "--memory", "64m", "--", "/bin/sh", "-c", script)
	stdin, _ := tine.StdinPipe()
	var out syncOutput
	tine.Stdout, tine.Stderr = &out, &out
	if err := tine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tine.Process.Kill(); tine.Wait() })
	if !testbin.Eventually(patience, func() bool { return strings.Contains(out.String(), "ready") }) {
		t.Fatalf("the attempts did not run:\n%s", out.String())
	}
	limit := ""
	for _, dir := range testbin.CgroupsOf(tine.Process.Pid) {
		for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				limit = strings.TrimSpace(string(b))
			}
		}
	}
	if limit == "" {
		t.Fatalf("control: no memory limit file for tine pid %d on the host", tine.Process.Pid)
	}
	if limit != strconv.Itoa(64*mib) {
		t.Errorf("the sandbox's memory limit on the host is %s, want %d", limit, 64*mib)
	}
	stdin.Close()
	tine.Wait()
	if s := out.String(); strings.Contains(s, "WROTE") || strings.Contains(s, "MOUNTED") || !strings.Contains(s, "attempted") || !strings.Contains(s, "has-mount") {
		t.Errorf("a cgroup attempt succeeded inside:\n%s", s)
	}
}

// syncOutput is an output buffer safe to read while a process writes it.
type syncOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *syncOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *syncOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
