package security

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/require"
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
