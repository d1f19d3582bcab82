// Package store owns tine's content-addressed layers: read-only directory
// trees, each named by a digest of their contents, usable as an overlay
// lower directory. Snapshot layers (a sandbox's captured upper, named by
// the digest of its canonical description) and image layers (unpacked by
// internal/image, named by their diff ID: the sha256 of the uncompressed
// tar) are the same kind of thing and live side by side.
//
// Layout under the store's root (the state directory + "/store"):
//
//	layers/<hex>   a committed layer
//	tmp/<random>   a layer being written (flock'ed by its writer); removed
//	               by the next Open once no writer holds it
//	pins/<name>    the digests a holder other than the snapshot catalog
//	               (an image, a pull under way) keeps from collection
//
// A layer is written in tmp/ and renamed into layers/ only when complete
// and synced, so a crash leaves debris in tmp/ (cleaned on Open), never a
// half layer under a digest. Two commits of the same tree share one layer.
// Several processes may use one store (the daemon, tine pull, tine run
// --image): a writer's lock keeps its draft from being taken for debris.
package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotFound says no committed layer has the digest.
var ErrNotFound = errors.New("no such layer")

// ErrTooLarge says a tree being committed went past its size limit.
var ErrTooLarge = errors.New("layer too large")

// Digest names a layer: "sha256:" and 64 hex digits.
type Digest string

// ParseDigest checks s has Digest's form.
func ParseDigest(s string) (Digest, error) {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", fmt.Errorf("layer digest %q: want sha256: and 64 hex digits", s)
	}
	if _, err := hex.DecodeString(hexPart); err != nil || strings.ToLower(hexPart) != hexPart {
		return "", fmt.Errorf("layer digest %q: want sha256: and 64 lowercase hex digits", s)
	}
	return Digest(s), nil
}

func (d Digest) hex() string { return strings.TrimPrefix(string(d), "sha256:") }

// Hex is the digest without its "sha256:" prefix.
func (d Digest) Hex() string { return d.hex() }

// Layer describes a committed layer.
type Layer struct {
	Digest Digest
	// Path is the layer's directory, for an overlay lowerdir.
	Path string
	// Bytes is the sum of its regular files' sizes; Entries counts every
	// file, directory, link and whiteout in it.
	Bytes   int64
	Entries int64
}

// Store is a directory of layers.
type Store struct {
	root string
}

// Open opens (creating if needed) the store at root and removes whatever a
// crashed commit left in tmp/.
func Open(root string) (*Store, error) {
	s := &Store{root: root}
	for _, d := range []string{root, s.layersDir(), s.tmpDir(), s.pinsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open layer store: %w", err)
		}
	}
	debris, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return nil, fmt.Errorf("open layer store: %w", err)
	}
	for _, e := range debris {
		if err := removeUnlocked(filepath.Join(s.tmpDir(), e.Name())); err != nil {
			return nil, fmt.Errorf("open layer store: remove debris: %w", err)
		}
	}
	return s, nil
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

func (s *Store) layersDir() string { return filepath.Join(s.root, "layers") }
func (s *Store) tmpDir() string    { return filepath.Join(s.root, "tmp") }
func (s *Store) pinsDir() string   { return filepath.Join(s.root, "pins") }

// Path is where layer d lives (whether or not it exists).
func (s *Store) Path(d Digest) string { return filepath.Join(s.layersDir(), d.hex()) }

// Has reports whether layer d is committed.
func (s *Store) Has(d Digest) bool {
	st, err := os.Lstat(s.Path(d))
	return err == nil && st.IsDir()
}

// List returns the digests of every committed layer.
func (s *Store) List() ([]Digest, error) {
	entries, err := os.ReadDir(s.layersDir())
	if err != nil {
		return nil, fmt.Errorf("list layers: %w", err)
	}
	var out []Digest
	for _, e := range entries {
		if d, err := ParseDigest("sha256:" + e.Name()); err == nil && e.IsDir() {
			out = append(out, d)
		}
	}
	return out, nil
}

// Remove deletes layer d. The caller makes sure nothing uses it (an
// overlay holding it as a lower keeps its inodes alive, but a new mount
// would fail).
func (s *Store) Remove(d Digest) error {
	if !s.Has(d) {
		return fmt.Errorf("remove layer %s: %w", d, ErrNotFound)
	}
	// Rename first, so a crash mid-removal leaves tmp debris, not a
	// partial layer under its digest.
	doomed := filepath.Join(s.tmpDir(), "rm-"+d.hex()+"-"+randomName())
	if err := os.Rename(s.Path(d), doomed); err != nil {
		return fmt.Errorf("remove layer %s: %w", d, err)
	}
	if err := os.RemoveAll(doomed); err != nil {
		return fmt.Errorf("remove layer %s: %w", d, err)
	}
	return nil
}

func randomName() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}
