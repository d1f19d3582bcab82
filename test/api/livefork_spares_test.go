package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/testbin"
)

// forkSpares are the daemon's spare live-fork children: its child
// processes that are a PID 1 nested in a sandbox's pid namespace (NSpid
// of three levels: the host's, the parent sandbox's, their own), which no
// listed sandbox has as its PID 1.
func forkSpares(t *testing.T, d *daemon) []int {
	t.Helper()
	list, err := d.c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var listed []int
	for _, sb := range list {
		listed = append(listed, sb.Pid)
	}
	var out []int
	for _, p := range childrenOf(d.pid()) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "NSpid:" && f[3] == "1" && !slices.Contains(listed, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// awaitSpare waits until the daemon holds exactly one spare, made after a
// cell (off the request path), and returns its PID 1.
func awaitSpare(t *testing.T, d *daemon) int {
	t.Helper()
	var got []int
	if !testbin.Eventually(30*time.Second, func() bool { got = forkSpares(t, d); return len(got) == 1 }) {
		t.Fatalf("the daemon holds %d spare fork children, want 1: %v", len(got), got)
	}
	return got[0]
}

// spareCgroups are the cgroup directories of a spare's PID 1, tine's own.
func spareCgroups(t *testing.T, pid int) []string {
	t.Helper()
	var dirs []string
	for hier, p := range cgroupsOf(pid) {
		if strings.Contains(p, "tine") {
			dirs = append(dirs, "/sys/fs/cgroup/"+strings.TrimPrefix(hier, "name=")+p)
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("the spare %d is in no cgroup of tine's: %v", pid, cgroupsOf(pid))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the spare's cgroup %s: %v (the check below would prove nothing)", dir, err)
		}
	}
	return dirs
}

// stageMountsOf are the mounts at the stage directory in pid's mount
// namespace: a spare's stage is never one of the daemon's.
func stageMountsOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], "/run/tine/stage") {
			out = append(out, line)
		}
	}
	return out
}

// assertSpareGone checks a spare left nothing: its PID 1, its cgroups, a
// stage in the daemon's namespace.
func assertSpareGone(t *testing.T, d *daemon, pid int, dirs, stages []string) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the spare's PID 1 %d: %v, want it gone", pid, err)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the spare's cgroup %s is left: %v", dir, err)
		}
	}
	if now := stageMountsOf(t, d.pid()); !slices.Equal(now, stages) {
		t.Errorf("stage mounts of the daemon %q, before %q", now, stages)
	}
}

func forkableWithCell(t *testing.T, d *daemon, sbID string) *client.Session {
	t.Helper()
	s, err := d.c.CreateSession(context.Background(), sbID, &api.SessionSpec{Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := s.Run(context.Background(), "import random\nx = 41"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	return s
}

// sandboxWithSpare creates a sandbox with a forkable session that ran a
// cell, and waits for the session's spare: the sandbox's id, the session
// and the spare's PID 1.
func sandboxWithSpare(t *testing.T, d *daemon) (string, *client.Session, int) {
	t.Helper()
	sb, err := d.c.Create(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := forkableWithCell(t, d, sb.ID)
	return sb.ID, s, awaitSpare(t, d)
}

// A forkable session's spare, made after its cell, is not listed and goes
// with the session (delete, restart) and with its sandbox (whose delete it
// does not block, unlike a fork): each time its PID 1 is gone, its
// cgroups removed, and no stage was ever mounted in the daemon's
// namespace.
func TestLiveForkSparesGoWithTheirSessionAndSandbox(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	stages := stageMountsOf(t, d.pid())
	s := forkableWithCell(t, d, sb.ID)
	pid := awaitSpare(t, d)
	if list, _ := d.c.List(ctx); len(list) != 1 {
		t.Fatalf("the daemon lists %d sandboxes with a spare, want the parent alone", len(list))
	}
	dirs := spareCgroups(t, pid)
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	assertSpareGone(t, d, pid, dirs, stages)

	s = forkableWithCell(t, d, sb.ID)
	pid = awaitSpare(t, d)
	dirs = spareCgroups(t, pid)
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	assertSpareGone(t, d, pid, dirs, stages)

	if ex, err := s.Run(ctx, "y = 1"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell after the restart: %+v %v", ex, err)
	}
	pid = awaitSpare(t, d)
	dirs = spareCgroups(t, pid)
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("delete a sandbox whose session has a spare: %v", err)
	}
	assertSpareGone(t, d, pid, dirs, stages)
}

// A spare holds a share of the capacity: with room for 3 sandboxes, the
// parent and its spare, a fork into 3 is refused (429) before anything is
// made and keeps the spare; a fork into 2 fits (the spare, already
// admitted, and one more), the spare's PID 1 one child's; and with the
// spare made again (after a cell), a create takes the last room and the
// next is 429.
func TestLiveForkSparesCountAgainstCapacity(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "3")
	ctx := context.Background()
	_, s, pid := sandboxWithSpare(t, d)
	_, _, err := s.Fork(ctx, 3)
	if st := statusOf(err); st != http.StatusTooManyRequests {
		t.Fatalf("fork into 3 with room for 1 more and a spare: %v, want 429", err)
	}
	if list, _ := d.c.List(ctx); len(list) != 1 {
		t.Fatalf("a refused fork left %d sandboxes", len(list))
	}
	if got := forkSpares(t, d); !slices.Equal(got, []int{pid}) {
		t.Fatalf("after a refused fork the spares are %v, want %d kept", got, pid)
	}
	kids, res, err := s.Fork(ctx, 2)
	if err != nil {
		t.Fatalf("fork into 2 with room for 1 more and a spare: %v", err)
	}
	fromSpare := 0
	for i, c := range res.Sandboxes {
		if c.Pid == pid {
			fromSpare++
		}
		if ex, err := kids[i].Run(ctx, "x + 1"); err != nil || ex.Text() != "42" {
			t.Fatalf("child %s: %+v %v", c.ID, ex, err)
		}
	}
	if fromSpare != 1 {
		t.Fatalf("the fork's children %+v: want one with the spare's PID 1 %d", res.Sandboxes, pid)
	}
	for _, c := range res.Sandboxes {
		if err := d.c.Delete(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The refill after the fork found no room (3 sandboxes); the next
	// cell makes one again.
	if ex, err := s.Run(ctx, "x"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	awaitSpare(t, d)
	other, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatalf("create with room for one more besides a spare: %v", err)
	}
	defer d.c.Delete(ctx, other.ID)
	if _, err := d.c.Create(ctx, nil); statusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("create with the room taken by a spare: %v, want 429", err)
	}
}

// A spare whose PID 1 was killed is freed by the daemon: its share of the
// capacity comes back (with room for 2, a create is refused while the
// spare lives and succeeds after), its cgroups go, and forks go on.
func TestLiveForkSpareWhosePID1Died(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "2")
	ctx := context.Background()
	_, s, pid := sandboxWithSpare(t, d)
	dirs := spareCgroups(t, pid)
	if _, err := d.c.Create(ctx, nil); statusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("create with the room taken by a spare: %v, want 429 (the check below would prove nothing)", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var other *api.Sandbox
	var err error
	if !testbin.Eventually(30*time.Second, func() bool { other, err = d.c.Create(ctx, nil); return err == nil }) {
		t.Fatalf("create after the spare's PID 1 died: %v", err)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the dead spare's cgroup %s is left: %v", dir, err)
		}
	}
	if err := d.c.Delete(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	kids, _, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatalf("fork after a spare died: %v", err)
	}
	if ex, err := kids[0].Run(ctx, "x + 1"); err != nil || ex.Text() != "42" {
		t.Fatalf("the child: %+v %v", ex, err)
	}
}

// A child made from a spare is as walled and as fresh as one made at the
// fork: in one fork into 2 (the first child the spare, the second made),
// an exec's and the copy's capabilities, no_new_privs and seccomp are the
// same, so are their cgroups (but for each one's own tracking group) and
// namespaces, the mount tables are alike (mount points, types and options), and
// each has its own pid namespace, /tmp, writable layer and random draws.
func TestLiveForkChildFromSpareIsWalledAndFresh(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sbID, s, _ := sandboxWithSpare(t, d)
	// The copy forked ahead comes once the spare after the cell is made:
	// a spare seen before it may have been one being replaced.
	awaitParked(t, d)
	pid := awaitSpare(t, d)
	kids, res, err := s.Fork(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandboxes[0].Pid != pid || res.Sandboxes[1].Pid == pid {
		t.Fatalf("children %d and %d, want the first the spare's PID 1 %d", res.Sandboxes[0].Pid, res.Sandboxes[1].Pid, pid)
	}
	walls := `grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status`
	// Paths and sizes vary; a spare's root names its layers one
	// lowerdir+ each (fsconfig), the other's in one lowerdir.
	shape := regexp.MustCompile(`(lowerdir\+?=[^,\s]*,)+|(upperdir|workdir|size|nr_inodes)=[^,\s]*`)
	// Sorted: a spare's /proc, /dev and /sys are made before its root
	// (ADR 0013, session 8), and mountinfo lists mounts as they were made.
	mounts := `awk '{for (i = 7; $i != "-"; i++); print $5, $6, $(i+1), $(i+3)}' /proc/self/mountinfo | sort`
	// The namespaces of the copy (which joins a spare in two steps, the
	// mount and cgroup ones once it is complete) and of an exec.
	nsList := `for n in user mnt ipc uts net cgroup pid; do readlink /proc/self/ns/$n; done`
	type child struct{ execWalls, copyWalls, mounts, pidns, draw, execNS, copyNS, execCg, copyCg string }
	var got [2]child
	for i, c := range res.Sandboxes {
		got[i].execWalls = execOut(t, d, c.ID, walls)
		got[i].mounts = shape.ReplaceAllStringFunc(execOut(t, d, c.ID, mounts), func(m string) string {
			if strings.HasPrefix(m, "lowerdir") {
				return "lowerdir,"
			}
			k, _, _ := strings.Cut(m, "=")
			return k
		})
		got[i].execNS = execOut(t, d, c.ID, nsList)
		got[i].execCg = cgroupsBut(execOut(t, d, c.ID, "cat /proc/self/cgroup"))
		var st struct{ Walls, PidNS, Draw, NS, Cg string }
		cellJSON(t, kids[i], fmt.Sprintf(`import json, os, subprocess
open('/tmp/fresh-%d', 'w').close(); open('/etc/fresh-%d', 'w').close()
ns = "".join(os.readlink('/proc/self/ns/' + n) + "\n" for n in ("user", "mnt", "ipc", "uts", "net", "cgroup", "pid"))
json.dumps({"Walls": subprocess.run(["/bin/sh", "-c", %q], capture_output=True, text=True).stdout, "PidNS": os.readlink('/proc/self/ns/pid'), "Draw": repr(random.random()), "NS": ns, "Cg": open('/proc/self/cgroup').read()})`, i, i, walls), &st)
		got[i].copyWalls, got[i].pidns, got[i].draw, got[i].copyNS, got[i].copyCg = st.Walls, st.PidNS, st.Draw, st.NS, cgroupsBut(st.Cg)
	}
	if got[0].execWalls != got[1].execWalls || got[0].copyWalls != got[1].copyWalls {
		t.Errorf("walls of the child from the spare (exec, copy's child):\n%s%s\nof the other:\n%s%s", got[0].execWalls, got[0].copyWalls, got[1].execWalls, got[1].copyWalls)
	}
	if !strings.Contains(got[0].execWalls, "Seccomp:\t2") || !strings.Contains(got[0].copyWalls, "NoNewPrivs:\t1") {
		t.Errorf("the walls read are not a walled process's: %q %q", got[0].execWalls, got[0].copyWalls)
	}
	for i, g := range got {
		if g.copyNS != g.execNS || strings.Count(g.execNS, ":[") != 7 {
			t.Errorf("child %d: the copy's namespaces (user mnt ipc uts net cgroup pid):\n%san exec's:\n%s", i, g.copyNS, g.execNS)
		}
		if g.copyCg != g.execCg || !strings.Contains(g.execCg, ":/") {
			t.Errorf("child %d: the copy's cgroups:\n%san exec's:\n%s", i, g.copyCg, g.execCg)
		}
	}
	if got[0].mounts != got[1].mounts || !strings.Contains(got[0].mounts, "/ rw,nosuid,nodev") {
		t.Errorf("mounts of the child from the spare:\n%s\nof the other:\n%s", got[0].mounts, got[1].mounts)
	}
	if got[0].pidns == got[1].pidns || got[0].draw == got[1].draw {
		t.Errorf("the children share a pid namespace (%s, %s) or draw alike (%s, %s)", got[0].pidns, got[1].pidns, got[0].draw, got[1].draw)
	}
	for i, c := range res.Sandboxes {
		own := execOut(t, d, c.ID, "ls /tmp /etc | grep '^fresh-' | sort | tr '\\n' ' '")
		if want := fmt.Sprintf("fresh-%d fresh-%d ", i, i); own != want {
			t.Errorf("child %d sees %q of the children's files, want only its own %q", i, own, want)
		}
	}
	if parent := execOut(t, d, sbID, "ls /tmp /etc | grep -c '^fresh-' || true"); strings.TrimSpace(parent) != "0" {
		t.Errorf("the parent sees %s of its children's files", parent)
	}
}

// cgroupsBut is /proc/PID/cgroup with each process's own tracking group
// (its pids group on v1, its group on v2) cut to the group it is in.
func cgroupsBut(procCgroup string) string {
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (f[1] == "pids" || f[1] == "") {
			f[2] = path.Dir(f[2])
		}
		out.WriteString(strings.Join(f, ":") + "\n")
	}
	return out.String()
}

// execOut runs sh -c script in sandbox id and returns its stdout.
func execOut(t *testing.T, d *daemon, id, script string) string {
	t.Helper()
	r, err := d.c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %+v %v", script, id, r, err)
	}
	return string(r.Stdout)
}

// statusOf is the HTTP status of a client error (0 for another error).
func statusOf(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// After a fork the session's spare is made again once a child has
// answered its first cell, not while that cell runs (a spare's start would
// compete with it): with the fork-ahead delay, which bounds that wait, at
// 10 minutes, no spare is made in the second after the fork; the child's
// first cell brings one, unless the parent's session was deleted.
func TestLiveForkSpareRefilledAfterTheChildsFirstCell(t *testing.T) {
	d := startDaemon(t, "--fork-ahead-delay=10m")
	ctx := context.Background()
	_, s, pid := sandboxWithSpare(t, d)
	kids, res, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandboxes[0].Pid != pid {
		t.Fatalf("the child's PID 1 is %d, want the spare's %d (the check below would prove nothing)", res.Sandboxes[0].Pid, pid)
	}
	time.Sleep(time.Second) // long enough for a spare made at once to show
	if got := forkSpares(t, d); len(got) != 0 {
		t.Fatalf("spares %v made before the child's first cell, want none", got)
	}
	if ex, err := kids[0].Run(ctx, "x"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("the child's first cell: %+v %v", ex, err)
	}
	awaitSpare(t, d)
	// A session deleted meanwhile gets none.
	kids, _, err = s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if ex, err := kids[0].Run(ctx, "x"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("the second child's first cell: %+v %v", ex, err)
	}
	time.Sleep(time.Second)
	if got := forkSpares(t, d); len(got) != 0 {
		t.Errorf("spares %v made for a deleted session, want none", got)
	}
}
