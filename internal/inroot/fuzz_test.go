package inroot

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fuzzTarMax is the fuzz's cap on an archive's file contents.
const fuzzTarMax = 1 << 20

// FuzzExtractTar extracts a fuzzed archive into a root over a temporary
// directory that holds, next to the root, files the archive must never
// reach, and in the root symlinks that point at them (relative and
// absolute). Whatever the archive: no panic; nothing outside the root is
// created, changed or linked to (its listing, contents and link counts
// are the same after); an error is specific; and an archive that fails
// leaves the root's names as they were. The extraction runs on a thread
// that Landlock lets write only in the temporary directory, so an escape
// shows as EACCES or EXDEV rather than touching the host.
func FuzzExtractTar(f *testing.F) {
	for _, entries := range [][]entry{
		{{name: "a.txt", body: "alpha"}, {name: "bin/", typ: tar.TypeDir, mode: 0o755}, {name: "bin/run", body: "#!/bin/sh\n", mode: 0o4755}},
		{{name: "deep/er/secret", body: "s", mode: 0o600}, {name: "rel", typ: tar.TypeSymlink, link: "a.txt"}, {name: "hard", typ: tar.TypeLink, link: "deep/er/secret"}},
		{{name: "abs", typ: tar.TypeSymlink, link: "/etc/passwd"}, {name: "dangling", typ: tar.TypeSymlink, link: "nowhere"}},
		{{name: "/absolute/name", body: "x"}, {name: "./dot/./x", body: "y"}, {name: "dir/", typ: tar.TypeDir, mode: 0o1777}},
		// escapes, which must all stay inside
		{{name: "../up", body: "x"}, {name: "a/../../up", body: "x"}},
		{{name: "out", typ: tar.TypeSymlink, link: "../outside"}, {name: "out/planted", body: "x"}},
		{{name: "link-out/planted", body: "x"}, {name: "abs-out/planted", body: "x"}, {name: "dst/up/planted", body: "x"}},
		{{name: "hl", typ: tar.TypeLink, link: "link-out/secret"}, {name: "hl2", typ: tar.TypeLink, link: "../outside/secret"}},
		{{name: "keep", body: "replaced"}, {name: "keep/x", body: "x"}},
		// refused kinds and sizes
		{{name: "dev", typ: tar.TypeChar}, {name: "fifo", typ: tar.TypeFifo}},
		{{name: "big", body: strings.Repeat("b", 4096)}, {name: "", body: "x"}, {name: ".", typ: tar.TypeDir}},
	} {
		f.Add(tarOf(f, entries...).Bytes())
	}
	f.Add([]byte("not a tar archive at all"))
	f.Add(tarOf(f, entry{name: "a", body: "alpha"}).Bytes()[:700]) // cut short
	// A header that claims 4 GiB of content, with none following.
	var claim bytes.Buffer
	tw := tar.NewWriter(&claim)
	tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4 << 30})
	tw.Flush()
	f.Add(claim.Bytes())
	f.Fuzz(func(t *testing.T, archive []byte) {
		top := t.TempDir()
		outside := filepath.Join(top, "outside")
		root := filepath.Join(top, "root")
		for _, d := range []string{outside, filepath.Join(outside, "sub"), root, filepath.Join(root, "dst")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "keep"), []byte("k"), 0o644); err != nil {
			t.Fatal(err)
		}
		for name, target := range map[string]string{"link-out": "../outside", "abs-out": outside, "dst/up": "../../outside"} {
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
		r, err := Open(root)
		if errors.Is(err, ErrUnsupported) {
			t.Skipf("needs openat2 (Linux 5.6+): %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		hostBefore, rootBefore := snapshot(t, top, root), names(t, root)

		if !confined(t, top, func() { err = r.ExtractTar("/", bytes.NewReader(archive), fuzzTarMax, -1, -1) }) {
			t.Skip("needs Landlock, to keep a fuzzed archive from the host")
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EXDEV) {
			t.Fatalf("the archive reached outside its temporary directory (Landlock refused): %v", err)
		}
		if sameSnapshot(t, "outside the root", hostBefore, snapshot(t, top, root)); t.Failed() {
			return
		}
		if err == nil {
			return
		}
		if !strings.HasPrefix(err.Error(), `extract into "/": `) || len(err.Error()) <= len(`extract into "/": `) {
			t.Fatalf("error %q says nothing", err)
		}
		if rootAfter := names(t, root); !slices.Equal(rootBefore, rootAfter) {
			t.Fatalf("a failed extraction (%v) left the root changed:\nbefore %q\nafter  %q", err, rootBefore, rootAfter)
		}
	})
}

// names lists the paths under root, sorted.
func names(t *testing.T, root string) []string {
	t.Helper()
	var ns []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ns = append(ns, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ns)
	return ns
}
