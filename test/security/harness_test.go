// Package security holds tine's security suite: black-box attempts to get
// out of a sandbox — at the host, the daemon, other sandboxes — made with
// the built binary and a real daemon, as root, on the real kernel. Every
// attempt first proves that it ran (a negative control: the same operation
// succeeds on the host or in a permissive setting, the tool exists inside,
// the target exists on the host), then checks its effect. docs/security.md
// lists every attempt with the test that makes it.
package security

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// tineBin is the binary TestMain built.
var tineBin string

// patience bounds every wait: a deadline for a hang, not a timing assertion.
const patience = time.Minute

// python is the interpreter the probes run, inside and on the host.
const python = "/usr/bin/python3"

func TestMain(m *testing.M) { testbin.Main(m, &tineBin) }

// gate is what every test here needs: root, and the walls the suite tests.
func gate(t *testing.T) {
	t.Helper()
	require.Root(t)
	require.Feature(t, "seccomp")
	require.Landlock(t, 1)
	require.Binary(t, python)
}

func marker() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// result is one finished `tine run`.
type result struct {
	Stdout, Stderr string
	Code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// tineRun runs `tine run --in-process ARGS` (in-process, so a daemon some
// other test started cannot take the run) and checks afterwards that it
// left no cgroup and no stage mount behind.
func tineRun(t *testing.T, args ...string) result {
	t.Helper()
	return tineRunCmd(t, nil, args...)
}

// tineRunCmd is tineRun with a hook to adjust the command before it starts.
func tineRunCmd(t *testing.T, adjust func(*exec.Cmd), args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, tineBin, append([]string{"run", "--in-process"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Dir = &stdout, &stderr, "/"
	if adjust != nil {
		adjust(cmd)
	}
	err := cmd.Run()
	r := result{Stdout: stdout.String(), Stderr: stderr.String(), Code: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		t.Fatalf("tine run %s did not end within %v\n%s", strings.Join(args, " "), patience, r)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("tine run: %v", err)
	}
	// The cleanup tine run leaves removes them a moment after it exits
	// (ADR 0023).
	if !testbin.Eventually(3*time.Second, func() bool { return len(testbin.CgroupsOf(cmd.Process.Pid)) == 0 }) {
		t.Errorf("leftover cgroups of tine pid %d: %v", cmd.Process.Pid, testbin.CgroupsOf(cmd.Process.Pid))
	}
	return r
}

// sh runs a shell script in a fresh sandbox with extra tine run flags.
func sh(t *testing.T, script string, flags ...string) result {
	t.Helper()
	return tineRun(t, append(flags, "--", "/bin/sh", "-c", script)...)
}

// py runs a Python program in a fresh sandbox with extra tine run flags.
func py(t *testing.T, program string, flags ...string) result {
	t.Helper()
	return tineRun(t, append(flags, "--", python, "-u", "-c", program)...)
}

// lines maps "key value..." lines of out to their values.
func lines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k != "" {
			m[k] = v
		}
	}
	return m
}

// hostDirWithSecret makes a host directory under the host's /tmp (which no
// sandbox sees: each mounts its own tmpfs there) holding a file with a
// unique content, and returns both.
func hostDirWithSecret(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = t.TempDir()
	secret = "host-secret-" + marker()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

// daemon is one `tine serve` on a socket in a temporary directory.
type daemon struct {
	t    *testing.T
	dir  string
	sock string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	c    *client.Client
}

// startDaemon starts `tine serve` with its socket and data in a fresh
// directory and stops it (SIGTERM) when the test ends.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startDaemonAt(t, filepath.Join(t.TempDir(), "tine.sock"), args...)
}

// startDaemonAt is startDaemon with the socket at sock.
func startDaemonAt(t *testing.T, sock string, args ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{t: t, dir: dir, sock: sock, done: make(chan struct{}), log: filepath.Join(dir, "serve.log")}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	// Its own state directory: the default one may be held by another
	// daemon on the host, and one daemon holds a state directory.
	base := []string{"serve", "--socket", sock, "--data-dir", filepath.Join(dir, "data"), "--state-dir", filepath.Join(dir, "state"), "--pool", "0"}
	d.cmd = exec.Command(tineBin, append(base, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start tine serve: %v", err)
	}
	logf.Close()
	go func() {
		d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("daemon log (pid %d):\n%s", d.cmd.Process.Pid, b)
		}
	})
	d.c = client.NewUnix(sock)
	if !testbin.Eventually(patience, func() bool {
		select {
		case <-d.done:
			return true
		default:
		}
		_, err := d.c.Health(context.Background())
		return err == nil
	}) {
		t.Fatalf("tine serve did not answer on %s", sock)
	}
	if !d.alive() {
		b, _ := os.ReadFile(d.log)
		t.Fatalf("tine serve exited at start:\n%s", b)
	}
	return d
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

func (d *daemon) stop() {
	if !d.alive() {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(patience):
		d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("tine serve ignored SIGTERM for %v; killed it", patience)
	}
}

// healthy fails the test unless the daemon still runs and answers.
func (d *daemon) healthy(after string) {
	d.t.Helper()
	if !d.alive() {
		d.t.Fatalf("the daemon died after %s", after)
	}
	if _, err := d.c.Health(context.Background()); err != nil {
		d.t.Fatalf("the daemon stopped answering after %s: %v", after, err)
	}
}

// hostPidsWith returns the host pids with s in their argv.
func hostPidsWith(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(raw), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostPidsArgv returns the host pids whose argv is exactly argv.
func hostPidsArgv(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	var pids []int
	for _, pid := range hostPidsWith(argv[len(argv)-1]) {
		if raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(raw) == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// readAll reads rc to its end and closes it.
func readAll(rc io.ReadCloser) []byte {
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return b
}
