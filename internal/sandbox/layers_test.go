package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// TestUpperCapturedAndStacked is the file tier end to end at this level:
// a live sandbox writes and deletes files, is frozen, its writable layer
// is committed to a store and thawed; a second sandbox stacked on that
// layer sees the writes and the deletion, and its own writes stay its own.
func TestUpperCapturedAndStacked(t *testing.T) {
	require.Root(t)
	require.Feature(t, "cgroup")
	spec := func(layers ...string) *Spec {
		return &Spec{Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64, MemoryBytes: 128 << 20}, Layers: layers}
	}
	golden, err := Create(spec())
	if err != nil {
		t.Fatal(err)
	}
	defer golden.Destroy()
	out, o := execOutput(t, golden, &ExecSpec{Args: []string{"/bin/sh", "-c", "mkdir -p /work && echo golden > /work/marker && rm /etc/hostname && echo ok"}})
	if o.ExitCode != 0 || out != "ok\n" {
		t.Fatalf("golden setup: %q %+v", out, o)
	}
	if err := golden.Freeze(); err != nil {
		t.Fatal(err)
	}
	upper, err := golden.OpenUpper()
	if err != nil {
		golden.Thaw()
		t.Fatal(err)
	}
	// The store must be on another filesystem than the base (the host's
	// root): overlayfs refuses a lower inside another lower (ELOOP).
	storeDir := t.TempDir()
	if err := unix.Mount("tmpfs", storeDir, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(storeDir, unix.MNT_DETACH)
	st, err := store.Open(filepath.Join(storeDir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := st.Commit(upper, 0)
	upper.Close()
	if err := golden.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(layer.Path + "/work/marker"); err != nil || string(b) != "golden\n" {
		t.Fatalf("captured layer: marker %q, %v", b, err)
	}
	// The golden runs on after the thaw.
	if out, _ := execOutput(t, golden, &ExecSpec{Args: []string{"cat", "/work/marker"}}); out != "golden\n" {
		t.Fatalf("golden after thaw: %q", out)
	}

	fork, err := Create(spec(layer.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Destroy()
	out, _ = execOutput(t, fork, &ExecSpec{Args: []string{"/bin/sh", "-c", "cat /work/marker; test -e /etc/hostname && echo hostname-back; echo fork > /work/own; echo done"}})
	if out != "golden\ndone\n" {
		t.Fatalf("fork sees %q; want the golden's marker and its deletion", out)
	}
	if _, err := os.Stat(layer.Path + "/work/own"); !os.IsNotExist(err) {
		t.Errorf("the fork's write reached the layer: %v", err)
	}
	if out, _ := execOutput(t, golden, &ExecSpec{Args: []string{"ls", "/work"}}); strings.Contains(out, "own") {
		t.Errorf("the fork's write reached the golden: %q", out)
	}
	// Nothing of the sandbox's own processes can reach the kept layer
	// descriptor: PID 1 is not dumpable.
	out, _ = execOutput(t, golden, &ExecSpec{Args: []string{"/bin/sh", "-c", "ls /proc/1/fd/ 2>&1; ls /proc/1/fd/12/ 2>&1; echo end"}})
	if strings.Contains(out, "marker") || strings.Contains(out, "work") {
		t.Errorf("a sandbox process reached its writable layer through PID 1: %q", out)
	}
}
