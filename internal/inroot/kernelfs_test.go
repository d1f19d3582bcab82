package inroot

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/require"
)

// TestKernelFilesystemsRefused uses this process's /proc/<pid> as the
// root: metadata may be read, contents may not, and nothing may be made or
// removed there.
func TestKernelFilesystemsRefused(t *testing.T) {
	r := openRoot(t, fmt.Sprintf("/proc/%d", os.Getpid()))
	if list, err := r.List("/"); err != nil || len(list) == 0 {
		t.Fatalf("control: List(/) = %d entries, %v", len(list), err)
	}
	var out bytes.Buffer
	attempts := map[string]error{}
	_, attempts["Read status"] = r.Read("status", &out, 1<<20)
	_, attempts["Write x"] = r.Write("x", body("x"), 0o644, 100, -1, -1)
	attempts["Mkdir x"] = r.Mkdir("x", 0o755, false, -1, -1)
	attempts["Mkdir -p x/y"] = r.Mkdir("x/y", 0o755, true, -1, -1)
	attempts["Remove x"] = r.Remove("x", true)
	attempts["WriteTar /"] = r.WriteTar("/", &out)
	attempts["WriteTar status"] = r.WriteTar("status", &out)
	attempts["ExtractTar /"] = r.ExtractTar("/", tarOf(t, entry{name: "f", body: "x"}), 100, -1, -1)
	for name, err := range attempts {
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("%d bytes streamed from /proc", out.Len())
	}
}

// TestMountsInsideRoot mounts proc and a tmpfs inside a root, in a mount
// namespace private to this test's thread, as a sandbox root has them.
func TestMountsInsideRoot(t *testing.T) {
	require.Root(t)
	require.Feature(t, "ns.mount")
	runtime.LockOSThread() // never unlocked: the thread, in its own namespace, ends with the test
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare mount namespace: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatalf("make mounts private: %v", err)
	}
	dir := t.TempDir()
	for _, m := range []struct{ fs, at string }{{"proc", "proc"}, {"tmpfs", "vol"}} {
		at := filepath.Join(dir, m.at)
		if err := os.Mkdir(at, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(m.fs, at, m.fs, 0, ""); err != nil {
			t.Fatalf("mount %s: %v", m.fs, err)
		}
		t.Cleanup(func() { unix.Unmount(at, unix.MNT_DETACH) })
	}
	mustWriteFile(t, filepath.Join(dir, "vol/keep"), "volume data", 0o644)
	mustWriteFile(t, filepath.Join(dir, "top"), "top", 0o644)
	r := openRoot(t, dir)

	// WriteTar crosses into the tmpfs but leaves out what is under proc.
	var archive bytes.Buffer
	if err := r.WriteTar("/", &archive); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&archive)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if got := fmt.Sprint(names); got != "[proc/ top vol/ vol/keep]" {
		t.Errorf("archive of the root holds %s; want [proc/ top vol/ vol/keep]", got)
	}

	// Kernel interface files are refused inside a root, too.
	if _, err := r.Read("proc/1/status", io.Discard, 1<<20); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Read(proc/1/status): err = %v, want ErrUnsupported", err)
	}
	if err := r.Mkdir("proc/x/y", 0o755, true, -1, -1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Mkdir -p proc/x/y: err = %v, want ErrUnsupported", err)
	}
	if err := r.ExtractTar("/", tarOf(t, entry{name: "proc/x", body: "x"}), 100, -1, -1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ExtractTar proc/x: err = %v, want ErrUnsupported", err)
	}

	// Recursive removal stops at a mount point instead of emptying it.
	if err := r.Remove("vol", true); err == nil {
		t.Error("Remove -r vol: removed a mount point")
	}
	if got := readFile(t, filepath.Join(dir, "vol/keep")); got != "volume data" {
		t.Errorf("vol/keep = %q after Remove -r vol", got)
	}
	if err := r.Remove("top", false); err != nil {
		t.Errorf("control: Remove(top): %v", err)
	}
}
