package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// Lease marks an image in use by a sandbox (a one-shot run, a live
// sandbox, a function, a desktop): a shared flock on its record, so Remove
// and Prune, in this process or another, leave it alone. Release it when
// the sandbox is gone.
type Lease struct{ f *os.File }

// Use leases img. It fails with ErrNotFound when the image was removed
// since it was looked up.
func (s *Store) Use(img *Image) (*Lease, error) {
	f, err := os.Open(s.recordPath(img.Record.Digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %s: %w (removed meanwhile)", img.Ref, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("use image %s: %w", img.Ref, err)
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("use image %s: %w", img.Ref, err)
	}
	// Removed between the open and the lock: the record is unlinked.
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink == 0 {
		f.Close()
		return nil, fmt.Errorf("image %s: %w (removed meanwhile)", img.Ref, ErrNotFound)
	}
	return &Lease{f: f}, nil
}

// Release ends the lease; a nil lease is a no-op.
func (l *Lease) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// inUse reports whether a lease holds the image.
func (s *Store) inUse(digest string) bool {
	f, err := os.Open(s.recordPath(digest))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return true
	}
	return false
}

// Remove untags ref; when no reference is left on its image (or ref is
// the image's digest), the image goes, with the layers no other image or
// pull pins. An image in use is not removed (ErrInUse), and then neither
// is the reference.
func (s *Store) Remove(ref string) (removed bool, err error) {
	digest, err := s.find(ref)
	if err != nil {
		return false, err
	}
	_, byDigest := s.byDigestPrefix(ref)
	var others []string
	var full string
	if !byDigest {
		r, err := ParseRef(ref)
		if err != nil {
			return false, err
		}
		full = r.Name()
	}
	refs, err := s.readRefs()
	if err != nil {
		return false, err
	}
	for r, d := range refs {
		if d == digest && r != full {
			others = append(others, r)
		}
	}
	if !byDigest && len(others) > 0 {
		return false, s.updateRefs(func(m map[string]string) error { delete(m, full); return nil })
	}
	if err := s.removeImage(digest); err != nil {
		return false, err
	}
	return true, nil
}

// removeImage removes the image whose manifest is digest, its references
// and the layers only it pinned, unless it is in use.
func (s *Store) removeImage(digest string) error {
	rec, err := s.readRecord(digest)
	if err != nil {
		return err
	}
	if hs, err := s.holders(digest); err != nil {
		return err
	} else if len(hs) > 0 {
		return fmt.Errorf("image %s: %w by %s; delete those first", digest, ErrInUse, strings.Join(hs, ", "))
	}
	f, err := os.Open(s.recordPath(digest))
	if err != nil {
		return fmt.Errorf("remove image %s: %w", digest, err)
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("image %s: %w by a sandbox, function or desktop; remove those first", digest, ErrInUse)
	} else if err != nil {
		return fmt.Errorf("remove image %s: %w", digest, err)
	}
	if err := s.updateRefs(func(m map[string]string) error {
		for r, d := range m {
			if d == digest {
				delete(m, r)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// The record goes while its lock is held: a Use waiting on it finds
	// it unlinked.
	if err := os.Remove(s.recordPath(digest)); err != nil {
		return fmt.Errorf("remove image %s: %w", digest, err)
	}
	if err := s.Layers.Unpin("image-" + hexOf(digest)); err != nil {
		return err
	}
	ids := make([]store.Digest, len(rec.Layers))
	for i, l := range rec.Layers {
		ids[i] = l.DiffID
	}
	// Its bytecode layer goes with it.
	if b, ok := s.readBytecode(s.path("bytecode", hexOf(digest)+".json")); ok && b.Path != "" {
		ids = append(ids, store.Digest("sha256:"+filepath.Base(b.Path)))
	}
	os.Remove(s.path("bytecode", hexOf(digest)+".json"))
	if err := s.Layers.Unpin("bytecode-" + hexOf(digest)); err != nil {
		return err
	}
	// And the dependency layers built over it.
	venvs, _ := filepath.Glob(s.path("venvs", "*.json"))
	for _, rec := range venvs {
		var v venvRecord
		if b, err := os.ReadFile(rec); err != nil || json.Unmarshal(b, &v) != nil || v.Image != digest {
			continue
		}
		key := strings.TrimSuffix(filepath.Base(rec), ".json")
		os.Remove(rec)
		if err := s.Layers.Unpin("venv-" + key); err != nil {
			return err
		}
		ids = append(ids, v.Layer)
	}
	// And the layers its bottom ones were flattened into.
	flat, err := s.dropFlattened(digest)
	if err != nil {
		return err
	}
	return s.dropLayers(append(ids, flat...))
}

// dropLayers removes those of ds no pin keeps, each under its layer lock
// (a pull that wants one either pinned it before, or fetches it again
// after).
func (s *Store) dropLayers(ds []store.Digest) error {
	for _, d := range ds {
		if err := s.dropLayer(d); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) dropLayer(d store.Digest) error {
	unlock, err := lockFile(s.path("locks", d.Hex()), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("lock layer %s: %w", d, err)
	}
	defer unlock()
	pinned, err := s.Layers.Pinned()
	if err != nil {
		return err
	}
	if len(pinned[d]) > 0 || !s.Layers.Has(d) {
		return nil
	}
	return s.Layers.Remove(d)
}

// Pruned says what Prune removed.
type Pruned struct {
	Images []string `json:"images"` // digests
	Pulls  int      `json:"pulls"`  // interrupted pulls' leftovers (their layers, partial blobs)
}

// Prune removes every image no sandbox, function or desktop uses, and the
// layers interrupted pulls left (pulls under way are kept).
func (s *Store) Prune() (Pruned, error) {
	var out Pruned
	list, err := s.List()
	if err != nil {
		return out, err
	}
	for _, im := range list {
		err := s.removeImage(im.Digest)
		switch {
		case errors.Is(err, ErrInUse), errors.Is(err, ErrNotFound):
		case err != nil:
			return out, err
		default:
			out.Images = append(out.Images, im.Digest)
		}
	}
	pins, err := s.Layers.Pinned()
	if err != nil {
		return out, err
	}
	stale := map[string][]store.Digest{}
	for d, holders := range pins {
		for _, h := range holders {
			if hx, ok := strings.CutPrefix(h, "pull-"); ok {
				stale[hx] = append(stale[hx], d)
			}
		}
	}
	for hx, ds := range stale {
		unlock, err := lockFile(s.path("pulls", hx), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue // under way
		}
		if err != nil {
			return out, err
		}
		err = s.Layers.Unpin("pull-" + hx)
		if err == nil {
			err = s.dropLayers(ds)
		}
		os.Remove(s.path("pulls", hx))
		unlock()
		if err != nil {
			return out, err
		}
		out.Pulls++
	}
	n, err := s.prunePartials()
	out.Pulls += n
	return out, err
}

// holdPrefix names the pins by which something other than a sandbox (a
// snapshot of a sandbox that ran from the image) holds an image: they
// keep its layers from every collection, and Remove and Prune refuse it.
func holdPrefix(digest string) string { return "hold-" + hexOf(digest) + "-" }

// Hold keeps image digest (and its layers) until Unhold with the same
// holder (lowercase letters, digits, '-').
func (s *Store) Hold(digest, holder string) error {
	rec, err := s.readRecord(digest)
	if err != nil {
		return err
	}
	ids := make([]store.Digest, len(rec.Layers))
	for i, l := range rec.Layers {
		ids[i] = l.DiffID
	}
	return s.Layers.Pin(holdPrefix(digest)+holder, ids)
}

// Unhold releases Hold.
func (s *Store) Unhold(digest, holder string) error {
	return s.Layers.Unpin(holdPrefix(digest) + holder)
}

// holders names what holds image digest (Hold).
func (s *Store) holders(digest string) ([]string, error) {
	pins, err := s.Layers.Pinned()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, hs := range pins {
		for _, h := range hs {
			if who, ok := strings.CutPrefix(h, holdPrefix(digest)); ok && !seen[who] {
				seen[who] = true
				out = append(out, who)
			}
		}
	}
	return out, nil
}
