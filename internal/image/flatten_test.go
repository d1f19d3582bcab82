package image_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
)

// TestDeepImageIsFlattened: an image of more layers than one overlay
// mount takes runs, its bottom layers merged into one (with their
// deletions applied) once, reused by the next run, and removed with the
// image.
func TestDeepImageIsFlattened(t *testing.T) {
	require.Root(t)
	f := func(name, body string) imagetest.File { return imagetest.File{Name: name, Body: body} }
	layers := []v1.Layer{imagetest.BusyboxLayer(t),
		imagetest.Layer(t, f("e/a", "a"), f("gone", "x"), f("d/a", "a"), f("gone2", "x")),
		// Deletions among the layers that are flattened...
		imagetest.Layer(t, f("e/.wh..wh..opq", ""), f("e/c", "c"), f(".wh.gone2", ""))}
	for i := range 110 { // a bottom longer than one mount: merged in rounds
		layers = append(layers, imagetest.Layer(t, f(fmt.Sprintf("f%03d", i), fmt.Sprint(i))))
	}
	// ... and over them.
	layers = append(layers, imagetest.Layer(t, f(".wh.gone", ""), f("d/.wh..wh..opq", ""), f("d/b", "b")))
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "deep:1", imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, layers...))
	dir := stateDir(t)
	s := open(t, dir)
	if _, err := s.Pull(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		img, err := s.Lookup(ref)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		spec := &sandbox.Spec{Seccomp: seccomp.Default, Stdio: [3]*os.File{nil, out, out},
			Args: []string{"/bin/sh", "-c", "ls /d /e; cat /f000 /f109; echo; ls /gone /gone2 2>&1 | wc -l | tr -d ' '"}}
		if err := img.Apply(spec, image.ApplyOptions{OneShot: true}); err != nil {
			t.Fatal(err)
		}
		if n := len(spec.Layers) + 1; n >= len(layers) {
			t.Fatalf("%d lowers for %d layers: nothing flattened", n, len(layers))
		}
		o, err := sandbox.Run(spec)
		if err != nil {
			t.Fatal(err)
		}
		out.Seek(0, 0)
		b, _ := io.ReadAll(out)
		if o.ExitCode != 0 {
			t.Fatalf("exit %d: %s", o.ExitCode, b)
		}
		return string(b)
	}
	if got, want := run(), "/d:\nb\n\n/e:\nc\n0109\n2\n"; got != want {
		t.Errorf("the flattened image shows %q, want %q", got, want)
	}
	stored, _ := os.ReadDir(filepath.Join(dir, "store/layers"))
	if len(stored) != len(layers)+1 {
		t.Errorf("%d layers stored, want the image's %d and one flattened", len(stored), len(layers))
	}
	run()
	if again, _ := os.ReadDir(filepath.Join(dir, "store/layers")); len(again) != len(stored) {
		t.Errorf("the second run flattened again: %d layers, were %d", len(again), len(stored))
	}
	if _, err := s.Remove(ref); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "store/layers")); len(left) != 0 {
		names := []string{}
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("removing the image left layers: %s", strings.Join(names, " "))
	}
}
