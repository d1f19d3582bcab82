package sandbox

import (
	"os"
	"slices"
	"testing"

	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// TestViewMergesLayers: the plan-time view of a fork's root merges its
// snapshot layers over the base as overlayfs does: a layer's file shows,
// its whiteout deletes the base's file, its opaque directory hides the
// base's entries beneath it.
func TestViewMergesLayers(t *testing.T) {
	require.Root(t)
	base, layer := t.TempDir(), t.TempDir()
	for _, d := range []string{base + "/etc", base + "/opt/old", layer + "/etc", layer + "/opt"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(base+"/etc/gone", nil, 0o644)
	os.WriteFile(base+"/etc/kept", nil, 0o644)
	os.WriteFile(layer+"/etc/new", nil, 0o644)
	if err := unix.Mknod(layer+"/etc/gone", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(layer+"/opt", "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	v := newView("/stage/root")
	v.apply(Step{Kind: StepMount, Source: "overlay", Target: "/stage/root", FSType: "overlay",
		Data: "lowerdir=" + escapeOverlay(layer) + ":" + escapeOverlay(base) + ",upperdir=/stage/upper,workdir=/stage/work"})
	if got := v.list("/stage/root/etc"); !slices.Equal(got, []string{"kept", "new"}) {
		t.Errorf("etc lists %v, want [kept new]: the whiteout deletes gone, the layer adds new", got)
	}
	if got := v.list("/stage/root/opt"); len(got) != 0 {
		t.Errorf("opaque opt lists %v, want nothing of the base", got)
	}
	if e := v.lookup("/stage/root/etc/gone"); e.kind != kindNone {
		t.Errorf("whited-out file looks like %+v", e)
	}
	if e := v.lookup("/stage/root/opt/old"); e.kind != kindNone {
		t.Errorf("a base dir under an opaque one looks like %+v", e)
	}
	if e := v.lookup("/stage/root/etc/kept"); e.kind != kindFile {
		t.Errorf("base file under the layer looks like %+v", e)
	}
}
