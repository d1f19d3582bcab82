// Package api_test holds black-box tests of the daemon: TestMain builds the
// tine binary, each test starts `tine serve` on a socket in a temporary
// directory and drives it only through package client, as root, on the
// real kernel. Effects are checked from the host: processes found by a
// unique marker in their argv, the host's mount table, cgroup directories.
package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// tineBin is the binary TestMain built.
var tineBin string

// stageDir is where sandboxes stage their roots, only ever inside their own
// mount namespaces.
const stageDir = "/run/tine/stage"

// patience bounds every wait of these tests; it is a deadline for a hang,
// not a timing assertion.
const patience = time.Minute

func TestMain(m *testing.M) { testbin.Main(m, &tineBin) }

// daemon is one `tine serve` process.
type daemon struct {
	t    *testing.T
	dir  string
	sock string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	c    *client.Client
}

// startDaemon gates t on root and starts a daemon in a fresh directory.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	require.Root(t)
	return startDaemonIn(t, t.TempDir(), args...)
}

// defaultDataDir, among a daemon's args, leaves its --data-dir at the
// default instead of dir/data.
const defaultDataDir = "<default data dir>"

// startDaemonIn starts a daemon with its socket and data in dir, and
// stops it (SIGTERM) when the test ends.
func startDaemonIn(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, dir: dir, sock: filepath.Join(dir, "tine.sock"), done: make(chan struct{})}
	logf, err := os.CreateTemp(dir, "serve-*.log")
	if err != nil {
		t.Fatal(err)
	}
	d.log = logf.Name()
	base := []string{"serve", "--socket", d.sock, "--debug", "--state-dir", filepath.Join(dir, "state")}
	if i := slices.Index(args, defaultDataDir); i >= 0 {
		args = slices.Delete(slices.Clone(args), i, i+1)
	} else {
		base = append(base, "--data-dir", filepath.Join(dir, "data"))
	}
	d.cmd = exec.Command(tineBin, append(base, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// A test binary killed on a timeout takes its daemons along.
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
			t.Logf("daemon log (pid %d):\n%s", d.pid(), b)
		}
	})
	d.c = client.NewUnix(d.sock)
	if !testbin.Eventually(patience, func() bool {
		select {
		case <-d.done:
			return true
		default:
		}
		_, err := d.c.Health(context.Background())
		return err == nil
	}) {
		t.Fatalf("tine serve did not answer on %s", d.sock)
	}
	select {
	case <-d.done:
		b, _ := os.ReadFile(d.log)
		t.Fatalf("tine serve exited at start:\n%s", b)
	default:
	}
	return d
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop ends the daemon with SIGTERM (SIGKILL if it hangs) and waits.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
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

// kill ends the daemon with SIGKILL and waits, as a crash would.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// marker returns a string unique to this call, to put in a command's argv.
func marker() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sleeper is an argv that sleeps for an hour with a unique, findable
// argument: both the shell and its sleep carry the marker.
func sleeper(mark string) []string {
	n, _ := strconv.ParseUint(mark[:8], 16, 64)
	arg := fmt.Sprintf("3600.%d", n)
	return []string{"/bin/sh", "-c", "sleep " + arg + "; echo " + arg}
}

// sleeperArg is what sleeper(mark) puts in every argv it makes.
func sleeperArg(mark string) string {
	n, _ := strconv.ParseUint(mark[:8], 16, 64)
	return fmt.Sprintf("3600.%d", n)
}

// hostProcs returns the host pids (other than this process) with s in an
// argument of their argv.
func hostProcs(s string) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(raw) == 0 {
			continue
		}
		if strings.Contains(string(raw), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// freePort returns a loopback TCP address nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// parallelErrors collects errors from goroutines.
type parallelErrors struct {
	mu   sync.Mutex
	errs []string
}

func (p *parallelErrors) add(format string, args ...any) {
	p.mu.Lock()
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
	p.mu.Unlock()
}

// describe renders pids with their command lines, for failure messages.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "\n  %d: %s", pid, strings.ReplaceAll(strings.TrimSuffix(string(raw), "\x00"), "\x00", " "))
	}
	return b.String()
}
