package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// criuTimeout bounds `criu --version` and `criu check` together.
const criuTimeout = 10 * time.Second

// MinCRIU is the oldest criu the memory snapshot tier is tested with; older
// releases fail `criu check` on kernels >= 6.13 ("Unexpected rt vDSO area
// bounds").
const MinCRIU = "4.1"

const criuFix = "install criu >= " + MinCRIU + " (older releases fail `criu check` on kernels >= 6.13; " +
	"on Debian 12, scripts/install-criu puts Debian 13's criu in " + PrivateCRIU + " without touching the system; " +
	"or set TINE_CRIU to a working criu)"

// PrivateCRIU is where scripts/install-criu puts criu: a private prefix
// holding Debian 13's criu with its own loader and libraries.
const PrivateCRIU = "/opt/tine/criu/bin/criu"

// CRIUPath says which criu tine uses: $TINE_CRIU when set, else the private
// prefix when it holds one, else criu on PATH (often an older
// distribution package, hence last).
func CRIUPath() (string, error) {
	if p := os.Getenv("TINE_CRIU"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("TINE_CRIU=%s: %w", p, err)
		}
		return p, nil
	}
	if _, err := exec.LookPath(PrivateCRIU); err == nil {
		return PrivateCRIU, nil
	}
	p, err := exec.LookPath("criu")
	if err != nil {
		return "", errors.New("criu not found (TINE_CRIU unset, no " + PrivateCRIU + ", none on PATH)")
	}
	return p, nil
}

// checkCRIU finds criu, reads its version and runs `criu check`, which
// tests the kernel features checkpoint/restore needs.
func checkCRIU() Check {
	path, err := CRIUPath()
	if err != nil {
		return Check{Detail: err.Error(), Fix: criuFix}
	}
	ctx, cancel := context.WithTimeout(context.Background(), criuTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	version := parseCRIUVersion(string(out))
	if err != nil || version == "" {
		return Check{Detail: fmt.Sprintf("%s --version: %s", path, firstLine(string(out), err)), Fix: criuFix}
	}
	found := "criu " + version + " at " + path
	if os.Geteuid() != 0 {
		return Check{Detail: found + "; `criu check` not run: needs root", Version: version, Fix: "run tine doctor as root to run `criu check`"}
	}
	out, err = exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err != nil {
		why := criuError(string(out))
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = fmt.Sprintf("timed out after %s", criuTimeout)
		} else if why == "" {
			why = firstLine(string(out), err)
		}
		return Check{Detail: found + ", `criu check` failed: " + why, Version: version, Fix: criuFix}
	}
	if !VersionAtLeast(version, MinCRIU) {
		return Check{Detail: found + ": older than " + MinCRIU, Version: version, Fix: criuFix}
	}
	return Check{OK: true, Detail: found + ", `criu check` passed", Version: version}
}

// parseCRIUVersion picks the version out of `criu --version` output
// ("Version: 3.17.1", then maybe a "GitID:" line).
func parseCRIUVersion(out string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// criuError picks the first useful error of `criu check` output: criu
// prefixes errors with "Error (file.c:line): " and starts with generic ones
// about helper processes ("exited, status=1") before the cause.
func criuError(out string) string {
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "Error (")
		if !ok {
			continue
		}
		if _, msg, ok := strings.Cut(rest, "): "); ok {
			line = msg
		}
		if strings.HasPrefix(line, "exited, status=") || strings.HasPrefix(line, "killed by signal") {
			continue
		}
		return line
	}
	return ""
}

// firstLine returns the first non-empty line of out, or err's text.
func firstLine(out string, err error) string {
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	if err != nil {
		return err.Error()
	}
	return "no output"
}

func checkXvfb() Check {
	path, err := exec.LookPath("Xvfb")
	if err != nil {
		return Check{Detail: "Xvfb not found on PATH", Fix: "apt-get install xvfb"}
	}
	return Check{OK: true, Detail: "Xvfb at " + path}
}

func checkBwrap() Check {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return Check{Detail: "bwrap not found on PATH", Fix: "apt-get install bubblewrap"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "--version").Output()
	// "bubblewrap 0.8.0"
	version := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap"))
	if version == "" {
		return Check{OK: true, Detail: "bwrap at " + path}
	}
	return Check{OK: true, Detail: fmt.Sprintf("bubblewrap %s at %s", version, path), Version: version}
}

// sandboxPath is the PATH a sandbox's commands get by default
// (sandbox.DefaultPath): a session's python3 is the first found there.
var sandboxPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

func checkMatplotlib() Check {
	python := ""
	for _, dir := range sandboxPath {
		if st, err := os.Stat(dir + "/python3"); err == nil && st.Mode().IsRegular() {
			python = dir + "/python3"
			break
		}
	}
	if python == "" {
		return Check{Detail: "no python3 on a sandbox's PATH (" + strings.Join(sandboxPath, ":") + ")", Fix: "apt-get install python3 python3-matplotlib"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import matplotlib; print(matplotlib.__version__)").Output()
	if err != nil {
		return Check{Detail: python + " cannot import matplotlib", Fix: "apt-get install python3-matplotlib"}
	}
	v := strings.TrimSpace(string(out))
	return Check{OK: true, Detail: "matplotlib " + v + " for " + python, Version: v}
}
