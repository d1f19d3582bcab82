package image_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

func stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// The layer store may be a loop-mounted image: unmounted before the
	// directory is removed (cleanups run last first).
	t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "store"), unix.MNT_DETACH) })
	return dir
}

func open(t *testing.T, dir string) *image.Store {
	t.Helper()
	s, err := image.Open(dir, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func appImage(t *testing.T, base v1.Layer, marker string) v1.Image {
	return imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin", "APP=" + marker}, Cmd: []string{"/bin/sh"}, WorkingDir: "/home/app", User: "app"},
		base, imagetest.Layer(t, imagetest.File{Name: "app/marker", Body: marker}))
}

func diffIDs(t *testing.T, img v1.Image) []v1.Hash {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.RootFS.DiffIDs
}

func TestPullStoresAndSharesLayers(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	base := imagetest.BusyboxLayer(t)
	a, b := appImage(t, base, "a"), appImage(t, base, "b")
	refA, refB := reg.Push(t, "app/a:1", a), reg.Push(t, "app/b:1", b)
	s := open(t, stateDir(t))
	imgA, err := s.Pull(context.Background(), refA, nil)
	if err != nil {
		t.Fatal(err)
	}
	imgB, err := s.Pull(context.Background(), refB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgA.Paths) != 2 || imgA.Paths[1] != imgB.Paths[1] || imgA.Paths[0] == imgB.Paths[0] {
		t.Fatalf("layers not shared as expected: %v / %v", imgA.Paths, imgB.Paths)
	}
	if bd, _ := base.Digest(); reg.Fetched(bd.String()) != 1 {
		t.Errorf("the shared base was fetched %d times, want 1", reg.Fetched(bd.String()))
	}
	if got, _ := os.ReadFile(imgB.Paths[0] + "/app/marker"); string(got) != "b" {
		t.Errorf("top layer of b holds %q", got)
	}
	if imgA.Record.Config.User != "app" || imgA.Record.Config.WorkingDir != "/home/app" {
		t.Errorf("config not kept: %+v", imgA.Record.Config)
	}
	// Pulled again: nothing is fetched.
	before := reg.Blobs.Load()
	if _, err := s.Pull(context.Background(), refA, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.Blobs.Load() - before; n > 1 { // the config blob only
		t.Errorf("a second pull fetched %d blobs", n)
	}
	list, err := s.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %v, %v", list, err)
	}
	// Lookups by short digest and full reference.
	if _, err := s.Lookup(imgA.Record.Digest[7:19]); err != nil {
		t.Error(err)
	}
	if _, err := s.Lookup("nothere:1"); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("missing image: %v", err)
	}
}

func TestPullPicksTheHostPlatform(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	base := imagetest.BusyboxLayer(t)
	ref := reg.PushIndex(t, "multi:1", map[string]v1.Image{
		"linux/" + hostArch(): appImage(t, base, "host"),
		"linux/s390x":         appImage(t, base, "other"),
	})
	img, err := open(t, stateDir(t)).Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(img.Paths[0] + "/app/marker"); string(got) != "host" {
		t.Errorf("picked the image marked %q", got)
	}
}

// TestInterruptedPullResumes: a pull that fails midway keeps the layers
// it unpacked (pinned, so the snapshot catalog does not collect them);
// the next pull fetches only the rest.
func TestInterruptedPullResumes(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{}, imagetest.BusyboxLayer(t),
		imagetest.Layer(t, imagetest.File{Name: "one", Body: "1"}), imagetest.Layer(t, imagetest.File{Name: "two", Body: "2"}))
	ref := reg.Push(t, "three:1", img)
	dir := stateDir(t)
	s := open(t, dir)
	reg.FailBlobsAfter.Store(2) // the config and one layer
	if _, err := s.Pull(context.Background(), ref, nil); !errors.Is(err, image.ErrPull) {
		t.Fatalf("interrupted pull: %v", err)
	}
	have := 0
	for _, d := range diffIDs(t, img) {
		if _, err := os.Stat(filepath.Join(dir, "store/layers", d.Hex)); err == nil {
			have++
		}
	}
	if have != 1 {
		t.Fatalf("after the interruption %d layers are stored, want 1", have)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("an interrupted pull listed an image: %v", list)
	}
	reg.FailBlobsAfter.Store(0)
	before := reg.Blobs.Load()
	if _, err := open(t, dir).Pull(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.Blobs.Load() - before; n != 3 { // the config and the two missing layers
		t.Errorf("the resumed pull fetched %d blobs, want 3", n)
	}
}

// TestConcurrentPullsFetchOnce: two stores over one state directory (two
// processes) pull one image at once; each layer is fetched once.
func TestConcurrentPullsFetchOnce(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	img := appImage(t, imagetest.BusyboxLayer(t), "c")
	ref := reg.Push(t, "conc:1", img)
	dir := stateDir(t)
	stores := []*image.Store{open(t, dir), open(t, dir), open(t, dir)}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.Pull(context.Background(), ref, nil) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if n := reg.Fetched(d.String()); n != 1 {
			t.Errorf("layer %s fetched %d times", d, n)
		}
	}
}

func TestRemoveAndPruneKeepWhatIsInUse(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	base := imagetest.BusyboxLayer(t)
	refA, refB := reg.Push(t, "keep/a:1", appImage(t, base, "a")), reg.Push(t, "keep/b:1", appImage(t, base, "b"))
	dir := stateDir(t)
	s := open(t, dir)
	a, err := s.Pull(context.Background(), refA, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Pull(context.Background(), refB, nil)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := open(t, dir).Use(a) // another process runs a sandbox from a
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(refA); !errors.Is(err, image.ErrInUse) {
		t.Fatalf("Remove of an image in use: %v", err)
	}
	pr, err := s.Prune()
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Images) != 1 || pr.Images[0] != b.Record.Digest {
		t.Fatalf("Prune removed %v, want only b", pr.Images)
	}
	if _, err := os.Stat(b.Paths[0]); !os.IsNotExist(err) {
		t.Errorf("b's own layer survived: %v", err)
	}
	if _, err := os.Stat(a.Paths[1]); err != nil {
		t.Errorf("the base a shares with b went: %v", err)
	}
	lease.Release()
	if _, err := s.Remove(refA); err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("layer %s survived its last image", p)
		}
	}
	if _, err := s.Use(a); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("Use of a removed image: %v", err)
	}
}

func TestPruneRemovesAnInterruptedPullsLayers(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{}, imagetest.BusyboxLayer(t), imagetest.Layer(t, imagetest.File{Name: "x", Body: "x"}))
	ref := reg.Push(t, "half:1", img)
	dir := stateDir(t)
	s := open(t, dir)
	reg.FailBlobsAfter.Store(2)
	if _, err := s.Pull(context.Background(), ref, nil); err == nil {
		t.Fatal("pull did not fail")
	}
	layers, _ := os.ReadDir(filepath.Join(dir, "store/layers"))
	if len(layers) != 1 {
		t.Fatalf("%d layers after the interruption, want 1", len(layers))
	}
	pr, err := s.Prune()
	if err != nil {
		t.Fatal(err)
	}
	layers, _ = os.ReadDir(filepath.Join(dir, "store/layers"))
	if pr.Pulls != 1 || len(layers) != 0 {
		t.Errorf("Prune: %+v, %d layers left", pr, len(layers))
	}
}

// TestCraftedLayerRefused: an image whose layer climbs out of its
// directory is refused whole; nothing lands outside and no layer is kept.
func TestCraftedLayerRefused(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	outside := t.TempDir()
	evil := imagetest.Layer(t, imagetest.File{Name: "link", Link: outside}, imagetest.File{Name: "link/pwned", Body: "x"})
	ref := reg.Push(t, "evil:1", imagetest.Image(t, v1.Config{}, evil))
	dir := stateDir(t)
	_, err := open(t, dir).Pull(context.Background(), ref, nil)
	if !errors.Is(err, image.ErrUnsafeLayer) {
		t.Fatalf("pull of a crafted layer: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the crafted layer wrote %v outside", entries)
	}
	if layers, _ := os.ReadDir(filepath.Join(dir, "store/layers")); len(layers) != 0 {
		t.Errorf("a refused layer was kept")
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "store/tmp")); len(tmp) != 0 {
		t.Errorf("a refused layer left %d drafts", len(tmp))
	}
}

// TestTamperedLayerRefused: a layer whose content does not match the
// config's diff ID is not stored.
func TestTamperedLayerRefused(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File{Name: "f", Body: "real"}))
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	other, _ := imagetest.Layer(t, imagetest.File{Name: "f", Body: "claimed"}).DiffID()
	cf.RootFS.DiffIDs[0] = other
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	dir := stateDir(t)
	if _, err := open(t, dir).Pull(context.Background(), reg.Push(t, "tampered:1", img), nil); err == nil {
		t.Fatal("a tampered layer was accepted")
	}
	if layers, _ := os.ReadDir(filepath.Join(dir, "store/layers")); len(layers) != 0 {
		t.Errorf("a tampered layer was kept")
	}
}

func TestLoadDockerSaveAndOCILayout(t *testing.T) {
	require.Root(t)
	img := appImage(t, imagetest.BusyboxLayer(t), "loaded")
	tmp := t.TempDir()
	tag, _ := name.NewTag("example.com/loaded:1")
	if err := tarball.WriteToFile(tmp+"/save.tar", tag, img); err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(tmp+"/oci", empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "example.com/oci:2"})); err != nil {
		t.Fatal(err)
	}
	s := open(t, stateDir(t))
	for file, want := range map[string]string{tmp + "/save.tar": "example.com/loaded:1", tmp + "/oci": "example.com/oci:2"} {
		refs, err := s.Load(context.Background(), file, nil)
		if err != nil || len(refs) != 1 || refs[0] != want {
			t.Fatalf("Load %s = %v, %v", file, refs, err)
		}
		got, err := s.Lookup(want)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(got.Paths[0] + "/app/marker"); string(b) != "loaded" {
			t.Errorf("%s: marker %q", file, b)
		}
	}
	if _, err := s.Load(context.Background(), tmp, nil); err == nil {
		t.Error("a directory without oci-layout was loaded")
	}
}
