// Package integration holds black-box tests of `tine run`: each test builds
// nothing itself but drives the tine binary that TestMain builds, as root,
// on the real kernel, attempts an escape or a behaviour from inside the
// sandbox, and checks its effect from the host. After every test the
// harness checks that the runs it started left nothing behind: no stage
// mounts in the host's mount table, no cgroups named after their tine
// process, no process carrying the test's marker.
package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// tineBin is the tine binary TestMain built for this run.
var tineBin string

// stageDir is where tine stages a sandbox's root; its mounts must only ever
// exist inside the sandbox's own mount namespace.
const stageDir = "/run/tine/stage"

// runLimit bounds any single tine run, so a hung sandbox fails its test
// instead of stalling the package.
const runLimit = 60 * time.Second

func TestMain(m *testing.M) { testbin.Main(m, &tineBin) }

// harness drives tine for one test and checks for leftovers at its end.
type harness struct {
	t *testing.T
	// marker is unique to the test; put it in sandboxed commands' argv so
	// the leftover check can find any process of the test still alive.
	marker string

	mu   sync.Mutex
	pids []int // host pids of the tine processes the test started
}

// setup gates t on root and registers the leftover check.
func setup(t *testing.T) *harness {
	t.Helper()
	require.Root(t)
	h := &harness{t: t, marker: "tinetest" + randHex(6)}
	t.Cleanup(h.checkLeftovers)
	return h
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// result is what one finished tine run produced.
type result struct {
	Stdout, Stderr string
	Code           int // exit code, or -1 when tine itself died of a signal
	Signal         syscall.Signal
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a tine process started by start.
type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	res            result
}

// runConfig adjusts how tine is started.
type runConfig struct {
	stdin io.Reader
	cred  *syscall.Credential // run tine as this user instead of root
	// bin is the binary to run instead of tine (tine-run, built next to it).
	bin string
	env []string // the environment instead of the test's
}

// run runs tine with args and returns when it has exited.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	return h.start(runConfig{}, args...).wait()
}

// runWith is run with a runConfig.
func (h *harness) runWith(cfg runConfig, args ...string) result {
	h.t.Helper()
	return h.start(cfg, args...).wait()
}

// start starts tine with args without waiting for it.
func (h *harness) start(cfg runConfig, args ...string) *proc {
	h.t.Helper()
	p := &proc{t: h.t, done: make(chan struct{})}
	bin := tineBin
	if cfg.bin != "" {
		bin = cfg.bin
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = "/"
	p.cmd.Stdin = cfg.stdin
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if cfg.env != nil {
		p.cmd.Env = cfg.env
	}
	if cfg.cred != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cfg.cred}
		p.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/"}
	}
	if err := p.cmd.Start(); err != nil {
		h.t.Fatalf("start tine %s: %v", strings.Join(args, " "), err)
	}
	h.mu.Lock()
	h.pids = append(h.pids, p.cmd.Process.Pid)
	h.mu.Unlock()
	go func() {
		p.cmd.Wait()
		p.res.Stdout, p.res.Stderr = p.stdout.String(), p.stderr.String()
		p.res.Code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.res.Signal = ws.Signal()
		}
		close(p.done)
	}()
	h.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// pid is the host pid of the tine process.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// wait waits for tine to exit; a run that outlives runLimit is killed and
// fails the test.
func (p *proc) wait() result {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(runLimit):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("tine %s did not end within %v; killed it\n%s", strings.Join(p.cmd.Args[1:], " "), runLimit, p.res)
	}
	return p.res
}

// waitStdout waits until tine's stdout contains s, failing the test if it
// exits or d passes first.
func (p *proc) waitStdout(s string, d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.stdout.String(), s) {
		select {
		case <-p.done:
			if strings.Contains(p.res.Stdout, s) {
				return
			}
			p.t.Fatalf("tine exited before printing %q\n%s", s, p.res)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("tine did not print %q within %v\nstdout so far:\n%s\nstderr so far:\n%s", s, d, p.stdout.String(), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostProcs returns the host pids (other than this process) whose argv
// satisfies match. Zombies have an empty argv and never match.
func hostProcs(match func(argv []string) bool) []int {
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
		if match(strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// argvContains matches any process with s in one of its arguments.
func argvContains(s string) func([]string) bool {
	return func(argv []string) bool {
		for _, a := range argv {
			if strings.Contains(a, s) {
				return true
			}
		}
		return false
	}
}

// argvIs matches processes whose argv is exactly want.
func argvIs(want ...string) func([]string) bool {
	return func(argv []string) bool {
		if len(argv) != len(want) {
			return false
		}
		for i := range want {
			if argv[i] != want[i] {
				return false
			}
		}
		return true
	}
}

// checkLeftovers fails the test if any run it started left something on
// the host. Processes get a moment to be reaped by the kernel.
func (h *harness) checkLeftovers() {
	t := h.t
	if m := testbin.StageMounts(); len(m) > 0 {
		t.Errorf("leftover: host mountinfo mentions %s:\n%s", stageDir, strings.Join(m, "\n"))
	}
	h.mu.Lock()
	pids := append([]int(nil), h.pids...)
	h.mu.Unlock()
	// A run's cgroup is removed by the cleanup it leaves (ADR 0023), a
	// moment after tine exits.
	for _, pid := range pids {
		if !testbin.Eventually(3*time.Second, func() bool { return len(testbin.CgroupsOf(pid)) == 0 }) {
			t.Errorf("leftover: cgroups of finished tine pid %d remain: %v", pid, testbin.CgroupsOf(pid))
		}
	}
	var left []int
	if !testbin.Eventually(3*time.Second, func() bool {
		left = hostProcs(argvContains(h.marker))
		return len(left) == 0
	}) {
		t.Errorf("leftover: processes carrying marker %s remain on the host: %v", h.marker, describe(left))
	}
}

// describe renders pids with their command lines for failure messages.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "\n  %d: %s", pid, strings.ReplaceAll(string(raw), "\x00", " "))
	}
	return b.String()
}

// outcome is tine's --outcome JSON.
type outcome struct {
	ExitCode int    `json:"exit_code"`
	Reason   string `json:"reason"`
	Signal   int    `json:"signal"`
	Phases   struct {
		Plan  float64 `json:"plan"`
		Start float64 `json:"start"`
		Run   float64 `json:"run"`
	} `json:"phases_ms"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	CPUTimeMs       float64 `json:"cpu_time_ms"`
	Cgroup          string  `json:"cgroup"`
	Rootless        bool    `json:"rootless"`
}

// readOutcome parses an --outcome file, also returning its raw fields.
func readOutcome(t *testing.T, file string) (outcome, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read --outcome file: %v", err)
	}
	var o outcome
	var fields map[string]any
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("parse --outcome file: %v\n%s", err, raw)
	}
	json.Unmarshal(raw, &fields)
	return o, fields
}

// startHostProcess starts a host command for the test and kills it at the end.
func startHostProcess(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s on the host: %v", name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// hostCgroupVersion says which cgroup version tine should drive here: v2
// when the unified hierarchy has the memory controller, else v1.
func hostCgroupVersion() string {
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(c), "memory") {
		return "v2"
	}
	return "v1"
}

// python is the interpreter the syscall probes use inside the sandbox.
const python = "/usr/bin/python3"
