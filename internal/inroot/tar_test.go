package inroot

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTarRoundTrip(t *testing.T) {
	withUmask(t, 0o077)
	r, dir := newRoot(t)
	src := filepath.Join(dir, "src")
	mustWriteFile(t, filepath.Join(src, "a.txt"), "alpha", 0o644)
	mustWriteFile(t, filepath.Join(src, "bin/run"), "#!/bin/sh\n", 0o755|os.ModeSetuid)
	mustWriteFile(t, filepath.Join(src, "deep/er/secret"), "s", 0o600)
	mustWriteFile(t, filepath.Join(src, "empty"), "", 0o640)
	if err := os.Chmod(filepath.Join(src, "deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "emptydir"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "emptydir"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "a.txt", filepath.Join(src, "rel"))
	mustSymlink(t, "/etc/passwd", filepath.Join(src, "abs"))
	mustSymlink(t, "nowhere", filepath.Join(src, "dangling"))
	if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "deep/hard")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, p := range []string{"a.txt", "deep/er", "deep"} {
		if err := os.Chtimes(filepath.Join(src, p), old, old); err != nil {
			t.Fatal(err)
		}
	}

	var archive bytes.Buffer
	if err := r.WriteTar("/src", &archive); err != nil {
		t.Fatal(err)
	}
	// Extract into another root entirely.
	r2, dir2 := newRoot(t)
	if err := os.Mkdir(filepath.Join(dir2, "dst"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r2.ExtractTar("dst", bytes.NewReader(archive.Bytes()), 1<<20, -1, -1); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir2, "dst")

	rel := func(snap map[string]string, top string) map[string]string {
		out := map[string]string{}
		for p, d := range snap {
			out[strings.TrimPrefix(p, top)] = d
		}
		return out
	}
	want, got := rel(snapshot(t, src), src), rel(snapshot(t, dst), dst)
	sameSnapshot(t, "round trip", want, got)
	if len(got) != 13 {
		t.Errorf("extracted %d paths, want 13: %v", len(got), got)
	}
	for _, p := range []string{"a.txt", "deep/er", "deep"} {
		st, err := os.Lstat(filepath.Join(dst, p))
		if err != nil || !st.ModTime().Equal(old) {
			t.Errorf("%s: mtime %v, %v; want %v", p, st.ModTime(), err, old)
		}
	}
	a, _ := os.Stat(filepath.Join(dst, "a.txt"))
	h, _ := os.Stat(filepath.Join(dst, "deep/hard"))
	if !os.SameFile(a, h) {
		t.Errorf("deep/hard is not a hard link to a.txt")
	}

	// A single file is one entry named by its last element.
	archive.Reset()
	if err := r.WriteTar("src/bin/run", &archive); err != nil {
		t.Fatal(err)
	}
	hdr, err := tar.NewReader(&archive).Next()
	if err != nil || hdr.Name != "run" || hdr.Mode != 0o4755 || hdr.Size != 10 {
		t.Errorf("single-file archive: %+v, %v", hdr, err)
	}
}

func TestExtractLimitUndoesWhatItMade(t *testing.T) {
	r, dir := newRoot(t)
	mustWriteFile(t, filepath.Join(dir, "kept"), "old", 0o644)
	archive := tarOf(t,
		entry{name: "a/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "a/f", body: "123456"},
		entry{name: "kept", body: "new"},
		entry{name: "b/c/g", body: "123456"}, // 15 bytes in all, over the limit of 10
	)
	if err := r.ExtractTar("/", archive, 10, -1, -1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "kept" {
		t.Errorf("after a refused archive the root holds %v; want only kept", entries)
	}
	if got := readFile(t, filepath.Join(dir, "kept")); got != "new" {
		t.Errorf("kept = %q; a replaced file stays replaced", got)
	}

	// Negative check: the same archive fits a larger limit.
	archive = tarOf(t, entry{name: "a/f", body: "123456"}, entry{name: "b/c/g", body: "123456"})
	if err := r.ExtractTar("/", archive, 12, -1, -1); err != nil {
		t.Fatal(err)
	}
}

func TestExtractDirectories(t *testing.T) {
	r, dir := newRoot(t)
	mustWriteFile(t, filepath.Join(dir, "keep/old"), "old", 0o644)
	if err := os.Chmod(filepath.Join(dir, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := tarOf(t,
		entry{name: "./", typ: tar.TypeDir, mode: 0o700},
		entry{name: "later/f", body: "x"},
		entry{name: "later/", typ: tar.TypeDir, mode: 0o710}, // made on the way, then described
		entry{name: "keep/", typ: tar.TypeDir, mode: 0o700},
		entry{name: "keep/new", body: "new"},
	)
	if err := r.ExtractTar("/", archive, 100, -1, -1); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"later": 0o710, "keep": 0o755} {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want %v", p, st.Mode(), err, mode)
		}
	}
	if got := readFile(t, filepath.Join(dir, "keep/old")); got != "old" {
		t.Errorf("keep/old = %q", got)
	}
	if err := r.ExtractTar("/", tarOf(t, entry{name: "adir", body: "x"}), 100, -1, -1); !errors.Is(err, ErrIsDir) {
		t.Errorf("file over a directory: err = %v, want ErrIsDir", err)
	}
	if err := r.ExtractTar("/", tarOf(t, entry{name: "keep/old/", typ: tar.TypeDir}), 100, -1, -1); !errors.Is(err, ErrExists) {
		t.Errorf("directory over a file: err = %v, want ErrExists", err)
	}
	if err := r.ExtractTar("missing", tarOf(t, entry{name: "f", body: "x"}), 100, -1, -1); !errors.Is(err, ErrNotFound) {
		t.Errorf("into a missing directory: err = %v, want ErrNotFound", err)
	}
}

func TestExtractHardLinkReplacesAndRepeats(t *testing.T) {
	r, dir := newRoot(t)
	archive := tarOf(t,
		entry{name: "f", body: "data"},
		entry{name: "h", typ: tar.TypeLink, link: "f"},
		entry{name: "h", typ: tar.TypeLink, link: "/f"}, // again, over a link to the same file
	)
	if err := r.ExtractTar("/", archive, 100, -1, -1); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Stat(filepath.Join(dir, "f"))
	h, _ := os.Stat(filepath.Join(dir, "h"))
	if !os.SameFile(f, h) || f.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("h is not the only other link to f")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("root holds %v; want f and h, no temporaries", entries)
	}
}

func TestExtractTruncatedArchive(t *testing.T) {
	r, dir := newRoot(t)
	full := tarOf(t, entry{name: "f", body: strings.Repeat("x", 2000)}).Bytes()
	err := r.ExtractTar("/", io.LimitReader(bytes.NewReader(full), 1000), 1<<20, -1, -1)
	if err == nil {
		t.Fatal("truncated archive extracted")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("root holds %v after a truncated archive", entries)
	}
}

// TestExtractTarArchiveOwner: with ArchiveOwner each entry gets the owner
// its header names, and a directory made on the way stays the daemon's;
// the control, uid:gid given, overrides the header.
func TestExtractTarArchiveOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another owner needs root")
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	tw.WriteHeader(&tar.Header{Name: "implicit/f", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 1001})
	tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1002, Gid: 1003})
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d", Uid: 1004, Gid: 1005})
	tw.Close()
	owner := func(p string) [2]uint32 {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return [2]uint32{st.Uid, st.Gid}
	}
	for _, c := range []struct {
		uid, gid int
		want     map[string][2]uint32
	}{
		{ArchiveOwner, ArchiveOwner, map[string][2]uint32{"implicit/f": {1000, 1001}, "d": {1002, 1003}, "l": {1004, 1005}, "implicit": {0, 0}}},
		{7, 8, map[string][2]uint32{"implicit/f": {7, 8}, "d": {7, 8}, "l": {7, 8}, "implicit": {7, 8}}},
	} {
		r, dir := newRoot(t)
		if err := r.ExtractTar("/", bytes.NewReader(archive.Bytes()), 1<<20, c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
		for p, want := range c.want {
			if got := owner(filepath.Join(dir, p)); got != want {
				t.Errorf("uid %d gid %d: %s owned by %v, want %v", c.uid, c.gid, p, got, want)
			}
		}
	}
}
