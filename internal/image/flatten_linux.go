package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tine-run/tine/internal/kernel/osthread"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// maxLowerBytes bounds the lowerdir list of a sandbox's overlay: mount(2)
// takes its options in one page (4096 bytes, measured: ADR 0019), less
// room for the upper, work and view directories and the other options.
const maxLowerBytes = 4096 - 512

// lowerBytes is the length of paths as one lowerdir option.
func lowerBytes(paths []string) int {
	n := 0
	for _, p := range paths {
		n += len(p) + 1
	}
	return n
}

type flatRecord struct {
	Version int          `json:"version"`
	Image   string       `json:"image"`
	Layer   store.Digest `json:"layer"`
}

// flattenToFit returns img's paths with as few of its bottom layers
// merged into one as make the whole stack (above: the layers the sandbox
// stacks over the image, a fork's) fit one overlay mount. The merged
// layer is made once per image and chunk, and goes with the image.
func (s *Store) flattenToFit(img *Image, above []string) ([]string, error) {
	over := lowerBytes(above) + lowerBytes(img.Paths) - maxLowerBytes
	if over <= 0 {
		return img.Paths, nil
	}
	// Merge the bottom k layers into one (a path as long as the others).
	n := len(img.Paths)
	k, saved := 1, 0
	for ; k <= n; k++ {
		saved = lowerBytes(img.Paths[n-k:]) - (len(img.Paths[n-1]) + 1)
		if saved >= over {
			break
		}
	}
	if k > n {
		return nil, fmt.Errorf("image %s: its %d layers and the %d stacked over it do not fit one overlay mount even with the image flattened", img.Ref, n, len(above))
	}
	chunk := img.Paths[n-k:]
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", img.Record.Digest)
	for _, p := range chunk {
		fmt.Fprintf(h, "%s\n", filepath.Base(p))
	}
	key := hex.EncodeToString(h.Sum(nil))
	rec := s.path("flat", key+".json")
	if l, ok := s.readFlat(rec); ok {
		return append(append([]string(nil), img.Paths[:n-k]...), s.Layers.Path(l)), nil
	}
	if err := os.MkdirAll(s.path("flat"), 0o700); err != nil {
		return nil, err
	}
	unlock, err := lockFile(s.path("locks", "flat-"+key), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, ok := s.readFlat(rec)
	if !ok {
		if l, err = s.flatten(chunk, "flat-"+key); err != nil {
			return nil, fmt.Errorf("image %s: flatten its bottom %d layers to fit one overlay mount: %w", img.Ref, k, err)
		}
		if err := writeAtomic(rec, flatRecord{Version: FormatVersion, Image: img.Record.Digest, Layer: l}); err != nil {
			return nil, err
		}
	}
	return append(append([]string(nil), img.Paths[:n-k]...), s.Layers.Path(l)), nil
}

func (s *Store) readFlat(rec string) (store.Digest, bool) {
	b, err := os.ReadFile(rec)
	if err != nil {
		return "", false
	}
	var r flatRecord
	if json.Unmarshal(b, &r) != nil || r.Version != FormatVersion || !s.Layers.Has(r.Layer) {
		return "", false
	}
	return r.Layer, true
}

// flatten merges layers (topmost first) into one layer of the store,
// pinned as pin: a read-only overlay of them, mounted in a mount
// namespace of a thread thrown away after, copied into the store. The
// merged view has the deletions applied, so the copy needs no whiteouts:
// it is only ever the bottom of a stack. More layers than one mount takes
// are merged in rounds, bottom first.
func (s *Store) flatten(layers []string, pin string) (store.Digest, error) {
	for _, l := range layers {
		if strings.ContainsAny(l, ":,\\") {
			return "", fmt.Errorf("layer path %q has a character overlay options cannot take (':', ',', '\\'): use another --state-dir", l)
		}
	}
	var made []store.Digest
	fail := func(err error) (store.Digest, error) {
		s.Layers.Unpin(pin)
		s.dropLayers(made)
		return "", err
	}
	for len(layers) > 1 {
		n := len(layers)
		k := n
		for lowerBytes(layers[n-k:]) > maxLowerBytes {
			k--
		}
		if k < 2 {
			return fail(fmt.Errorf("layer paths too long to merge (%s)", layers[n-1]))
		}
		d, err := s.mergeOnce(layers[n-k:], pin)
		if err != nil {
			return fail(err)
		}
		if len(made) > 0 {
			s.dropLayer(made[len(made)-1]) // the previous round's, merged into d
		}
		made = append(made, d)
		layers = append(append([]string(nil), layers[:n-k]...), s.Layers.Path(d))
	}
	if len(made) == 0 {
		return "", fmt.Errorf("nothing to flatten")
	}
	return made[len(made)-1], nil
}

// mergeOnce copies the merged view of layers (one mount's worth) into a
// layer, pinned as pin while the rounds go on.
func (s *Store) mergeOnce(layers []string, pin string) (store.Digest, error) {
	mnt, err := os.MkdirTemp("", "tine-flatten-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(mnt) // empty here: the mount was in the thread's namespace
	var dir *os.File
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return
		}
		if err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return
		}
		if err = unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "lowerdir="+strings.Join(layers, ":")); err != nil {
			err = fmt.Errorf("mount the %d layers: %w", len(layers), err)
			return
		}
		// The descriptor keeps the mount after the namespace goes.
		dir, err = os.Open(mnt)
	})
	if err != nil {
		return "", err
	}
	defer dir.Close()
	p, err := s.Layers.Copy(dir, 0)
	if err != nil {
		return "", err
	}
	d := p.Digest()
	if err := s.Layers.Pin(pin, []store.Digest{d}); err != nil {
		p.Discard()
		return "", err
	}
	if _, err := p.Publish(); err != nil {
		return "", err
	}
	return d, nil
}

// dropFlattened removes the flattened layers of image digest.
func (s *Store) dropFlattened(digest string) ([]store.Digest, error) {
	recs, _ := filepath.Glob(s.path("flat", "*.json"))
	var out []store.Digest
	for _, rec := range recs {
		var r flatRecord
		if b, err := os.ReadFile(rec); err != nil || json.Unmarshal(b, &r) != nil || r.Image != digest {
			continue
		}
		os.Remove(rec)
		if err := s.Layers.Unpin("flat-" + strings.TrimSuffix(filepath.Base(rec), ".json")); err != nil {
			return out, err
		}
		out = append(out, r.Layer)
	}
	return out, nil
}
