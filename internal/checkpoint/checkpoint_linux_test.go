package checkpoint

import (
	"context"
	"fmt"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
)

// counter holds its state only in its heap: a nonce drawn at start and a
// count it keeps raising; it holds a file open in /tmp and a socket bound
// in /run. On SIGUSR1 it writes its pid, nonce, count, a
// fresh draw of its random generator and how an attempt to create a
// device node ended (Landlock forbids it in every sandbox, though the
// capabilities, seccomp and mounts allow it) to /tmp/state.
const counter = mknod + `
import socket
# Held open across the dump: a file in /tmp and a unix socket bound in
# /run, both on tmpfs mounts of the sandbox (no quote here: the shell).
held = open("/tmp/held", "a")
held.write("x")
held.flush()
srv = socket.socket(socket.AF_UNIX)
srv.bind("/run/counter.sock")
srv.listen()
nonce = random.getrandbits(64)
count = 0
def report(sig, frame):
    with open("/tmp/state.new", "w") as f:
        f.write("%d %d %d %d %s\n" % (os.getpid(), nonce, count, random.getrandbits(64), mknod()))
    os.rename("/tmp/state.new", "/tmp/state")
signal.signal(signal.SIGUSR1, report)
open("/tmp/ready", "w").close()
while True:
    count += 1
    time.sleep(0.001)
`

// mknod tries to create a device node in the working directory.
const mknod = `
import errno, os, random, signal, stat, time
def mknod():
    try:
        os.mknod("node", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        os.unlink("node")
        return "made"
    except OSError as e:
        return errno.errorcode[e.errno]
`

// run runs a shell command in sb through its PID 1 and returns its output.
func run(t *testing.T, sb *sandbox.Sandbox, script string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l, err := sb.Launch(&sandbox.ExecSpec{Args: []string{"/bin/sh", "-c", script}, Stdio: [3]*os.File{nil, w, w}})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("launch %q: %v", script, err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	o, err := l.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if o.ExitCode != 0 {
		t.Fatalf("%q exited %d: %s", script, o.ExitCode, out)
	}
	return string(out)
}

// state asks the counter in sb for its state.
type state struct {
	pid, nonce, count, draw uint64
	mknod                   string
}

func readState(t *testing.T, sb *sandbox.Sandbox, pid uint64) state {
	t.Helper()
	// Bounded, so a counter that does not answer fails the test with what
	// the sandbox shows of it rather than hanging it.
	out := run(t, sb, fmt.Sprintf(`rm -f /tmp/state; kill -USR1 %d || exit 1; i=0
while [ ! -s /tmp/state ] && [ $i -lt 2000 ]; do sleep 0.005; i=$((i+1)); done
cat /tmp/state || { grep -E "State|SigBlk|SigCgt" /proc/%d/status; ls -l /proc/%d/fd; exit 1; }`, pid, pid, pid))
	var s state
	if _, err := fmt.Sscan(out, &s.pid, &s.nonce, &s.count, &s.draw, &s.mknod); err != nil {
		t.Fatalf("counter state %q: %v", out, err)
	}
	return s
}

// holds reports whether the process under sb's PID 1 has path open, as
// the host sees it (a replica's own commands may not read the fds of a
// restored process: ADR 0016).
func holds(t *testing.T, sb *sandbox.Sandbox, path string) bool {
	t.Helper()
	kids, err := children(sb.Pid())
	if err != nil || len(kids) != 1 {
		t.Fatalf("the restored processes under PID 1: %v %v", kids, err)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", kids[0]))
	for _, fd := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", kids[0], fd.Name())); l == path {
			return true
		}
	}
	return false
}

func newSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Create(&sandbox.Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64, MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy() })
	return sb
}

func TestRestoredCounterContinues(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "python3")
	require.Landlock(t, 1)
	// The control: outside any sandbox the same attempt makes the node.
	host := exec.Command("python3", "-c", mknod+"print(mknod())")
	host.Dir = t.TempDir()
	if out, err := host.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "made" {
		t.Fatalf("control: creating a device node on the host: %q %v", out, err)
	}
	tier := New()
	if err := tier.Usable(); err != nil {
		t.Fatal(err)
	}
	golden := newSandbox(t)
	out := run(t, golden, "cd /tmp && python3 -c '"+counter+"' </dev/null >/dev/null 2>&1 & echo $!; while [ ! -e /tmp/ready ]; do sleep 0.005; done")
	var pid uint64
	fmt.Sscan(out, &pid)
	before := readState(t, golden, pid)
	if before.mknod != "EACCES" {
		t.Fatalf("in the golden, creating a device node ended %q, want EACCES (Landlock)", before.mknod)
	}

	dir := filepath.Join(t.TempDir(), "memory")
	d, err := tier.Dump(golden, dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Processes != 1 {
		t.Errorf("dumped %d processes, want 1 (the counter)", d.Processes)
	}
	// Stopped until resumed: it does not count (nor answer) meanwhile.
	if st := run(t, golden, fmt.Sprintf("cut -d' ' -f3 /proc/%d/stat", pid)); st != "T\n" {
		t.Errorf("the golden's counter after the dump is in state %q, want T (stopped)", st)
	}
	d.Resume()
	// Left running: the golden counts on.
	after := readState(t, golden, pid)
	if after.count <= before.count || after.nonce != before.nonce {
		t.Fatalf("the golden after the dump: %+v, before %+v", after, before)
	}

	var replicas []*sandbox.Sandbox
	for range 2 {
		r := newSandbox(t)
		if _, err := tier.Restore(r, dir); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, r)
	}
	var got []state
	for i, r := range replicas {
		s := readState(t, r, pid)
		if s.pid != pid || s.nonce != before.nonce || s.count < before.count {
			t.Fatalf("replica %d: %+v; the golden at the dump had %+v", i, s, before)
		}
		// criu restores no Landlock domain; the one its restoring criu was
		// born in holds.
		if s.mknod != "EACCES" {
			t.Errorf("replica %d: the restored process created a device node: %q, want EACCES (Landlock)", i, s.mknod)
		}
		got = append(got, s)
		// What it held in the tmpfs directories came along.
		run(t, r, "test -S /run/counter.sock && test -s /tmp/held")
		if !holds(t, r, "/tmp/held") {
			t.Errorf("replica %d: the restored process does not hold /tmp/held", i)
		}
		// The restored process is in the replica's own cgroup, walled in as
		// the golden's was: same seccomp filter, capabilities, no_new_privs.
		status := run(t, r, fmt.Sprintf("grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs|CapEff|CapBnd):' /proc/%d/status; cat /proc/%d/cgroup", pid, pid))
		for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "Seccomp_filters:\t1"} {
			if !strings.Contains(status, want) {
				t.Errorf("replica %d: the restored process lacks %q:\n%s", i, want, status)
			}
		}
		golden := run(t, golden, fmt.Sprintf("grep -E '^(CapEff|CapBnd):' /proc/%d/status", pid))
		if !strings.Contains(status, golden) {
			t.Errorf("replica %d: capabilities differ from the golden's %q:\n%s", i, golden, status)
		}
	}
	// Their random state is the golden's at the dump, so the first draw
	// after the restore is the same in each (docs/snapshots.md).
	if got[0].draw != got[1].draw {
		t.Errorf("the replicas' first random draws differ (%d, %d): their generators were not restored", got[0].draw, got[1].draw)
	}
	// They count on independently.
	for i, r := range replicas {
		if s := readState(t, r, pid); s.count <= got[i].count {
			t.Errorf("replica %d stopped counting: %d then %d", i, got[i].count, s.count)
		}
	}
}

// xDisplay connects to the X server of display :5 in sb from the host,
// through its socket file (xgb dials "<dir>/x:5" for display "<dir>/x:5").
func xDisplay(t *testing.T, sb *sandbox.Sandbox) *x11.Display {
	t.Helper()
	link := filepath.Join(t.TempDir(), "x:5")
	if err := os.Symlink(fmt.Sprintf("/proc/%d/root/tmp/.X11-unix/X5", sb.Pid()), link); err != nil {
		t.Fatal(err)
	}
	d, err := x11.Connect(link, x11.Options{NoSHM: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// screen waits for d's screen to settle and returns its frame hash.
func screen(t *testing.T, d *x11.Display) frame.Hash {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.WaitScreenIdle(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("the screen does not settle: %v", err)
	}
	w, h := d.Size()
	f, err := d.Capture(image.Rect(0, 0, w, h), false)
	if err != nil {
		t.Fatal(err)
	}
	return f.Hash()
}

// An X server and an xterm (one tree: started by one shell), without
// System V shared memory, restore pixel-identical in every replica, and
// typing into one replica changes only its screen.
func TestRestoredXServerPixelIdentical(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "Xvfb")
	require.Binary(t, "xterm")
	require.Binary(t, "xwininfo")
	tier := New()
	golden := newSandbox(t)
	run(t, golden, `cd /tmp && (Xvfb :5 -nolisten tcp -screen 0 400x300x24 &
while [ ! -S /tmp/.X11-unix/X5 ]; do sleep 0.01; done
DISPLAY=:5 xterm -title tinexterm -geometry 40x10+10+10 -e sh -c "echo restored-screen; exec cat" & wait) </dev/null >/dev/null 2>&1 &
i=0; until DISPLAY=:5 xwininfo -root -tree 2>/dev/null | grep -q tinexterm; do sleep 0.01; i=$((i+1)); [ $i -lt 3000 ] || exit 1; done`)
	gd := xDisplay(t, golden)
	want := screen(t, gd)
	if again := screen(t, gd); again != want {
		t.Fatalf("the golden's screen does not hold still (%s, then %s): pixel identity cannot be checked", want, again)
	}
	gd.Close()
	dir := filepath.Join(t.TempDir(), "memory")
	d, err := tier.Dump(golden, dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Resume()
	var shown []*x11.Display
	for i := range 2 {
		r := newSandbox(t)
		if _, err := tier.Restore(r, dir); err != nil {
			t.Fatal(err)
		}
		rd := xDisplay(t, r)
		if got := screen(t, rd); got != want {
			t.Errorf("replica %d's screen is %s, the golden's %s", i, got, want)
		}
		shown = append(shown, rd)
	}
	// No window manager: the keyboard follows the pointer, into the xterm.
	if err := shown[0].Move(x11.Point{X: 100, Y: 60}); err != nil {
		t.Fatal(err)
	}
	if err := shown[0].Type("only-here", 0); err != nil {
		t.Fatal(err)
	}
	if got := screen(t, shown[0]); got == want {
		t.Errorf("typing into replica 0 did not change its screen: the check below proves nothing")
	}
	if got := screen(t, shown[1]); got != want {
		t.Errorf("typing into replica 0 changed replica 1's screen")
	}
	if got := screen(t, xDisplay(t, golden)); got != want {
		t.Errorf("typing into replica 0 changed the golden's screen")
	}
}

// A process that ends while the tree is walked is gone whichever way
// /proc says so: ENOENT once reaped, ESRCH while it exits (the error
// containerd's checkpoint once got listing a descendant's threads).
func TestEndedProcessErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&os.PathError{Op: "open", Path: "/proc/1/task", Err: syscall.ENOENT}, true},
		{&os.PathError{Op: "open", Path: "/proc/1/task", Err: syscall.ESRCH}, true},
		{fmt.Errorf("process 1: %w", &os.PathError{Op: "open", Path: "/proc/1/status", Err: syscall.ESRCH}), true},
		{&os.PathError{Op: "open", Path: "/proc/1/task", Err: syscall.EACCES}, false},
		{nil, false},
	} {
		if got := ended(c.err); got != c.want {
			t.Errorf("ended(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
