package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockFile takes an flock on path (made if missing); unlock closes it.
func lockFile(path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func (s *Store) readRefs() (map[string]string, error) {
	b, err := os.ReadFile(s.path("refs.json"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read image references: %w", err)
	}
	refs := map[string]string{}
	if err := json.Unmarshal(b, &refs); err != nil {
		return nil, fmt.Errorf("read image references: %w", err)
	}
	return refs, nil
}

// updateRefs changes refs.json under the images' lock, atomically.
func (s *Store) updateRefs(change func(map[string]string) error) error {
	unlock, err := lockFile(s.path("lock"), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("lock images: %w", err)
	}
	defer unlock()
	refs, err := s.readRefs()
	if err != nil {
		return err
	}
	if err := change(refs); err != nil {
		return err
	}
	return writeAtomic(s.path("refs.json"), refs)
}

// writeAtomic writes v as JSON to path through a synced temporary file
// and a rename, so a reader sees the old content or the new, whole.
func writeAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+randomSuffix())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
