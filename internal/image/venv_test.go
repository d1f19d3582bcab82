package image_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
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

// TestBuildsCountAgainstTheBudget: a dependency build's sandbox takes its
// share of the store's budget while it runs and gives it back; a budget
// that refuses it fails the build, which then leaves nothing.
func TestBuildsCountAgainstTheBudget(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "py:1", imagetest.PythonImage(t, true))
	dir := stateDir(t)
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 1\n")
	full := errors.New("the budget is full")
	var admitted, released int
	var asked int64
	refuse := true
	s, err := image.Open(dir, image.Options{Admit: func(mem int64) (func(), error) {
		if refuse {
			return nil, full
		}
		admitted++
		asked = mem
		return func() { released++ }, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := image.Requirements{File: []byte("tinedemo\n"), FindLinks: wheels}
	if _, err := s.Venv(img, req); !errors.Is(err, full) {
		t.Fatalf("a build the budget refuses: %v", err)
	}
	if venvs, _ := os.ReadDir(filepath.Join(dir, "images/venvs")); len(venvs) != 0 {
		t.Errorf("a refused build left records: %v", venvs)
	}
	refuse = false
	if _, err := s.Venv(img, req); err != nil {
		t.Fatal(err)
	}
	if admitted != 1 || released != 1 || asked != sandbox.DefaultMemory {
		t.Errorf("admitted %d, released %d, for %d bytes; want 1, 1, %d", admitted, released, asked, sandbox.DefaultMemory)
	}
}
