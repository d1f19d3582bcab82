package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// As root, the os view's entries are made once on the host, in a layer
// named by their hash, and PID 1 binds that layer instead of making them
// on every run; the layer holds each entry with the plan's type, mode,
// owner and opaque mark. A user namespace's PID 1 still makes its own.
func TestViewLayerMadeOnceAndBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root: running as uid %d", os.Geteuid())
	}
	p, err := NewPlan(&Spec{Args: []string{"true"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	steps := viewSteps(p)
	if len(steps) == 0 {
		t.Fatal("the os view has no entries in its layer")
	}
	in := inputs{ruleset: -1, target: -1, launch: -1}
	pg, err := compileBoot(p, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(pg.what, "mount the os view's layer"); n != 1 {
		t.Fatalf("PID 1 mounts the view's layer %d times, want once", n)
	}
	for _, st := range steps {
		if n := count(pg.what, st.String()); n > 0 {
			t.Fatalf("PID 1 still makes the view's entry %s", st)
		}
	}
	dir := viewLayersDir() + "/" + viewLayerKey(p.Stage, steps)
	var before unix.Stat_t
	if err := unix.Lstat(dir, &before); err != nil {
		t.Fatalf("the layer %s: %v", dir, err)
	}
	for _, st := range steps {
		target := dir + strings.TrimPrefix(st.Target, p.Stage+"/view")
		var got unix.Stat_t
		if err := unix.Lstat(target, &got); err != nil {
			t.Fatalf("entry %s: %v", target, err)
		}
		if got.Mode != st.Mode || (st.UID != 0 || st.GID != 0) && (got.Uid != st.UID || got.Gid != st.GID) {
			t.Errorf("entry %s: mode %o owner %d:%d, want mode %o owner %d:%d", target, got.Mode, got.Uid, got.Gid, st.Mode, st.UID, st.GID)
		}
		if st.Data != "" {
			v := make([]byte, 4)
			n, err := unix.Lgetxattr(target, st.Data, v)
			if err != nil || string(v[:max(n, 0)]) != "y" {
				t.Errorf("entry %s: %s is %q (%v), want y", target, st.Data, v[:max(n, 0)], err)
			}
		}
	}
	// Made once: a second start binds the same directory.
	if _, err := compileBoot(p, in, nil); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	if err := unix.Lstat(dir, &after); err != nil || after.Ino != before.Ino {
		t.Errorf("the layer was made again (inode %d, then %d: %v)", before.Ino, after.Ino, err)
	}
	// A user namespace's PID 1 makes its entries itself.
	in.userns = true
	if got := preparedViewLayer(p, in); got != "" {
		t.Errorf("a user namespace's plan uses the host-made layer %s", got)
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// A layer half made by a tine that died is removed by the next one that
// makes a layer there; one of a running process is left alone.
func TestStaleViewLayerBuildsRemoved(t *testing.T) {
	layers := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s/.tmp-%d-1", layers, dead.Process.Pid)
	live := fmt.Sprintf("%s/.tmp-%d-1", layers, os.Getppid())
	kept := layers + "/0123abcd"
	for _, d := range []string{stale, live, kept} {
		if err := os.MkdirAll(d+"/etc", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleBuilds(layers)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s (pid %d, dead) is still there: %v", stale, dead.Process.Pid, err)
	}
	for _, d := range []string{live, kept} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// gc removes the view layers no tine holds: one locked by another process
// (the shared flock a planner takes), one locked by this process and one
// being built by a live process stay; an unlocked one goes, and so does
// the held one once its holder is gone.
func TestUnusedViewLayersRemoved(t *testing.T) {
	layers := t.TempDir()
	saved := viewLayersDirs
	viewLayersDirs = []string{layers}
	t.Cleanup(func() { viewLayersDirs = saved })
	free, other, self := layers+"/00free", layers+"/01other", layers+"/02self"
	building := fmt.Sprintf("%s/.tmp-%d-1", layers, os.Getppid())
	for _, d := range []string{free, other, self, building} {
		if err := os.MkdirAll(d+"/etc", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !holdViewLayer(self) {
		t.Fatalf("could not hold %s", self)
	}
	holder := exec.Command("flock", "--shared", "--close", other, "sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); holder.Wait() })
	// The holder's lock is taken once an exclusive lock of ours fails.
	for i := 0; !lockedByOther(t, other); i++ {
		if i == 1000 {
			t.Fatal("flock(1) never took its lock")
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 5e6}, nil)
	}
	removed, err := RemoveUnusedViewLayers()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != free {
		t.Errorf("removed %v, want only %s", removed, free)
	}
	if _, err := os.Stat(free); !os.IsNotExist(err) {
		t.Errorf("%s (held by no one) is still there: %v", free, err)
	}
	for _, d := range []string{other, self, building} {
		if _, err := os.Stat(d + "/etc"); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	holder.Process.Kill()
	holder.Wait()
	if removed, err := RemoveUnusedViewLayers(); err != nil || len(removed) != 1 || removed[0] != other {
		t.Errorf("after its holder died: removed %v (%v), want %s", removed, err, other)
	}
	// A layer removed between its finding and its lock is not held.
	if holdViewLayer(free) {
		t.Errorf("held %s, which is gone", free)
	}
}

func lockedByOther(t *testing.T, dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil
}
