package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
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
