package sandbox

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// A bind source swapped between the plan and the start — for a symlink to
// the host's /root, or another directory — is not what gets mounted: the
// start refuses it, since the plan checked another file.
func TestBindSourceSwappedAfterThePlanIsRefused(t *testing.T) {
	require.Root(t)
	dir := t.TempDir()
	src := dir + "/src"
	os.Mkdir(src, 0o755)
	os.WriteFile(src+"/f", []byte("checked"), 0o644)
	spec := func() *Spec {
		return &Spec{Args: []string{"/bin/cat", "/data/f"}, Binds: []Bind{{Source: src, Target: "/data", ReadOnly: true}}, Seccomp: seccomp.Default}
	}
	// Control: unswapped, the plan's source is mounted.
	p, err := NewPlan(spec(), false)
	if err != nil {
		t.Fatal(err)
	}
	if out, o := runPlan(t, p); out != "checked" || o.ExitCode != 0 {
		t.Fatalf("control run: %q, %+v", out, o)
	}
	h, err := hostOnce()
	if err != nil {
		t.Fatal(err)
	}
	for name, swap := range map[string]func() error{
		"symlink":   func() error { return os.Symlink("/root", src) },
		"other dir": func() error { return os.Mkdir(src, 0o755) },
	} {
		p, err := NewPlan(spec(), false)
		if err != nil {
			t.Fatal(err)
		}
		os.Rename(src, dir+"/moved")
		if err := swap(); err != nil {
			t.Fatal(err)
		}
		pr, err := startPlan(h, p, time.Now(), nil)
		if err == nil {
			pr.Wait()
		}
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "replaced") {
			t.Errorf("%s swapped in after the plan: got %v, want ErrInvalidSpec saying it was replaced", name, err)
		}
		os.Remove(src)
		os.Rename(dir+"/moved", src)
	}
}

// The child does not trust the plan's resolution: a base changed after the
// plan, a directory on a bind target's way replaced by a symlink to the
// host's /etc, fails the setup instead of making the target on the host.
func TestBindTargetSwappedToSymlinkAfterThePlanFails(t *testing.T) {
	require.Root(t)
	root, src := t.TempDir(), t.TempDir()
	os.Mkdir(root+"/data", 0o755)
	name := "tine-swapped-" + strings.ReplaceAll(t.Name(), "/", "-")
	p, err := NewPlan(&Spec{Args: []string{"/bin/true"}, RootFS: root, Binds: []Bind{{Source: src, Target: "/data/" + name}}, Seccomp: seccomp.Default}, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Binds[0].Target != "/data/"+name {
		t.Fatalf("planned target %s", p.Binds[0].Target)
	}
	os.Remove(root + "/data")
	if err := os.Symlink("/etc", root+"/data"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll("/etc/" + name) })
	h, err := hostOnce()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := startPlan(h, p, time.Now(), nil)
	if err == nil {
		pr.Wait()
	}
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Errorf("a symlink swapped onto the target's way: got %v, want the setup to fail with ELOOP", err)
	}
	if _, err := os.Lstat("/etc/" + name); err == nil {
		t.Errorf("the bind target was made on the host as /etc/%s", name)
	}
}
