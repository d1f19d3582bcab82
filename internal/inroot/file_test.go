package inroot

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/require"
)

func TestCleanPaths(t *testing.T) {
	for p, want := range map[string]string{
		"/": "", ".": "", "//": "", "a": "a", "/a/b/": "a/b", "a/./b": "a/b", "a/../b": "b", "a/..": "",
	} {
		got, err := clean(p)
		if err != nil || got != want {
			t.Errorf("clean(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"", "..", "../x", "/../x", "/../../x", "a/../../x", "a\x00b"} {
		if _, err := clean(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("clean(%q): err = %v, want ErrInvalidPath", p, err)
		}
	}
}

func TestStatAndList(t *testing.T) {
	r, dir := newRoot(t)
	mustWriteFile(t, filepath.Join(dir, "b.txt"), "hello", 0o640)
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o750); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "/b.txt", filepath.Join(dir, "c"))

	info, err := r.Stat("/b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/b.txt" || info.Name != "b.txt" || info.Type != TypeFile || info.Size != 5 || info.Mode != 0o640 {
		t.Errorf("Stat(b.txt) = %+v", info)
	}
	if info, err = r.Stat("c"); err != nil || info.Type != TypeSymlink || info.Link != "/b.txt" {
		t.Errorf("Stat(c) = %+v, %v; want the symlink itself", info, err)
	}
	if info, err = r.Stat("/"); err != nil || info.Type != TypeDir || info.Path != "/" || info.Name != "/" {
		t.Errorf("Stat(/) = %+v, %v", info, err)
	}

	list, err := r.List("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name+":"+i.Type)
	}
	if got := strings.Join(names, " "); got != "a:dir b.txt:file c:symlink" {
		t.Errorf("List(/) = %s", got)
	}

	for _, c := range []struct {
		p    string
		want error
	}{{"missing", ErrNotFound}, {"missing/x", ErrNotFound}, {"b.txt/x", ErrNotDir}, {"../x", ErrInvalidPath}, {"", ErrInvalidPath}} {
		if _, err := r.Stat(c.p); !errors.Is(err, c.want) {
			t.Errorf("Stat(%q): err = %v, want %v", c.p, err, c.want)
		}
	}
	if _, err := r.List("b.txt"); !errors.Is(err, ErrNotDir) {
		t.Errorf("List(b.txt): err = %v, want ErrNotDir", err)
	}
	if _, err := r.Stat("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing): err = %v, want it to match fs.ErrNotExist too", err)
	}
}

func TestRead(t *testing.T) {
	r, dir := newRoot(t)
	mustWriteFile(t, filepath.Join(dir, "data/f"), "0123456789", 0o600)
	mustSymlink(t, "/data/f", filepath.Join(dir, "abs")) // absolute, but inside the root
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"data/f", "/data/f", "abs"} {
		var out bytes.Buffer
		info, err := r.Read(p, &out, 10)
		if err != nil || out.String() != "0123456789" || info.Size != 10 {
			t.Errorf("Read(%q) = %q, %+v, %v", p, out.String(), info, err)
		}
	}
	var out bytes.Buffer
	if _, err := r.Read("data/f", &out, 9); !errors.Is(err, ErrTooLarge) || out.Len() != 0 {
		t.Errorf("Read over the limit: err = %v, %d bytes streamed; want ErrTooLarge and none", err, out.Len())
	}
	if _, err := r.Read("data", io.Discard, 100); !errors.Is(err, ErrIsDir) {
		t.Errorf("Read(dir): err = %v, want ErrIsDir", err)
	}
	if _, err := r.Read("fifo", io.Discard, 100); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Read(fifo): err = %v, want ErrNotRegular", err)
	}
}

// withUmask runs the test under a restrictive umask, to show modes are set
// as given rather than masked.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

func TestWrite(t *testing.T) {
	withUmask(t, 0o077)
	r, dir := newRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}

	info, err := r.Write("d/f", body("hello"), 0o775, 5, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "d/f")); got != "hello" {
		t.Errorf("content = %q", got)
	}
	st, _ := os.Stat(filepath.Join(dir, "d/f"))
	if st.Mode().Perm() != 0o775 || info.Mode != 0o775 || info.Size != 5 || info.Path != "/d/f" {
		t.Errorf("mode %v, info %+v; want 0775 despite umask 077", st.Mode(), info)
	}

	if _, err := r.Write("/d/f", body("replaced"), 0o4755, 100, -1, -1); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(filepath.Join(dir, "d/f"))
	if got := readFile(t, filepath.Join(dir, "d/f")); got != "replaced" || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("after replace: %q, mode %v", got, st.Mode())
	}

	// Too large: an error, and nothing left behind (no file, no temporary).
	if _, err := r.Write("d/big", body("0123456789"), 0o644, 9, -1, -1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Write over the limit: err = %v, want ErrTooLarge", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "d")); len(entries) != 1 {
		t.Errorf("after a refused write, d holds %v; want only f", entries)
	}

	mustSymlink(t, "f", filepath.Join(dir, "d/link"))
	for _, c := range []struct {
		p    string
		want error
	}{
		{"d", ErrIsDir}, {"/", ErrIsDir}, {"nodir/f", ErrNotFound}, {"d/f/x", ErrNotDir},
		{"d/link", ErrNotRegular}, {"../f", ErrInvalidPath},
	} {
		if _, err := r.Write(c.p, body("x"), 0o644, 10, -1, -1); !errors.Is(err, c.want) {
			t.Errorf("Write(%q): err = %v, want %v", c.p, err, c.want)
		}
	}
	if got := readFile(t, filepath.Join(dir, "d/f")); got != "replaced" {
		t.Errorf("writing through d/link changed its target: %q", got)
	}
}

func TestMkdir(t *testing.T) {
	withUmask(t, 0o077)
	r, dir := newRoot(t)
	if err := r.Mkdir("a", 0o1777, false, -1, -1); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "a")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("a: %v, %v; want a sticky 0777 directory", st.Mode(), err)
	}
	if err := r.Mkdir("a", 0o755, false, -1, -1); !errors.Is(err, ErrExists) {
		t.Errorf("Mkdir(existing): err = %v, want ErrExists", err)
	}
	if err := r.Mkdir("x/y", 0o755, false, -1, -1); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mkdir(x/y) without parents: err = %v, want ErrNotFound", err)
	}
	if err := r.Mkdir("/a/b/c/", 0o750, true, -1, -1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/b", "a/b/c"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode().Perm() != 0o750 {
			t.Errorf("%s: %v, %v; want 0750", p, st.Mode(), err)
		}
	}
	if err := r.Mkdir("a/b", 0o700, true, -1, -1); err != nil {
		t.Errorf("Mkdir -p of an existing directory: %v", err)
	}
	mustWriteFile(t, filepath.Join(dir, "file"), "", 0o644)
	if err := r.Mkdir("file/sub", 0o755, true, -1, -1); !errors.Is(err, ErrNotDir) {
		t.Errorf("Mkdir -p under a file: err = %v, want ErrNotDir", err)
	}
}

func TestRemove(t *testing.T) {
	r, dir := newRoot(t)
	mustWriteFile(t, filepath.Join(dir, "f"), "x", 0o644)
	mustWriteFile(t, filepath.Join(dir, "tree/a/b/c"), "x", 0o644)
	mustSymlink(t, "f", filepath.Join(dir, "link"))
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := r.Remove("link", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Errorf("removing a symlink removed its target: %v", err)
	}
	if err := r.Remove("tree", false); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Remove(tree) without recursion: err = %v, want ErrNotEmpty", err)
	}
	for _, p := range []string{"f", "empty"} {
		if err := r.Remove(p, false); err != nil {
			t.Errorf("Remove(%q): %v", p, err)
		}
	}
	if err := r.Remove("tree", true); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("root still holds %v", entries)
	}
	for _, c := range []struct {
		p    string
		want error
	}{{"/", ErrInvalidPath}, {".", ErrInvalidPath}, {"a/..", ErrInvalidPath}, {"missing", ErrNotFound}} {
		if err := r.Remove(c.p, true); !errors.Is(err, c.want) {
			t.Errorf("Remove(%q): err = %v, want %v", c.p, err, c.want)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("root gone: %v", err)
	}
}

func TestOwnership(t *testing.T) {
	require.Root(t)
	r, dir := newRoot(t)
	owned := func(p string, uid, gid uint32, mode os.FileMode) {
		t.Helper()
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != uid || sys.Gid != gid || (mode != 0 && st.Mode() != mode) {
			t.Errorf("%s: %d:%d %v; want %d:%d %v", p, sys.Uid, sys.Gid, st.Mode(), uid, gid, mode)
		}
	}
	if _, err := r.Write("f", body("x"), 0o6755, 10, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	owned("f", 1234, 5678, 0o755|os.ModeSetuid|os.ModeSetgid) // chmod after chown keeps setuid/setgid
	if err := r.Mkdir("d/e", 0o700, true, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	owned("d", 1234, 5678, os.ModeDir|0o700)
	owned("d/e", 1234, 5678, os.ModeDir|0o700)
	archive := tarOf(t, entry{name: "x/", typ: '5', mode: 0o755}, entry{name: "x/f", body: "hi"}, entry{name: "x/l", typ: '2', link: "f"})
	if err := r.ExtractTar("/", archive, 100, 4321, 8765); err != nil {
		t.Fatal(err)
	}
	owned("x", 4321, 8765, os.ModeDir|0o755)
	owned("x/f", 4321, 8765, 0o644)
	owned("x/l", 4321, 8765, 0)
}
