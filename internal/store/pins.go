package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// A pin keeps layers from collection on behalf of a holder the snapshot
// catalog does not know: an image (its layers) or a pull under way (the
// layers it has unpacked so far, kept for the pull that resumes it).
// Pins are files, so they hold across processes and restarts.

// pinName matches a pin's name; its length is checked apart (validPin):
// the bounded repetition {0,127} compiles to a program 128 copies long, at
// every start of the binary (0.8 ms of tine run's init, most of its
// largest package init).
var pinName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

func validPin(name string) bool { return len(name) <= 128 && pinName.MatchString(name) }

// Pin records that holder name keeps layers ds (replacing what it kept).
func (s *Store) Pin(name string, ds []Digest) error {
	if !validPin(name) {
		return fmt.Errorf("pin %q: want lowercase letters, digits, '.', '_' and '-'", name)
	}
	b, err := json.Marshal(ds)
	if err != nil {
		return fmt.Errorf("pin %s: %w", name, err)
	}
	tmp := filepath.Join(s.pinsDir(), "."+name+"."+randomName())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("pin %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.pinsDir(), name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("pin %s: %w", name, err)
	}
	return nil
}

// Unpin drops holder name's pin; a missing pin is no error.
func (s *Store) Unpin(name string) error {
	if !validPin(name) {
		return fmt.Errorf("unpin %q: not a pin name", name)
	}
	if err := os.Remove(filepath.Join(s.pinsDir(), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", name, err)
	}
	return nil
}

// Pinned returns every pinned layer with the holders that pin it.
func (s *Store) Pinned() (map[Digest][]string, error) {
	entries, err := os.ReadDir(s.pinsDir())
	if err != nil {
		return nil, fmt.Errorf("read pins: %w", err)
	}
	out := map[Digest][]string{}
	for _, e := range entries {
		if !validPin(e.Name()) {
			continue // a pin being written
		}
		b, err := os.ReadFile(filepath.Join(s.pinsDir(), e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // unpinned meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read pin %s: %w", e.Name(), err)
		}
		var ds []Digest
		if err := json.Unmarshal(b, &ds); err != nil {
			return nil, fmt.Errorf("read pin %s: %w", e.Name(), err)
		}
		for _, d := range ds {
			out[d] = append(out[d], e.Name())
		}
	}
	return out, nil
}
