package runcli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRelativeHostPaths: --rootfs and -v sources are made absolute before
// the spec leaves the CLI, so that a daemon taking the run over resolves
// them as the user meant (from the CLI's working directory, not its own).
func TestRelativeHostPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	s, err := Spec(Flags{RootFS: "root", Volumes: []string{"root:/mnt:ro", "./root:/data"}, Disk: "256m", Seccomp: "default"}, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "root")
	if s.RootFS != want {
		t.Errorf("--rootfs root: got %q, want %q", s.RootFS, want)
	}
	if len(s.Binds) != 2 || s.Binds[0].Source != want || s.Binds[0].Target != "/mnt" || !s.Binds[0].ReadOnly || s.Binds[1].Source != want || s.Binds[1].Target != "/data" {
		t.Errorf("-v with relative sources: got %+v, want sources %q", s.Binds, want)
	}
	if _, err := Spec(Flags{Volumes: []string{"root:mnt"}, Disk: "256m", Seccomp: "default"}, []string{"true"}); err == nil {
		t.Error("-v with a relative target accepted")
	}
}
