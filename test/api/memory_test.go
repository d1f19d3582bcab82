package api_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// memCounter holds its state only in its heap: a nonce drawn at start and
// a count it keeps raising. On SIGUSR1 it writes its pid, nonce and count
// to /tmp/state.
const memCounter = `
import os, random, signal, time
nonce = random.getrandbits(64)
count = 0
def report(sig, frame):
    with open("/tmp/state.new", "w") as f:
        f.write("%d %d %d\n" % (os.getpid(), nonce, count))
    os.rename("/tmp/state.new", "/tmp/state")
signal.signal(signal.SIGUSR1, report)
open("/tmp/ready", "w").close()
while True:
    count += 1
    time.sleep(0.001)
`

type counterState struct{ pid, nonce, count uint64 }

// askCounter signals the counter with pid in sandbox id and reads what it
// reports (waiting a bounded while: a dead counter fails the test).
func askCounter(t *testing.T, c *client.Client, id string, pid uint64) (counterState, bool) {
	t.Helper()
	res, err := c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf(
		`rm -f /tmp/state; kill -USR1 %d || exit 3; i=0
while [ ! -s /tmp/state ] && [ $i -lt 2000 ]; do sleep 0.005; i=$((i+1)); done
cat /tmp/state`, pid)}, TimeoutMs: 30000})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	var s counterState
	if _, err := fmt.Sscan(string(res.Stdout), &s.pid, &s.nonce, &s.count); err != nil || res.ExitCode != 0 {
		return s, false
	}
	return s, true
}

// TestMemorySnapshotAndFork is the memory tier through the API: a process
// started in the golden, holding a nonce and a counter only in its heap,
// answers in every replica with the same pid, the same nonce and a count
// at least the one at the snapshot, then counts on by itself; files follow
// the file tier; killing one replica's process touches no other; a replica
// with a small memory limit is killed by it alone; deleting everything
// leaves no images, processes, cgroups or mounts.
func TestMemorySnapshotAndFork(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "python3")
	d := startDaemon(t, "--pool", "0") // no pooled sandboxes: the daemon idles with no process

	ctx := context.Background()
	golden, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 256 << 20, Pids: 128}})
	if err != nil {
		t.Fatal(err)
	}
	nonce := marker()
	out := sh(t, d.c, golden.ID, "echo "+nonce+" > /root/marker; cd /tmp && python3 -c '"+memCounter+"' </dev/null >/dev/null 2>&1 & echo $!; while [ ! -e /tmp/ready ]; do sleep 0.005; done")
	var pid uint64
	fmt.Sscan(out, &pid)
	before, ok := askCounter(t, d.c, golden.ID, pid)
	if !ok || before.pid != pid {
		t.Fatalf("the golden's counter (pid %d) does not answer: %+v", pid, before)
	}

	sn, err := d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Tier != api.TierMemory || sn.Bytes == 0 || sn.PausedMs <= 0 {
		t.Errorf("snapshot = %+v", sn)
	}
	images := filepath.Join(d.dir, "state", "snapshots", sn.ID, "memory")
	if _, err := os.Stat(filepath.Join(images, "manifest.json")); err != nil {
		t.Fatalf("the snapshot has no memory images: %v", err)
	}
	// Left running: the golden counts on.
	if g, ok := askCounter(t, d.c, golden.ID, pid); !ok || g.count <= before.count {
		t.Fatalf("the golden after its snapshot: %+v (before %+v)", g, before)
	}

	res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sandboxes) != 3 {
		t.Fatalf("fork answered %d sandboxes", len(res.Sandboxes))
	}
	first := map[string]counterState{}
	for _, r := range res.Sandboxes {
		s, ok := askCounter(t, d.c, r.ID, pid)
		if !ok || s.pid != pid || s.nonce != before.nonce || s.count < before.count {
			t.Fatalf("replica %s: %+v; the golden before its snapshot: %+v", r.ID, s, before)
		}
		first[r.ID] = s
		if out := sh(t, d.c, r.ID, "cat /root/marker"); out != nonce+"\n" {
			t.Errorf("replica %s: marker %q", r.ID, out)
		}
	}
	a, b := res.Sandboxes[0].ID, res.Sandboxes[1].ID
	// A file one replica writes is in no other, nor in the golden.
	sh(t, d.c, a, "echo mine > /root/own")
	for _, id := range []string{b, golden.ID} {
		if out := sh(t, d.c, id, "ls /root"); strings.Contains(out, "own") {
			t.Errorf("%s sees replica %s's write: %q", id, a, out)
		}
	}
	// Killing the counter in one replica kills it there only: the same pid
	// names a process of each replica's own.
	sh(t, d.c, a, fmt.Sprintf("kill -9 %d", pid))
	if _, ok := askCounter(t, d.c, a, pid); ok {
		t.Fatalf("replica %s's counter survived kill -9: the isolation check proves nothing", a)
	}
	for _, id := range []string{b, res.Sandboxes[2].ID} {
		s, ok := askCounter(t, d.c, id, pid)
		if !ok || s.count <= first[id].count {
			t.Errorf("replica %s after its sibling's counter was killed: %+v (was %+v)", id, s, first[id])
		}
	}
	if g, ok := askCounter(t, d.c, golden.ID, pid); !ok || g.nonce != before.nonce {
		t.Errorf("the golden after a replica's counter was killed: %+v", g)
	}
	// A replica's own memory limit bites in it alone, on restored memory.
	small, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Limits: &api.Limits{MemoryBytes: 48 << 20, Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	hog, err := d.c.Exec(ctx, small.Sandboxes[0].ID, &api.ExecRequest{Argv: []string{"python3", "-c", "x = bytearray(200 << 20); print('survived')"}, TimeoutMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if hog.Reason != "oom" || strings.Contains(string(hog.Stdout), "survived") {
		t.Errorf("200 MiB in a 48 MiB replica: %+v", hog)
	}
	if s, ok := askCounter(t, d.c, b, pid); !ok || s.nonce != before.nonce {
		t.Errorf("replica %s after its sibling's OOM: %+v", b, s)
	}

	// Nothing left behind: no processes of the daemon, no cgroups named
	// after it, no images, no mounts of its sandboxes.
	for _, r := range append(append(res.Sandboxes, small.Sandboxes...), *golden) {
		if err := d.c.Delete(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(images); !os.IsNotExist(err) {
		t.Errorf("the deleted snapshot's images remain: %v", err)
	}
	if !testbin.Eventually(patience, func() bool { return len(descendants(d.pid())) == 0 }) {
		t.Errorf("the idle daemon still has processes:%s", describe(keys(descendants(d.pid()))))
	}
	if !testbin.Eventually(patience, func() bool { return len(testbin.CgroupsOf(d.pid())) == 0 }) {
		t.Errorf("cgroups of the daemon remain: %v", testbin.CgroupsOf(d.pid()))
	}
	if m := testbin.StageMounts(); len(m) > 0 {
		t.Errorf("host mountinfo mentions the sandboxes' stage:\n%s", strings.Join(m, "\n"))
	}
}

// TestMemoryTierWithoutCRIU: a daemon whose criu is missing answers the
// memory tier 501 with doctor's reason and fix, and takes fs snapshots.
func TestMemoryTierWithoutCRIU(t *testing.T) {
	t.Setenv("TINE_CRIU", "/nonexistent/criu")
	d := startDaemon(t)
	ctx := context.Background()
	golden, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	wantStatus(t, "the memory tier without criu", err, http.StatusNotImplemented)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/criu") || !strings.Contains(err.Error(), "install criu") {
		t.Errorf("the error does not say what is missing and how to fix it: %v", err)
	}
	_, err = d.c.ForkSandbox(ctx, golden.ID, &api.ForkRequest{Tier: api.TierMemory})
	wantStatus(t, "snapshot and fork in the memory tier without criu", err, http.StatusNotImplemented)
	if list, _ := d.c.Snapshots(ctx); len(list) != 0 {
		t.Errorf("refused memory snapshots left %d snapshots", len(list))
	}
	if _, err := d.c.Snapshot(ctx, golden.ID, nil); err != nil {
		t.Errorf("an fs snapshot on the same daemon: %v", err)
	}
}

// TestMemorySnapshotOfAWriter: files and memory are of one instant. A
// process appends a line at a time to a file on the overlay and counts
// the lines in its heap; in every replica the file holds as many lines as
// the restored count says (one more at most: the dump may stop it between
// a write and its count), where a file captured after the process ran on
// would hold more.
func TestMemorySnapshotOfAWriter(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "python3")
	d := startDaemon(t, "--pool", "0")
	ctx := context.Background()
	golden, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := sh(t, d.c, golden.ID, `cd /root && python3 -c '
import os, signal, time
n = 0
f = open("/root/log", "a")
def report(sig, frame):
    lines = sum(1 for _ in open("/root/log"))
    with open("/tmp/state.new", "w") as s:
        s.write("%d %d %d" % (os.getpid(), n, lines))
    os.rename("/tmp/state.new", "/tmp/state")
signal.signal(signal.SIGUSR1, report)
while True:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    f.write("x\n")
    f.flush()
    n += 1
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])
    time.sleep(0.0005)
' </dev/null >/dev/null 2>&1 & echo $!; while [ ! -s /root/log ]; do sleep 0.005; done`)
	var pid uint64
	fmt.Sscan(out, &pid)
	for round := range 3 {
		sn, err := d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2})
		if err != nil {
			t.Fatalf("round %d: fork of a writer: %v", round, err)
		}
		for _, r := range res.Sandboxes {
			s, ok := askCounter(t, d.c, r.ID, pid)
			// askCounter reads "pid n lines" as pid, nonce, count.
			if !ok || s.pid != pid || s.count < s.nonce || s.count > s.nonce+1 {
				t.Errorf("round %d: replica %s: %d lines counted, %d in the file (%v): files and memory are not of one instant", round, r.ID, s.nonce, s.count, ok)
			}
			d.c.Delete(ctx, r.ID)
		}
		d.c.DeleteSnapshot(ctx, sn.ID)
	}
}

// frameHash returns desktop id's screenshot frame hash, once the screen
// has held still for two captures in a row.
func frameHash(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	ctx := context.Background()
	a, err := c.DialACI(ctx, id)
	if err != nil {
		t.Fatalf("desktop %s: ACI: %v", id, err)
	}
	defer a.Close()
	var last string
	for range 100 {
		rep, _, err := a.Screenshot(ctx, &api.ACIScreenshot{})
		if err != nil {
			t.Fatalf("desktop %s: screenshot: %v", id, err)
		}
		if rep.FrameHash == last {
			return last
		}
		last = rep.FrameHash
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("desktop %s: the screen never held still", id)
	return ""
}

// TestMemoryForkDesktop: a desktop (any: made without memory_tier) forks
// into desktops whose guest, X server, window manager and xterm are the
// golden's, restored: each answers its ACI at once, its first screenshot
// has the golden's frame hash, and typing into one changes only its own.
func TestMemoryForkDesktop(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "xterm")
	d := startDaemon(t, "--pool", "0")
	ctx := context.Background()
	golden, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480, Apps: [][]string{{"xterm"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.c.DialACI(ctx, golden.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Its screen is a file mapped by Xvfb and the guest (no System V
	// memory), read straight from there.
	if a.Welcome.Capture != "framebuffer" {
		t.Errorf("a desktop captures by %q, want the framebuffer file", a.Welcome.Capture)
	}
	if err := a.Type(ctx, "echo golden-state; touch /tmp/typed\n"); err != nil {
		t.Fatal(err)
	}
	// An open ACI session is a connection from the daemon into the guest:
	// refused before anything is dumped, saying what to close.
	_, err = d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	wantStatus(t, "a memory snapshot with an ACI session open", err, http.StatusConflict)
	if err == nil || !strings.Contains(err.Error(), "1 open ACI session") {
		t.Errorf("the error does not name the open session: %v", err)
	}
	a.Close()
	sh(t, d.c, golden.ID, "i=0; while [ ! -e /tmp/typed ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e /tmp/typed")
	want := frameHash(t, d.c, golden.ID)
	sn, err := d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Kind != "desktop" || sn.Processes < 4 {
		t.Errorf("snapshot of a desktop: %+v (want kind desktop, the guest, Xvfb, openbox and xterm)", sn)
	}
	res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Desktops) != 2 {
		t.Fatalf("fork of a desktop's memory snapshot answered %d desktops", len(res.Desktops))
	}
	for _, r := range res.Desktops {
		if got := frameHash(t, d.c, r.ID); got != want {
			t.Errorf("replica %s's first frame %s, the golden's %s", r.ID, got, want)
		}
	}
	one, other := res.Desktops[0].ID, res.Desktops[1].ID
	ra, err := d.c.DialACI(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.Type(ctx, "echo only-here; touch /tmp/typed-here\n"); err != nil {
		t.Fatal(err)
	}
	ra.Close()
	sh(t, d.c, one, "i=0; while [ ! -e /tmp/typed-here ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e /tmp/typed-here")
	if got := frameHash(t, d.c, one); got == want {
		t.Errorf("typing into replica %s did not change its screen: the check below proves nothing", one)
	}
	for _, id := range []string{other, golden.ID} {
		if got := frameHash(t, d.c, id); got != want {
			t.Errorf("typing into replica %s changed %s's screen", one, id)
		}
	}
	for _, r := range res.Desktops {
		d.c.DeleteDesktop(ctx, r.ID)
	}
	d.c.DeleteSnapshot(ctx, sn.ID)
}
