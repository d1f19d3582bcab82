package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
)

// walls are the lines of /proc/self/status that say what holds a process.
const wallsCode = "''.join(l for l in open('/proc/self/status') if l.split(':')[0] in ('CapEff', 'CapBnd', 'NoNewPrivs', 'Seccomp', 'Seccomp_filters'))"

// A session's interpreter runs behind the same walls as any exec of its
// sandbox, in its pid namespace, and goes with it; the CLI drives it.
func TestSessionBehindTheSandboxWalls(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	mark := "TINE_SESSION_TEST=" + hex.EncodeToString(nonce[:])
	s, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Env: []string{mark}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := s.Run(ctx, "print(open('/proc/self/status').read().count('\\n') > 0)\n"+wallsCode)
	if err != nil || ex.Status != api.ExecOK {
		t.Fatalf("walls cell: %+v %v", ex, err)
	}
	var walls string
	if r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"python3", "-c", "print(" + wallsCode + ", end='')"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	} else {
		walls = string(r.Stdout)
	}
	if !strings.Contains(walls, "Seccomp:\t2") || !strings.Contains(walls, "NoNewPrivs:\t1") {
		t.Fatalf("the exec's walls are not what this test expects (negative control): %q", walls)
	}
	if got := ex.Text(); got != pyRepr(walls) {
		t.Fatalf("the session's walls differ from an exec's:\nsession %s\nexec    %s", got, pyRepr(walls))
	}
	info, err := s.Info(ctx)
	if err != nil || info.Pid <= 1 || info.Pid > 1000 {
		t.Fatalf("the interpreter's pid is not the sandbox's: %+v %v", info, err)
	}

	// The CLI: run prints the output and the last value; a raise exits 1.
	sock := "--socket=" + d.sock
	out, err := exec.Command(tineBin, "session", "run", sock, s.ID, "-c", "y = 6 * 7\nprint('hi')\ny").CombinedOutput()
	if err != nil || string(out) != "hi\n42\n" {
		t.Fatalf("tine session run: %v %q", err, out)
	}
	out, err = exec.Command(tineBin, "session", "run", sock, sb.ID+"/"+s.ID, "-c", "undefined_name").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "NameError: name 'undefined_name' is not defined") {
		t.Fatalf("tine session run of a raising cell: %v %q", err, out)
	}
	attach := exec.Command(tineBin, "session", "attach", sock, s.ID)
	attach.Stdin = strings.NewReader("for i in range(2):\n    print('loop', i)\n\ny + 1\n")
	out, err = attach.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "loop 0\nloop 1\n") || !strings.Contains(string(out), "43\n") {
		t.Fatalf("tine session attach: %v %q", err, out)
	}
	// Ctrl-C interrupts the cell, not the session.
	run := exec.Command(tineBin, "session", "run", sock, s.ID, "-c", "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)")
	stdout, _ := run.StdoutPipe()
	var stderr strings.Builder
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "looping\n" {
		t.Fatalf("the looping cell did not start: %q %v", line, err)
	}
	run.Process.Signal(syscall.SIGINT)
	err = run.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "KeyboardInterrupt") {
		t.Fatalf("tine session run after Ctrl-C: %v %q", err, stderr.String())
	}
	if ex, err := s.Run(ctx, "y"); err != nil || ex.Text() != "42" {
		t.Fatalf("the session after an interrupt: %+v %v", ex, err)
	}
	out, err = exec.Command(tineBin, "session", "ls", sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), s.ID) {
		t.Fatalf("tine session ls: %v %q", err, out)
	}

	// The session goes with its sandbox: nothing of the interpreter is left
	// (found first, so that the search is known to work).
	if pids := withEnv(mark); len(pids) != 1 {
		t.Fatalf("the interpreter is not found by its environment: %v", pids)
	}
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if pids := withEnv(mark); len(pids) > 0 {
		t.Fatalf("interpreters left after their sandbox went: %v", pids)
	}
}

// withEnv lists the host's processes whose environment holds entry.
func withEnv(entry string) []string {
	var pids []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		b, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), entry) {
			pids = append(pids, d.Name())
		}
	}
	return pids
}

// pyRepr is Python's repr of a str without quotes or backslashes but \t
// and \n, enough for /proc status lines.
func pyRepr(s string) string {
	return "'" + strings.NewReplacer("\t", `\t`, "\n", `\n`).Replace(s) + "'"
}
