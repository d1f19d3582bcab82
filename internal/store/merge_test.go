package store

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// view describes every entry under dir as the kernel shows it: path,
// type, mode and content or link target.
func view(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", rel, info.Mode())
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func mountView(t *testing.T, lowers ...string) []string {
	t.Helper()
	dir := t.TempDir()
	must(t, unix.Mount("overlay", dir, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lowers, ":")))
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return view(t, dir)
}

// TestMergeShowsWhatTheStackShows builds a base and three layers that
// delete, replace and re-create one another's entries and the base's,
// and checks through the kernel that [merged, base] shows exactly what
// [layers..., base] shows, and [merged] alone what the stack would lay over
// an empty base.
func TestMergeShowsWhatTheStackShows(t *testing.T) {
	require.Root(t)
	require.Feature(t, "overlayfs")
	s := openStore(t)
	base := t.TempDir()
	write(t, base+"/etc/a", "base a\n", 0o644)
	write(t, base+"/etc/b", "base b\n", 0o644)
	write(t, base+"/opt/d/x", "base x\n", 0o644)
	write(t, base+"/srv/f/y", "base y\n", 0o644)
	write(t, base+"/var/g/z", "base z\n", 0o644)
	write(t, base+"/home/h", "base h\n", 0o644)

	layer := func(build func(dir string)) Digest {
		dir := filepath.Join(t.TempDir(), "layer")
		must(t, os.Mkdir(dir, 0o755))
		build(dir)
		l, err := commitDir(t, s, dir, 0)
		must(t, err)
		return l.Digest
	}
	whiteout := func(path string) {
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, unix.Mknod(path, unix.S_IFCHR|0o600, 0))
	}
	bottom := layer(func(d string) {
		whiteout(d + "/etc/a")                  // deletes a base file
		write(t, d+"/opt/d", "a file\n", 0o644) // a file over the base's directory
		whiteout(d + "/srv/f")                  // deletes a base directory
		write(t, d+"/var/g/new", "bottom\n", 0o600)
		write(t, d+"/tmp/only-bottom", "1\n", 0o644)
	})
	middle := layer(func(d string) {
		write(t, d+"/etc/b", "middle b\n", 0o640) // replaces a base file
		must(t, os.MkdirAll(d+"/opt/d", 0o755))   // a directory over the bottom's file
		write(t, d+"/opt/d/m", "middle m\n", 0o644)
		must(t, os.MkdirAll(d+"/srv/f", 0o700)) // a directory over the bottom's deletion
		write(t, d+"/srv/f/again", "again\n", 0o644)
		whiteout(d + "/tmp/only-bottom")
		must(t, os.Symlink("../etc/b", d+"/etc/link"))
	})
	top := layer(func(d string) {
		must(t, os.MkdirAll(d+"/var/g", 0o755)) // an opaque directory
		must(t, unix.Setxattr(d+"/var/g", opaqueXattr, []byte("y"), 0))
		write(t, d+"/var/g/top", "top\n", 0o644)
		write(t, d+"/etc/a", "top a\n", 0o644) // re-creates what the bottom deleted
		whiteout(d + "/home/h")
	})
	stack := []Digest{top, middle, bottom}
	merged, err := s.Merge(stack, []string{base})
	if err != nil {
		t.Fatal(err)
	}
	var lowers []string
	for _, d := range stack {
		lowers = append(lowers, s.Path(d))
	}
	want := mountView(t, append(lowers, base)...)
	got := mountView(t, merged.Path, base)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("[merged, base] shows\n%s\nwant what [layers..., base] shows\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The control: the stack hides entries of the base (what a merge that
	// forgot its deletions would show again), so the comparison can fail.
	baseView := mountView(t, base, t.TempDir())
	for _, hidden := range []string{"home/h -rw-r--r-- base h\n", "srv/f/y -rw-r--r-- base y\n", "opt/d/x -rw-r--r-- base x\n", "var/g/z -rw-r--r-- base z\n"} {
		if !slices.Contains(baseView, hidden) || slices.Contains(want, hidden) {
			t.Fatalf("control: %q should be in the base and hidden by the stack", hidden)
		}
	}
	for _, line := range []string{"etc/a -rw-r--r-- top a\n", "etc/b -rw-r----- middle b\n", "srv/f/again -rw-r--r-- again\n", "var/g/top -rw-r--r-- top\n"} {
		found := false
		for _, g := range got {
			found = found || g == line
		}
		if !found {
			t.Errorf("[merged, base] lacks %q", line)
		}
	}
}
