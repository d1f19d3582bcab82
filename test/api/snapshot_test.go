package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/snapshot"
	"github.com/tine-run/tine/internal/testbin"
)

// sh runs a shell command in sandbox id and returns its stdout; a non-zero
// exit fails the test.
func sh(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, TimeoutMs: 30000})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec in %s: %q exited %d (%s): %s", id, script, res.ExitCode, res.Reason, res.Stderr)
	}
	return string(res.Stdout)
}

func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != status {
		t.Errorf("%s: %v, want HTTP %d", what, err, status)
	}
}

// TestSnapshotAndForkFiles is the file tier through the API: what the
// golden wrote before its snapshot is in every replica; what it writes
// after, and what one replica writes, is in no other; replicas cannot see
// each other's processes; each has its own limits; a snapshot with live
// forks cannot be deleted.
func TestSnapshotAndForkFiles(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	golden, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 256 << 20, Pids: 128}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		t.Fatalf("the host has no /etc/debian_version, whose deletion the replicas must carry: %v", err)
	}
	nonce := marker()
	work := "/tine-test-" + nonce // a directory the host does not have
	sh(t, d.c, golden.ID, "mkdir -p "+work+" && echo "+nonce+" > "+work+"/marker && rm /etc/debian_version")
	sn, err := d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Name: "golden"})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Tier != api.TierFS || sn.Source != golden.ID || sn.Kind != "sandbox" || sn.Depth != 1 || sn.Bytes == 0 || sn.PausedMs <= 0 {
		t.Errorf("snapshot = %+v", sn)
	}
	// The golden runs on, and what it writes now is not in the snapshot.
	sh(t, d.c, golden.ID, "echo later > "+work+"/after")

	res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sandboxes) != 3 || res.Snapshot.Forks != 3 {
		t.Fatalf("fork answered %d sandboxes, %d forks", len(res.Sandboxes), res.Snapshot.Forks)
	}
	for _, r := range res.Sandboxes {
		if r.ForkedFrom != sn.ID || r.Spec.Limits.MemoryBytes != 256<<20 {
			t.Errorf("replica %s: forked_from %q, limits %+v", r.ID, r.ForkedFrom, r.Spec.Limits)
		}
		out := sh(t, d.c, r.ID, "cat "+work+"/marker; ls "+work+"; test -e /etc/debian_version && echo undeleted; true")
		if out != nonce+"\nmarker\n" {
			t.Errorf("replica %s sees %q; want the golden's marker only, and its deletion", r.ID, out)
		}
	}
	a, b := res.Sandboxes[0].ID, res.Sandboxes[1].ID
	sh(t, d.c, a, "echo mine > "+work+"/own")
	if out := sh(t, d.c, b, "ls "+work); strings.Contains(out, "own") {
		t.Errorf("replica %s sees %s's write: %q", b, a, out)
	}
	if out := sh(t, d.c, golden.ID, "ls "+work); strings.Contains(out, "own") {
		t.Errorf("the golden sees a replica's write: %q", out)
	}
	// Replicas cannot see each other's processes (own pid namespaces).
	mark := marker()
	sleeping := make(chan error, 1)
	go func() {
		_, err := d.c.Exec(ctx, b, &api.ExecRequest{Argv: sleeper(mark), TimeoutMs: 60000})
		sleeping <- err
	}()
	if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) > 0 }) {
		t.Fatal("the sleeper never started: the visibility check proves nothing")
	}
	if out := sh(t, d.c, b, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"); !strings.Contains(out, sleeperArg(mark)) {
		t.Fatalf("replica %s does not see its own sleeper: the check below proves nothing: %q", b, out)
	}
	if out := sh(t, d.c, a, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"); strings.Contains(out, sleeperArg(mark)) {
		t.Errorf("replica %s sees replica %s's process: %q", a, b, out)
	}
	// Replicas keep the source's host name unless the fork names another.
	if out := sh(t, d.c, a, "hostname"); out != "tine\n" {
		t.Errorf("a replica's host name is %q, want the source's", out)
	}
	// Each replica has its own limits: one forked with a small memory
	// limit is killed by it, the others are untouched.
	small, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Limits: &api.Limits{MemoryBytes: 48 << 20, Pids: 64}, Hostname: "replica-small"})
	if err != nil {
		t.Fatal(err)
	}
	if out := sh(t, d.c, small.Sandboxes[0].ID, "hostname"); out != "replica-small\n" {
		t.Errorf("a replica forked with a host name has %q", out)
	}
	hog, err := d.c.Exec(ctx, small.Sandboxes[0].ID, &api.ExecRequest{Argv: []string{"python3", "-c", "x = bytearray(200 << 20); print('survived')"}, TimeoutMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if hog.Reason != "oom" || strings.Contains(string(hog.Stdout), "survived") {
		t.Errorf("200 MiB in a 48 MiB replica: %+v", hog)
	}
	if out := sh(t, d.c, a, "python3 -c \"x = bytearray(100 << 20); print('fine')\""); out != "fine\n" {
		t.Errorf("a 256 MiB replica could not take 100 MiB after its sibling's OOM: %q", out)
	}

	// A snapshot with live forks is not deleted.
	wantStatus(t, "delete a snapshot with live forks", d.c.DeleteSnapshot(ctx, sn.ID), http.StatusConflict)
	for _, r := range append(res.Sandboxes, small.Sandboxes...) {
		if err := d.c.Delete(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := d.c.GetSnapshot(ctx, sn.ID); err != nil || got.Forks != 0 {
		t.Fatalf("after deleting the forks: %+v, %v", got, err)
	}
	if err := d.c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.GetSnapshot(ctx, sn.ID)
	wantStatus(t, "get a deleted snapshot", err, http.StatusNotFound)
}

// TestForkOfForkAndRestart: a snapshot of a replica stacks on its parent
// (lineage), and snapshots survive a daemon restart, forkable as before.
func TestForkOfForkAndRestart(t *testing.T) {
	dir := t.TempDir()
	d := startDaemonIn(t, dir)
	ctx := context.Background()
	golden, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, d.c, golden.ID, "echo one > /etc/tine-gen1")
	res, err := d.c.ForkSandbox(ctx, golden.ID, &api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first := res.Sandboxes[0]
	sh(t, d.c, first.ID, "echo two > /etc/tine-gen2; rm /etc/tine-gen1")
	child, err := d.c.Snapshot(ctx, first.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if child.Parent != res.Snapshot.ID || child.Depth != 2 {
		t.Errorf("snapshot of a fork: parent %q depth %d, want %q and 2", child.Parent, child.Depth, res.Snapshot.ID)
	}
	d.stop()

	d2 := startDaemonIn(t, dir)
	list, err := d2.c.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != res.Snapshot.ID || list[1].ID != child.ID {
		t.Fatalf("after a restart: %+v", list)
	}
	res2, err := d2.c.Fork(ctx, child.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res2.Sandboxes {
		if out := sh(t, d2.c, r.ID, "cat /etc/tine-gen2; test -e /etc/tine-gen1 && echo gen1-back; true"); out != "two\n" {
			t.Errorf("fork of a fork after a restart sees %q", out)
		}
	}
}

// TestSnapshotBadInput: each refusal is typed and makes nothing.
func TestSnapshotBadInput(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "3")
	ctx := context.Background()
	_, err := d.c.Snapshot(ctx, "nosuchsandbox", nil)
	wantStatus(t, "snapshot of an unknown sandbox", err, http.StatusNotFound)
	_, err = d.c.Fork(ctx, "s000000000000", nil)
	wantStatus(t, "fork of an unknown snapshot", err, http.StatusNotFound)
	golden, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: "disk"})
	wantStatus(t, "an unknown tier", err, http.StatusBadRequest)
	sn, err := d.c.Snapshot(ctx, golden.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 100000})
	wantStatus(t, "an absurd count", err, http.StatusBadRequest)
	// Three sandboxes fit and one is live: a fork of three is refused
	// whole, and no replica is left behind.
	_, err = d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 3})
	wantStatus(t, "a fork past the budget", err, http.StatusTooManyRequests)
	if list, _ := d.c.List(ctx); len(list) != 1 {
		t.Errorf("a refused fork left %d sandboxes, want only the golden", len(list))
	}
	if got, _ := d.c.GetSnapshot(ctx, sn.ID); got == nil || got.Forks != 0 {
		t.Errorf("a refused fork left the snapshot in use: %+v", got)
	}
	if _, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2}); err != nil {
		t.Errorf("a fork that fits: %v", err)
	}
	if err := d.c.Delete(ctx, golden.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Snapshot(ctx, golden.ID, nil)
	wantStatus(t, "snapshot of a deleted sandbox", err, http.StatusNotFound)
}

// TestDesktopForkFiles: a desktop's fs snapshot forks into desktops: each
// boots its own X server, window manager and apps over the golden's files,
// answers its ACI, and its files are its own.
func TestDesktopForkFiles(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	golden, _ := startDesktop(t, d, []string{"xterm"})
	nonce := marker()
	sh(t, d.c, golden.ID, "echo "+nonce+" > /root/notes.txt")
	res, err := d.c.ForkSandbox(ctx, golden.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Desktops) != 2 || len(res.Sandboxes) != 0 || res.Snapshot.Kind != "desktop" {
		t.Fatalf("fork of a desktop: %d desktops, %d sandboxes, kind %q", len(res.Desktops), len(res.Sandboxes), res.Snapshot.Kind)
	}
	for i, r := range res.Desktops {
		if r.Width != golden.Width || r.Height != golden.Height || r.ForkedFrom != res.Snapshot.ID {
			t.Errorf("replica %s: %dx%d forked from %q", r.ID, r.Width, r.Height, r.ForkedFrom)
		}
		if got := readSandboxFile(d, r.ID, "/root/notes.txt"); got != nonce+"\n" {
			t.Errorf("replica %s: notes %q", r.ID, got)
		}
		a, err := d.c.DialACI(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		wins, err := a.Windows(ctx)
		if err != nil || len(wins) == 0 {
			t.Errorf("replica %s: windows %v, %v; want the xterm the spec starts", r.ID, wins, err)
		}
		reply, img, err := a.Screenshot(ctx, &api.ACIScreenshot{Format: "png"})
		if err != nil || len(img) == 0 || reply.Width != golden.Width {
			t.Errorf("replica %s: screenshot %+v, %d bytes, %v", r.ID, reply, len(img), err)
		}
		if i == 0 {
			if _, err := a.Exec(ctx, []string{"/bin/sh", "-c", "echo own > /root/own.txt"}, nil, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		a.Close()
	}
	if got := readSandboxFile(d, res.Desktops[1].ID, "/root/own.txt"); got != "" {
		t.Errorf("replica 1 sees replica 0's file: %q", got)
	}
	if got := readSandboxFile(d, golden.ID, "/root/own.txt"); got != "" {
		t.Errorf("the golden sees a replica's file: %q", got)
	}
}

// TestForkEach: the Go client's fleet shape runs a function in each of N
// replicas of one snapshot, in all-or-none batches that wait out a full
// budget, and leaves no replica behind.
func TestForkEach(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "4")
	ctx := context.Background()
	golden, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, d.c, golden.ID, "echo each > /etc/tine-fleet")
	sn, err := d.c.Snapshot(ctx, golden.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox holds the budget's last place while the first batch is
	// asked for: that fork meets 429 and must wait it out.
	blocker, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 3}); client.ErrorCode(err) != api.CodeCapacity {
		t.Fatalf("control: a batch of 3 next to the blocker answered %v, want 429", err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		d.c.Delete(ctx, blocker.ID)
	}()
	var mu sync.Mutex
	seen := map[int]string{}
	// 7 replicas in batches of 3 with the golden live: a budget of 4 holds
	// one batch at a time.
	errs := d.c.ForkEach(ctx, sn.ID, 7, 3, &api.ForkRequest{Hostname: "fleet"}, func(ctx context.Context, r api.Sandbox, i int) error {
		out := sh(t, d.c, r.ID, "cat /etc/tine-fleet; hostname")
		mu.Lock()
		seen[i] = out
		mu.Unlock()
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	if len(seen) != 7 {
		t.Fatalf("fn ran for %d of 7 replicas", len(seen))
	}
	for i, out := range seen {
		if out != "each\nfleet\n" {
			t.Errorf("replica %d saw %q", i, out)
		}
	}
	if list, _ := d.c.List(ctx); len(list) != 1 {
		t.Errorf("ForkEach left %d sandboxes, want only the golden", len(list))
	}
}

// TestDeepForkChainIsFlattened forks a fork of a fork ... past
// snapshot.FlattenDepth: the snapshot that would stack more layers holds
// the whole chain merged into one, and what each generation wrote and
// deleted — of the host's base as well as of earlier generations — is as
// it was in a fork of it, and in forks of that.
func TestDeepForkChainIsFlattened(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The control: the base file the chain deletes is there to begin with.
	sh(t, d.c, sb.ID, "test -e /etc/debian_version")
	var last *api.Snapshot
	for gen := 1; gen <= snapshot.FlattenDepth+2; gen++ {
		script := fmt.Sprintf("echo %d > /etc/tine-gen%d", gen, gen)
		switch gen {
		case 3:
			script += "; rm /etc/debian_version" // a deletion of the base's
		case 5:
			script += "; rm /etc/tine-gen2" // of an earlier generation's
		case 7:
			script += "; mkdir -p /etc/tine-dir && echo 7 > /etc/tine-dir/seven"
		case 9:
			script += "; rm -r /etc/tine-dir && mkdir /etc/tine-dir && echo 9 > /etc/tine-dir/nine"
		}
		sh(t, d.c, sb.ID, script)
		t0 := time.Now()
		if last, err = d.c.Snapshot(ctx, sb.ID, nil); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		want := gen
		if gen > snapshot.FlattenDepth {
			want = gen - snapshot.FlattenDepth
		}
		if last.Depth != want {
			t.Errorf("generation %d's snapshot stacks %d layers, want %d", gen, last.Depth, want)
		}
		res, err := d.c.Fork(ctx, last.ID, &api.ForkRequest{})
		if err != nil {
			t.Fatalf("fork generation %d: %v", gen, err)
		}
		// Figures for ADR 0012's choice of the depth, not assertions.
		t.Logf("generation %d: snapshot of %d layers in %v (paused %.1f ms), fork in %.1f ms", gen, last.Depth, time.Since(t0).Round(100*time.Microsecond), last.PausedMs, res.ForkMs)
		d.c.Delete(ctx, sb.ID)
		sb = &res.Sandboxes[0]
	}
	got := sh(t, d.c, sb.ID, "cat /etc/tine-gen*; test -e /etc/debian_version && echo base-back; test -e /etc/tine-gen2 && echo gen2-back; ls /etc/tine-dir; true")
	var want strings.Builder
	for gen := 1; gen <= snapshot.FlattenDepth+2; gen++ {
		if gen != 2 {
			fmt.Fprintf(&want, "%d\n", gen)
		}
	}
	want.WriteString("nine\n")
	// The shell's glob sorts by name (gen1, gen10, ...): compare as sets.
	if sortLines(got) != sortLines(want.String()) {
		t.Errorf("the fork of the flattened chain shows\n%s\nwant\n%s", got, want.String())
	}
}

func sortLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
