package integration

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
)

// --hostname sets the sandbox's host name and leaves the host's alone.
func TestHostnamePrivate(t *testing.T) {
	h := setup(t)
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name := "foo" + h.marker[len(h.marker)-6:]
	r := h.run("run", "--hostname", name, "--", "hostname")
	if r.Code != 0 || r.Stdout != name+"\n" {
		t.Errorf("--hostname %s: want %q, got:\n%s", name, name, r)
	}
	if r := h.run("run", "--", "hostname"); r.Stdout != "tine\n" {
		t.Errorf("default host name: want tine, got:\n%s", r)
	}
	if after, _ := os.Hostname(); after != before {
		t.Errorf("the host's name changed from %q to %q", before, after)
	}
}

// tine exits with the command's code, 128+N on signal N, 127 when the
// command is missing, 2 on bad flags and 1 when setup fails.
func TestExitSemantics(t *testing.T) {
	h := setup(t)
	missing := "nosuchcmd-" + h.marker
	for _, c := range []struct {
		name       string
		args       []string
		code       int
		stderr     string   // exact stderr, when set
		stderrHas  []string // substrings stderr must have
		stderrLine bool     // stderr must be one line
	}{
		{name: "exit 7", args: []string{"--", "sh", "-c", "exit 7"}, code: 7},
		{name: "SIGTERM", args: []string{"--", "sh", "-c", "kill -TERM $$"}, code: 143},
		{name: "SIGKILL", args: []string{"--", "sh", "-c", "kill -KILL $$"}, code: 137},
		{name: "not found", args: []string{"--", missing}, code: 127, stderr: "tine: " + missing + ": not found in sandbox\n"},
		{name: "bad --memory", args: []string{"--memory", "12q", "--", "true"}, code: 2, stderrHas: []string{"--memory"}, stderrLine: true},
		{name: "missing --rootfs", args: []string{"--rootfs", "/nonexistent-" + h.marker, "--", "true"}, code: 1,
			stderrHas: []string{"--rootfs", "/nonexistent-" + h.marker, "no such file"}},
		// What tine-run does not parse itself it hands to tine run.
		{name: "unknown flag", args: []string{"--bogus-" + h.marker, "--", "true"}, code: 2, stderrHas: []string{"unknown flag: --bogus-" + h.marker}, stderrLine: true},
		{name: "no command", args: nil, code: 2, stderrHas: []string{"no command given"}, stderrLine: true},
		{name: "image flag", args: []string{"--image", "busybox", "--pull", "sometimes-" + h.marker, "--", "true"}, code: 2, stderrHas: []string{"invalid --pull", "sometimes-" + h.marker}, stderrLine: true},
	} {
		// tine run (the front, which runs it itself), tine-run (the same
		// file, tine run alone) and the full program's tine run must
		// answer alike.
		for _, how := range []struct {
			name string
			cfg  runConfig
			args []string
		}{{"tine run", runConfig{}, []string{"run"}}, {"tine-run", runConfig{bin: tineBin + "-run"}, nil},
			{"tine-full run", runConfig{bin: tineBin + "-full"}, []string{"run"}}} {
			t.Run(how.name+"/"+c.name, func(t *testing.T) {
				r := h.runWith(how.cfg, append(how.args, c.args...)...)
				if r.Code != c.code {
					t.Errorf("exit %d, want %d\n%s", r.Code, c.code, r)
				}
				if c.stderr != "" && r.Stderr != c.stderr {
					t.Errorf("stderr %q, want %q", r.Stderr, c.stderr)
				}
				for _, s := range c.stderrHas {
					if !strings.Contains(r.Stderr, s) {
						t.Errorf("stderr %q lacks %q", r.Stderr, s)
					}
				}
				if c.stderrLine && strings.Count(strings.TrimSuffix(r.Stderr, "\n"), "\n") != 0 {
					t.Errorf("stderr is not one line: %q", r.Stderr)
				}
			})
		}
	}
}

// A signal sent to tine reaches the command, whose trap runs.
func TestSignalForwarded(t *testing.T) {
	h := setup(t)
	p := h.start(runConfig{}, "run", "--", "sh", "-c",
		`trap "echo got-term; exit 3" TERM; echo trap-set `+h.marker+`; sleep 100 & wait`)
	p.waitStdout("trap-set", 20*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait()
	if !strings.Contains(r.Stdout, "got-term") || r.Code != 3 {
		t.Errorf("SIGTERM to tine: want the command's trap to print got-term and exit 3, got:\n%s", r)
	}
}

// stdin passes through to the command.
func TestStdinPassesThrough(t *testing.T) {
	h := setup(t)
	data := "data-" + h.marker + "\nsecond line\n"
	r := h.runWith(runConfig{stdin: strings.NewReader(data)}, "run", "--", "cat")
	if r.Code != 0 || r.Stdout != data {
		t.Errorf("echo data | tine run -- cat: want %q, got:\n%s", data, r)
	}
}

// --outcome reports the run with sane values.
func TestOutcomeFile(t *testing.T) {
	h := setup(t)
	out := filepath.Join(t.TempDir(), "outcome.json")
	r := h.run("run", "--outcome", out, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 5")
	if r.Code != 5 {
		t.Fatalf("exit %d, want 5\n%s", r.Code, r)
	}
	o, fields := readOutcome(t, out)
	for _, f := range []string{"exit_code", "reason", "phases_ms", "peak_memory_bytes", "cpu_time_ms", "cgroup", "rootless"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("outcome lacks %q: %v", f, fields)
		}
	}
	if o.ExitCode != 5 || o.Reason != "exit" {
		t.Errorf("outcome: exit_code %d, reason %q; want 5, exit", o.ExitCode, o.Reason)
	}
	if o.Phases.Plan <= 0 || o.Phases.Start <= 0 || o.Phases.Run <= 0 {
		t.Errorf("outcome: phases_ms %+v, want all > 0", o.Phases)
	}
	if o.PeakMemoryBytes <= 0 || o.CPUTimeMs <= 0 {
		t.Errorf("outcome: peak_memory_bytes %d, cpu_time_ms %v; want both > 0", o.PeakMemoryBytes, o.CPUTimeMs)
	}
	if want := hostCgroupVersion(); o.Cgroup != want {
		t.Errorf("outcome: cgroup %q, want %q on this host", o.Cgroup, want)
	}
	if o.Rootless {
		t.Errorf("outcome: rootless true for a run as root")
	}
}

// An unprivileged user runs tine rootless: the command is root in its user
// namespace; cgroup limits are refused with a clear message.
func TestRootless(t *testing.T) {
	h := setup(t) // root is needed to create the user
	require.Feature(t, "userns")
	require.Binary(t, "useradd")
	require.Binary(t, "userdel")
	name := "tinetest-" + h.marker[len(h.marker)-8:]
	if out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v\n%s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	as := runConfig{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}

	// Negative check: the user really is unprivileged on the host.
	if out, err := exec.Command("id", "-u", name).Output(); err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Fatalf("id -u %s: %q, %v", name, out, err)
	}
	out := filepath.Join(t.TempDir(), "outcome.json")
	// t.TempDir's directory and its parent are private to root: open both
	// to the user, who writes the outcome file.
	os.Chmod(filepath.Dir(out), 0o777)
	os.Chmod(filepath.Dir(filepath.Dir(out)), 0o755)
	r := h.runWith(as, "run", "--outcome", out, "--", "sh", "-c", "id -u; echo x > /etc/rootless-"+h.marker+" && echo wrote")
	if r.Code != 0 || r.Stdout != "0\nwrote\n" {
		t.Errorf("rootless `tine run -- id -u` as uid %d: want 0 and a write to /etc inside, got:\n%s", uid, r)
	} else if o, _ := readOutcome(t, out); !o.Rootless {
		t.Errorf("rootless run: outcome says rootless false")
	}
	if _, err := os.Stat("/etc/rootless-" + h.marker); err == nil {
		os.Remove("/etc/rootless-" + h.marker)
		t.Errorf("a rootless sandbox's write to /etc reached the host")
	}

	// The os host view applies rootless too: a world-readable file in /srv,
	// which (negative control) the user reads on the host, is hidden.
	dir := "/srv/tinehv-" + h.marker
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(dir+"/data", []byte("token-"+h.marker), 0o644); err != nil {
		t.Fatal(err)
	}
	cat := exec.Command("cat", dir+"/data")
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: as.cred}
	if out, err := cat.Output(); err != nil || !strings.Contains(string(out), "token-") {
		t.Fatalf("negative control: the user cannot read %s/data on the host: %v %q", dir, err, out)
	}
	r = h.runWith(as, "run", "--", "sh", "-c", "echo started; cat "+dir+"/data")
	if !strings.HasPrefix(r.Stdout, "started\n") || strings.Contains(r.Stdout, "token-") {
		t.Errorf("rootless: /srv's data is readable inside (or the run failed): %s", r)
	}

	r = h.runWith(as, "run", "--memory", "64m", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--memory") || !strings.Contains(r.Stderr, "root") {
		t.Errorf("rootless --memory 64m: want a failure naming --memory and root, got:\n%s", r)
	}
}
