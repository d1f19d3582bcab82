package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every path the launcher hands criu's loader is the host's file itself,
// with no symlink on the way: walked from the host root's descriptor in
// the sandbox's mount namespace, an absolute symlink (Debian's
// /lib64/ld-linux-x86-64.so.2 is one) would lead into the sandbox's root.
func TestLauncherPathsHaveNoSymlinks(t *testing.T) {
	// /bin/true stands in for a criu from the host's packages: the same
	// loader, the host's library directories.
	l, err := newLauncher("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if l.loader == "" {
		t.Skip("/bin/true is static here: no loader to check")
	}
	for _, p := range append([]string{l.loader, l.criu, l.plugins}, l.libs...) {
		if real, err := filepath.EvalSymlinks(p); err != nil || real != p {
			t.Errorf("%s reaches its file through a symlink (%s, %v)", p, real, err)
		}
	}
}

// A library reached through an absolute symlink refuses the launcher; one
// reached through relative symlinks in its directory is found.
func TestFindLibraryRefusesAbsoluteSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libreal.so.1.0"), []byte("elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"libreal.so.1": "libreal.so.1.0", "libabs.so.1": filepath.Join(dir, "libreal.so.1.0")} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	l := &launcher{libs: []string{dir}}
	if p, err := l.findLibrary("libreal.so.1"); err != nil || p != filepath.Join(dir, "libreal.so.1.0") {
		t.Errorf("relative symlink: %q, %v", p, err)
	}
	if _, err := l.findLibrary("libabs.so.1"); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("absolute symlink: %v, want a refusal", err)
	}
	if _, err := l.findLibrary("libnone.so.1"); err == nil {
		t.Error("a missing library was found")
	}
}
