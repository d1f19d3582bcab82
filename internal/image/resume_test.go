package image_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/require"
)

// TestPullResumesWithinALayer: a registry that drops the connection
// midway through a layer's blob; the next pull asks for the rest only (a
// Range from the bytes it kept) and the layer verifies. A kept prefix that
// was tampered with fails the blob's digest and is dropped.
func TestPullResumesWithinALayer(t *testing.T) {
	require.Root(t)
	reg := imagetest.NewRegistry(t)
	big := make([]byte, 1<<20) // random: the blob is about as big
	rand.Read(big)
	layer := imagetest.Layer(t, imagetest.File{Name: "big", Body: string(big)})
	ref := reg.Push(t, "big:1", imagetest.Image(t, v1.Config{}, layer))
	bd, _ := layer.Digest()
	diffID, _ := layer.DiffID()
	size, _ := layer.Size()
	blob := bd.String()
	dir := stateDir(t)
	partial := filepath.Join(dir, "images/pulls", "blob-"+bd.Hex)
	const cut = 300 << 10

	pullCut := func() {
		t.Helper()
		reg.CutBlob(blob, cut)
		_, err := open(t, dir).Pull(context.Background(), ref, nil)
		reg.CutBlob("", 0)
		if !errors.Is(err, image.ErrPull) || !strings.Contains(err.Error(), "the next pull resumes") {
			t.Fatalf("a pull cut short: %v", err)
		}
		if st, err := os.Stat(partial); err != nil || st.Size() != cut {
			t.Fatalf("after the cut the pull kept %v bytes (%v), want %d", st, err, cut)
		}
	}

	// A tampered prefix: the resumed blob's digest (or content) fails,
	// and nothing of it is kept.
	pullCut()
	b, err := os.ReadFile(partial)
	if err != nil {
		t.Fatal(err)
	}
	b[cut/2] ^= 0xff
	if err := os.WriteFile(partial, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, dir).Pull(context.Background(), ref, nil); err == nil || !strings.Contains(err.Error(), "corrupt") && !strings.Contains(err.Error(), "gzip") && !strings.Contains(err.Error(), "flate") {
		t.Fatalf("a pull resumed from a tampered prefix: %v", err)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Errorf("the tampered prefix was kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "store/layers", diffID.Hex)); !os.IsNotExist(err) {
		t.Errorf("a layer from a tampered blob was stored: %v", err)
	}

	// A clean prefix: the next pull fetches the rest only.
	pullCut()
	sentBefore, _ := reg.Sent(blob)
	img, err := open(t, dir).Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, ranges := reg.Sent(blob)
	if got := sent - sentBefore; got != size-cut {
		t.Errorf("the resumed pull fetched %d bytes of the blob, want the %d after the cut", got, size-cut)
	}
	if want := fmt.Sprintf("bytes=%d-%d", cut, size-1); ranges[len(ranges)-1] != want {
		t.Errorf("the resumed pull asked for %q, want %q", ranges[len(ranges)-1], want)
	}
	got, err := os.ReadFile(filepath.Join(img.Paths[0], "big"))
	if err != nil || string(got) != string(big) {
		t.Errorf("the resumed layer's file differs (%d bytes, %v)", len(got), err)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Errorf("the partial blob outlived the pull: %v", err)
	}

	// Prune removes what an interrupted pull kept of a blob.
	if _, err := open(t, dir).Remove(ref); err != nil {
		t.Fatal(err)
	}
	pullCut()
	pr, err := open(t, dir).Prune()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) || pr.Pulls == 0 {
		t.Errorf("Prune (%+v) left the partial blob: %v", pr, err)
	}
}
