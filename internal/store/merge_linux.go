package store

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/fds"
)

// opaqueXattr marks an overlay directory that hides what lies below it.
const opaqueXattr = "trusted.overlay.opaque"

// Merge commits one layer that stands for the stack layers (topmost first)
// over any base: an overlay mount of [merged, base] shows what [layers...,
// base] shows. Unlike a copy of the stack's merged view, which has the
// deletions applied and forgets them, the merged layer keeps what the
// stack hides of the base: a whiteout wherever the topmost word on a path
// is a deletion, and an opaque directory wherever a directory replaces
// something the layers below hid or replaced (overlay lookup stops at a
// non-directory or a whiteout, so the base's directory there must stay
// hidden). Hard links between layers are not kept (each file is copied).
// A fork chain is flattened with it (docs/decisions/0012).
//
// below are the directories the merged layer will lie on (the base, or
// an image's layers). A whiteout is kept only where one of them has its
// parent directory and no directory above it in the merge is opaque:
// elsewhere nothing below can have the path, and the kernel lists the
// whiteouts of a directory that lies in one layer only (it merges no
// entries there), so a kept one would show as a name that cannot be
// opened. Empty below keeps every whiteout.
func (s *Store) Merge(layers []Digest, below []string) (Layer, error) {
	scratch, lock, err := s.newDraft()
	if err != nil {
		return Layer{}, fmt.Errorf("merge layers: %w", err)
	}
	defer func() {
		unix.Close(lock)
		os.RemoveAll(scratch)
	}()
	dst, err := os.Open(scratch)
	if err != nil {
		return Layer{}, fmt.Errorf("merge layers: %w", err)
	}
	defer dst.Close()
	m := &merger{copier: copier{sum: sha256.New(), top: "/proc/self/fd/" + strconv.Itoa(int(dst.Fd())),
		links: map[fileID]string{}, buf: make([]byte, 256<<10)}}
	for i := len(layers) - 1; i >= 0; i-- { // bottom first
		src, err := os.Open(s.Path(layers[i]))
		if err != nil {
			return Layer{}, fmt.Errorf("merge layers: %w", err)
		}
		err = m.apply(int(src.Fd()), int(dst.Fd()), "")
		src.Close()
		if err != nil {
			return Layer{}, fmt.Errorf("merge layer %s: %w", layers[i], err)
		}
	}
	if len(below) > 0 {
		if err := pruneWhiteouts(scratch, "", below, false); err != nil {
			return Layer{}, fmt.Errorf("merge layers: %w", err)
		}
	}
	// The root of the stack is its top layer's root (the sandbox's "/").
	if len(layers) > 0 {
		top, err := os.Open(s.Path(layers[0]))
		if err != nil {
			return Layer{}, fmt.Errorf("merge layers: %w", err)
		}
		defer top.Close()
		var root unix.Stat_t
		if err := unix.Fstat(int(top.Fd()), &root); err != nil {
			return Layer{}, fmt.Errorf("merge layers: %w", err)
		}
		if err := m.finish(int(top.Fd()), "", int(dst.Fd()), "", &root); err != nil {
			return Layer{}, fmt.Errorf("merge layers: the root: %w", err)
		}
	}
	return s.Commit(dst, 0)
}

// pruneWhiteouts removes the whiteouts under root/rel that nothing in
// below needs (Merge). opaque says whether a directory at or above rel is.
func pruneWhiteouts(root, rel string, below []string, opaqueAbove bool) error {
	dir := filepath.Join(root, rel)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	parentBelow := false
	if !opaqueAbove {
		for _, b := range below {
			if st, err := os.Lstat(filepath.Join(b, rel)); err == nil && st.IsDir() {
				parentBelow = true
				break
			}
		}
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR: // a whiteout (Commit refuses other devices)
			if !parentBelow {
				if err := os.Remove(p); err != nil {
					return err
				}
			}
		case unix.S_IFDIR:
			sub := filepath.Join(rel, e.Name())
			if err := pruneWhiteouts(root, sub, below, opaqueAbove || opaqueAt(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

func opaqueAt(path string) bool {
	v := make([]byte, 8)
	n, err := unix.Lgetxattr(path, opaqueXattr, v)
	return err == nil && string(v[:n]) == "y"
}

// merger lays one layer over the merge so far.
type merger struct{ copier }

func (m *merger) apply(src, dst int, rel string) error {
	names, err := fds.ReadNames(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", show(rel), err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := m.entry(src, dst, name, rel+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

func (m *merger) entry(src, dst int, name, rel string) error {
	var st, below unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	belowErr := unix.Fstatat(dst, name, &below, unix.AT_SYMLINK_NOFOLLOW)
	exists := belowErr == nil
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir && exists && below.Mode&unix.S_IFMT == unix.S_IFDIR && !opaque(src, name) {
		// A directory over a directory: their entries merge; this
		// layer's owner, mode and attributes win (a lower layer's opaque
		// mark stays: it still hides the base).
		sub, err := openDir(src, name)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(sub)
		dsub, err := openDir(dst, name)
		if err != nil {
			return fmt.Errorf("open merged %s: %w", rel, err)
		}
		defer unix.Close(dsub)
		if err := m.apply(sub, dsub, rel); err != nil {
			return err
		}
		return m.finish(src, name, dst, name, &st)
	}
	if exists {
		if err := os.RemoveAll(filepath.Join(fdPath(dst, ""), name)); err != nil {
			return fmt.Errorf("replace %s: %w", rel, err)
		}
	}
	if err := m.copier.entry(src, dst, name, rel); err != nil {
		return err
	}
	if isDir && exists {
		// It replaces a file or a deletion of the layers below, which
		// hid the base's entry: so must it.
		if err := unix.Lsetxattr(fdPath(dst, name), opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("mark %s opaque: %w", rel, err)
		}
	}
	return nil
}

func opaque(dir int, name string) bool { return opaqueAt(fdPath(dir, name)) }

func openDir(dir int, name string) (int, error) {
	return unix.Openat(dir, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
