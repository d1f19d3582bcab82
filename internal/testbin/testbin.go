// Package testbin serves the black-box tests (test/...): it builds the
// tine binary from the module the tests run in, and finds what a run left
// on the host.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/sandbox"
)

// Build compiles tine into dir with `make build` (the Makefile owns the
// build flags: dir/tine pure Go, dir/tine-guest with libjpeg-turbo, which
// the daemon runs in desktops) and returns tine's path.
func Build(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside the tine module (got %q)", gomod)
	}
	bin := filepath.Join(dir, "tine")
	build := exec.Command("make", "-s", "build", "BIN="+bin, "GO="+goTool)
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make build: %w\n%s", err, out)
	}
	return bin, nil
}

// StageMounts returns the host mount table's lines that mention tine's
// stage directory: a sandbox that leaked its mounts shows up here.
func StageMounts() []string {
	raw, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, sandbox.StageDir) {
			out = append(out, line)
		}
	}
	return out
}

// CgroupsOf returns the sandbox cgroups owned by tine process pid (their
// names start with its pid and start time).
func CgroupsOf(pid int) []string {
	dirs, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/tine/%d.*", pid))
	more, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/tine/%d.*", pid))
	return append(dirs, more...)
}

// Main is a black-box test package's TestMain: it builds tine into a
// temporary directory (world-readable, so a test's unprivileged user can
// run it), stores the binary's path in *bin, runs the tests, removes the
// directory, and exits with the tests' code.
func Main(m *testing.M, bin *string) {
	dir, err := os.MkdirTemp("", "tine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	code := func() int {
		defer os.RemoveAll(dir)
		path, err := Build(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testbin:", err)
			return 1
		}
		*bin = path
		return m.Run()
	}()
	os.Exit(code)
}

// Eventually polls cond every 20 ms until it holds or d has passed, and
// says whether it held: a black-box test waits for what another process
// does this way, bounded, never by a fixed sleep.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
