package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/testbin"
)

// make build installs tine as the small front, which runs `tine run` in
// its own process, and tine-full, which it execs for every other command
// (ADR 0023): a run must not pay the full program's start, and every
// other command must still be there.
func TestFrontRunsRunItselfAndExecsTheRest(t *testing.T) {
	h := setup(t)
	full := tineBin + "-full"
	// The front is the small binary, the file tine-run is too.
	small, err := os.Stat(tineBin + "-run")
	if err != nil {
		t.Fatal(err)
	}
	p := h.start(runConfig{}, "run", "--in-process", "--", "sh", "-c", "echo ready-"+h.marker+"; sleep 100")
	p.waitStdout("ready-"+h.marker, 20*time.Second)
	if exe, err := os.Stat("/proc/" + strconv.Itoa(p.pid()) + "/exe"); err != nil || !os.SameFile(exe, small) {
		target, _ := os.Readlink("/proc/" + strconv.Itoa(p.pid()) + "/exe")
		t.Errorf("tine run's process runs %s (%v), want the small front (the file %s-run is)", target, err, tineBin)
	}
	p.cmd.Process.Kill()
	p.wait()

	// The front cannot print the full command list itself: that it does
	// is the exec of tine-full (negative control: the full program prints
	// the same).
	for _, bin := range []string{tineBin, full} {
		r := h.runWith(runConfig{bin: bin}, "--help")
		if r.Code != 0 || !strings.Contains(r.Stdout, "serve") || !strings.Contains(r.Stdout, "snapshot") {
			t.Errorf("%s --help: want tine's command list, got:\n%s", bin, r)
		}
	}
	// The daemon that `tine serve` starts is the full program's process.
	dir := t.TempDir()
	d := h.start(runConfig{}, "serve", "--socket", filepath.Join(dir, "s.sock"), "--data-dir", filepath.Join(dir, "data"), "--pool", "0")
	var exe string
	if !testbin.Eventually(20*time.Second, func() bool {
		exe, _ = os.Readlink("/proc/" + strconv.Itoa(d.pid()) + "/exe")
		return exe == full
	}) {
		t.Errorf("tine serve's process runs %q, want %s", exe, full)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait()
}

// A front installed without tine-full still runs `tine run`, and says for
// every other command what is missing and what to do.
func TestFrontWithoutTheFullProgram(t *testing.T) {
	h := setup(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	raw, err := os.ReadFile(tineBin)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "tine")
	if err := os.WriteFile(lone, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	r := h.runWith(runConfig{bin: lone}, "run", "--in-process", "--", "sh", "-c", "exit 7")
	if r.Code != 7 {
		t.Errorf("a lone front's tine run: exit %d, want the command's 7\n%s", r.Code, r)
	}
	r = h.runWith(runConfig{bin: lone, env: []string{"PATH=/usr/bin:/bin"}}, "ps")
	if r.Code != 1 || !strings.Contains(r.Stderr, "tine-full") || !strings.Contains(r.Stderr, "make build") ||
		strings.Count(strings.TrimSuffix(r.Stderr, "\n"), "\n") != 0 {
		t.Errorf("a lone front's tine ps: want exit 1 and one line naming tine-full and make build, got:\n%s", r)
	}
}
