package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// newDraft makes an empty directory in tmp/ and holds an exclusive flock
// on it until the draft is published or discarded, so that another
// process opening the store (tine pull beside the daemon) does not take
// it for a crashed commit's debris.
func (s *Store) newDraft() (dir string, lock int, err error) {
	dir = filepath.Join(s.tmpDir(), randomName())
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", -1, err
	}
	lock, err = unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Flock(lock, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			unix.Close(lock)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", -1, err
	}
	return dir, lock, nil
}

// removeUnlocked removes debris at path unless a live writer holds its
// lock.
func removeUnlocked(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(fd)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			return nil // a writer in another process is at work on it
		}
	}
	return os.RemoveAll(path)
}

// Draft returns an empty pending layer to be filled by the caller and
// published under d, a digest the caller vouches for (an image layer's
// diff ID, checked while it was unpacked). Fill Dir, then Publish or
// Discard.
func (s *Store) Draft(d Digest) (*Pending, error) {
	if _, err := ParseDigest(string(d)); err != nil {
		return nil, err
	}
	dir, lock, err := s.newDraft()
	if err != nil {
		return nil, fmt.Errorf("draft layer %s: %w", d, err)
	}
	return &Pending{s: s, tmp: dir, lock: lock, layer: Layer{Digest: d, Path: s.Path(d)}}, nil
}

// Dir is the draft's directory, to be filled before Publish.
func (p *Pending) Dir() string { return p.tmp }

// release drops the draft's lock.
func (p *Pending) release() {
	if p.lock >= 0 {
		unix.Close(p.lock)
		p.lock = -1
	}
}

// Digest is the digest the pending layer will be published under.
func (p *Pending) Digest() Digest { return p.layer.Digest }
