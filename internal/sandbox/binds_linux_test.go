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
		pr, err := startPlan(h, p, time.Now())
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
