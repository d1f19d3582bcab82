package oci

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFlattenRoundTrip: the tier's layout becomes regular files only
// (tree-0's images at the top, tree-1's prefixed, the tmpfs trees one
// tar), and comes back as it was, owners, modes and symlinks included.
func TestFlattenRoundTrip(t *testing.T) {
	stage := filepath.Join(t.TempDir(), "stage")
	writeFiles(t, stage, map[string]string{
		"manifest.json": "m", "criu.kdat": "k",
		"tree-0/inventory.img": "i0", "tree-0/pstree.img": "p0", "tree-1/pages-1.img": "g1",
		"tmpfs/shm/a/b.txt": "shm file",
	})
	os.Symlink("a/b.txt", filepath.Join(stage, "tmpfs/shm/link"))
	os.Chown(filepath.Join(stage, "tmpfs/shm/a/b.txt"), 1000, 1001)
	os.Chmod(filepath.Join(stage, "tmpfs/shm"), 0o777|os.ModeSticky)
	flat := t.TempDir()
	if err := flatten(stage, flat); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(flat)
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			t.Errorf("%s in the flat directory is no regular file", e.Name())
		}
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "criu.kdat inventory.img manifest.json pstree.img tmpfs.tar tree-1.pages-1.img"; got != want {
		t.Errorf("flat directory: %s, want %s", got, want)
	}
	back := filepath.Join(flat, stageName)
	if err := unflatten(flat, back); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"manifest.json": "m", "criu.kdat": "k", "tree-0/inventory.img": "i0",
		"tree-0/pstree.img": "p0", "tree-1/pages-1.img": "g1", "tmpfs/shm/a/b.txt": "shm file", "tmpfs/shm/link": "shm file"} {
		if b, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(b) != want {
			t.Errorf("%s after the round trip: %q, %v", name, b, err)
		}
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(back, "tmpfs/shm/a/b.txt"), &st)
	if os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o777 != 0o640) {
		t.Errorf("tmpfs/shm/a/b.txt after the round trip: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if fi, err := os.Stat(filepath.Join(back, "tmpfs/shm")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmpfs/shm after the round trip: %v %v", fi.Mode(), err)
	}
}

// TestReadTreeTarStaysInside: a tmpfs.tar from a checkpoint archive
// cannot write outside the stage, by name or through a symlink it made:
// a climbing name is refused, an absolute one lands inside, and one below
// a symlink to a host directory resolves inside, where that directory is
// not.
func TestReadTreeTarStaysInside(t *testing.T) {
	outside := t.TempDir()
	for name, c := range map[string]struct {
		entries []tar.Header
		inside  string // where x lands, "" for a refusal
	}{
		"climbing": {[]tar.Header{{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644}}, ""},
		"absolute": {[]tar.Header{{Name: "/x", Typeflag: tar.TypeReg, Mode: 0o644}}, "x"},
		"symlink": {[]tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "l/x", Typeflag: tar.TypeReg, Mode: 0o644}}, ""},
	} {
		path := filepath.Join(t.TempDir(), "t.tar")
		f, _ := os.Create(path)
		tw := tar.NewWriter(f)
		for _, h := range c.entries {
			tw.WriteHeader(&h)
		}
		tw.Close()
		f.Close()
		dir := filepath.Join(t.TempDir(), "tmpfs")
		err := readTreeTar(path, dir)
		if c.inside == "" && err == nil {
			t.Errorf("%s: accepted", name)
		}
		if c.inside != "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else if _, err := os.Stat(filepath.Join(dir, c.inside)); err != nil {
				t.Errorf("%s: x is not inside the stage: %v", name, err)
			}
		}
		if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
			t.Errorf("%s: wrote outside the stage", name)
		}
	}
	// The control: the same entry below a directory lands.
	path := filepath.Join(t.TempDir(), "t.tar")
	f, _ := os.Create(path)
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "d", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "d/x", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	f.Close()
	if err := readTreeTar(path, filepath.Join(t.TempDir(), "tmpfs")); err != nil {
		t.Errorf("a plain tree: %v", err)
	}
}
