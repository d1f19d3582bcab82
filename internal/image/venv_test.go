package image_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/require"
)

// TestVenvBuiltOnceAndRemovedWithItsImage: three stores over one state
// directory (three processes) ask for one environment at once: one builds
// it, the others get the same layer; removing the image removes it.
func TestVenvBuiltOnceAndRemovedWithItsImage(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "py:1", imagetest.PythonImage(t, true))
	dir := stateDir(t)
	img, err := open(t, dir).Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 1\n")
	req := image.Requirements{File: []byte("tinedemo\n"), FindLinks: wheels}
	var wg sync.WaitGroup
	got := make([]image.Venv, 3)
	errs := make([]error, 3)
	for i := range got {
		s := open(t, dir)
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = s.Venv(img, req) }()
	}
	wg.Wait()
	built := 0
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got[i].Built {
			built++
		}
		if got[i].Path != got[0].Path {
			t.Errorf("different layers: %s, %s", got[i].Path, got[0].Path)
		}
	}
	if built != 1 {
		t.Errorf("%d builds of one environment, want 1", built)
	}
	if _, err := os.Stat(filepath.Join(got[0].Path, "opt/tine/venv/bin/python")); err != nil {
		t.Errorf("the layer holds no venv: %v", err)
	}
	if _, err := open(t, dir).Remove(ref); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got[0].Path); !os.IsNotExist(err) {
		t.Errorf("the environment outlived its image: %v", err)
	}
}
