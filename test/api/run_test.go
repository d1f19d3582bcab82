package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunHandoff: `tine run` with a daemon on its socket hands the run over
// with its own stdio, and exits as an in-process run would.
func TestRunHandoff(t *testing.T) {
	d := startDaemon(t)
	run := func(stdin string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(tineBin, append([]string{"run", "--socket", d.sock, "--verbose"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("tine run: %v", err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	outcome := filepath.Join(t.TempDir(), "outcome.json")
	stdout, stderr, code := run("from the CLI's stdin\n", "--outcome", outcome, "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3")
	if code != 3 || stdout != "from the CLI's stdin\n" || !strings.Contains(stderr, "to-stderr") {
		t.Fatalf("handed run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "handed to the daemon on "+d.sock) {
		t.Fatalf("tine run -v does not say it handed the run to the daemon: %q", stderr)
	}
	raw, err := os.ReadFile(outcome)
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		ExitCode int    `json:"exit_code"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.ExitCode != 3 || o.Reason != "exit" {
		t.Fatalf("--outcome: %v %s", err, raw)
	}
	// A spec the pool cannot take (its own hostname) runs in a fresh sandbox.
	stdout, stderr, code = run("", "--hostname", "fresh", "--memory", "64m", "--", "hostname")
	if code != 0 || stdout != "fresh\n" || !strings.Contains(stderr, "a fresh sandbox") {
		t.Fatalf("fresh sandbox run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	_, stderr, code = run("", "--", "/no/such/program")
	if code != 127 || !strings.Contains(stderr, "not found") {
		t.Fatalf("missing program: exit %d, stderr %q", code, stderr)
	}
}
