package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// spareLayer is a layer on a tmpfs of its own (a layer on the host's
// root filesystem would overlap the base "/") holding one file.
func spareLayer(t *testing.T, name, content string) string {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(dir+"/"+name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cgroupsOf are the cgroup paths of pid (from /proc/PID/cgroup).
func cgroupsOf(t *testing.T, pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && strings.Contains(f[2], "/tine/") {
			out = append(out, f[2])
		}
	}
	return out
}

func spareParent(t *testing.T) *Sandbox {
	require.Root(t)
	require.Feature(t, "cgroup")
	parent, err := Create(&Spec{Hostname: "parent", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Destroy() })
	return parent
}

// A spare fork child exists (its PID 1, nested a level under the parent's)
// before it has a root; Complete gives it one over the layers of the
// moment (a file of the late layer and one of the layer it was made
// with are both there), and it is then an ordinary fork child.
func TestForkSpareCompletesOverLateLayers(t *testing.T) {
	parent := spareParent(t)
	early, late := spareLayer(t, "early", "e"), spareLayer(t, "late", "l")
	sp, err := CreateSpare(&Spec{Hostname: "spare", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent, Layers: []string{early}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	if err := unix.Kill(sp.Pid(), 0); err != nil {
		t.Fatalf("the spare's PID 1 %d before Complete: %v", sp.Pid(), err)
	}
	if len(cgroupsOf(t, sp.Pid())) == 0 {
		t.Fatalf("the spare's PID 1 is in no cgroup of tine's before Complete")
	}
	child, err := sp.Complete([]string{late})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Destroy()
	if child.Pid() != sp.Pid() {
		t.Fatalf("the completed child's PID 1 is %d, the spare's was %d", child.Pid(), sp.Pid())
	}
	out, o := execOutput(t, child, &ExecSpec{Args: []string{"/bin/sh", "-c", "cat /late /early; hostname; echo w > /etc/spare-marker && cat /etc/spare-marker"}})
	if o.ExitCode != 0 || out != "lespare\nw\n" {
		t.Fatalf("exec in the completed spare: %q %+v", out, o)
	}
	if _, err := os.Stat(parent.Root() + "/etc/spare-marker"); !os.IsNotExist(err) {
		t.Fatalf("the spare's write is in the parent's root: %v", err)
	}
	if _, err := os.Stat(late + "/etc"); !os.IsNotExist(err) {
		t.Fatalf("the spare's write went into its late layer: %v", err)
	}
	if _, err := sp.Complete([]string{late}); err == nil {
		t.Fatal("a second Complete of one spare succeeded")
	}
}

// A discarded spare leaves nothing: its PID 1 is gone and its cgroups
// are removed.
func TestForkSpareDiscardLeavesNothing(t *testing.T) {
	parent := spareParent(t)
	sp, err := CreateSpare(&Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent})
	if err != nil {
		t.Fatal(err)
	}
	pid, groups := sp.Pid(), cgroupsOf(t, sp.Pid())
	if len(groups) == 0 {
		t.Fatal("the spare is in no cgroup of tine's")
	}
	sp.Discard()
	sp.Discard() // idempotent
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the discarded spare's PID 1 %d: %v, want it gone", pid, err)
	}
	for _, g := range groups {
		for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			if _, err := os.Stat(root + g); err == nil && strings.Contains(g, "/tine/") && g != "/tine" {
				t.Errorf("the discarded spare's cgroup %s%s is left", root, g)
			}
		}
	}
	if _, err := sp.Complete(nil); err == nil {
		t.Fatal("Complete after Discard succeeded")
	}
}

// A spare goes with its parent: the parent's Destroy does not wait on
// it, and its PID 1 is gone.
func TestForkSpareDiesWithItsParent(t *testing.T) {
	parent := spareParent(t)
	sp, err := CreateSpare(&Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent})
	if err != nil {
		t.Fatal(err)
	}
	pid := sp.Pid()
	if err := parent.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Complete(nil); err == nil {
		t.Fatal("a spare completed after its parent was destroyed")
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the spare's PID 1 %d after its parent's Destroy: %v, want it gone", pid, err)
	}
}
