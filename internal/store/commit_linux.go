package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/fds"
)

// Commit copies the directory tree open at src into the store as a layer
// and returns it; a tree with the same description as an existing layer
// returns that layer and keeps one copy. maxBytes (> 0) bounds the regular
// files' total size: past it Commit fails with ErrTooLarge and keeps
// nothing.
//
// The source may belong to a sandbox (its captured upper), so it is read
// through descriptors only: every entry is opened relative to its parent's
// descriptor with O_NOFOLLOW, symlinks are copied as links and never
// followed. Copied: directories, regular files (hard links kept as links),
// symlinks, FIFOs, overlay whiteouts (character devices 0:0), owners,
// permission bits with setuid/setgid/sticky, extended attributes
// (trusted.overlay.opaque marks an opaque directory) and times. Sockets
// are skipped (nothing listens on a copy); any other device node is an
// error, since a layer must never hold a usable device.
//
// The digest covers every path, type, mode, owner, extended attribute,
// symlink target, hard link and content, but not times: trees equal in all
// but mtimes share a layer (with the first one's times).
func (s *Store) Commit(src *os.File, maxBytes int64) (Layer, error) {
	p, err := s.Copy(src, maxBytes)
	if err != nil {
		return Layer{}, err
	}
	return p.Publish()
}

// Pending is a copied tree not yet in the store: Publish or Discard it.
// Splitting Commit lets a caller stop holding the source (a frozen
// sandbox) as soon as the copy is made, before the sync to disk.
type Pending struct {
	s     *Store
	tmp   string
	lock  int // the draft's flock (newDraft)
	layer Layer
}

// Copy copies the tree open at src into the store's tmp/, as Commit
// describes, and returns it pending.
func (s *Store) Copy(src *os.File, maxBytes int64) (*Pending, error) {
	tmp, lock, err := s.newDraft()
	if err != nil {
		return nil, fmt.Errorf("commit layer: %w", err)
	}
	copied := false
	defer func() {
		if !copied {
			os.RemoveAll(tmp)
			unix.Close(lock)
		}
	}()
	dst, err := unix.Open(tmp, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("commit layer: %w", err)
	}
	defer unix.Close(dst)

	c := &copier{sum: sha256.New(), max: maxBytes, top: tmp, links: map[fileID]string{}, buf: make([]byte, 256<<10)}
	srcfd := int(src.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(srcfd, &st); err != nil {
		return nil, fmt.Errorf("commit layer: stat source: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("commit layer: source is not a directory")
	}
	c.record("", &st, "")
	if err := c.tree(srcfd, dst, ""); err != nil {
		return nil, fmt.Errorf("commit layer: %w", err)
	}
	if err := c.finish(srcfd, "", dst, "", &st); err != nil {
		return nil, fmt.Errorf("commit layer: %w", err)
	}
	d := Digest("sha256:" + hex.EncodeToString(c.sum.Sum(nil)))
	copied = true
	return &Pending{s: s, tmp: tmp, lock: lock, layer: Layer{Digest: d, Path: s.Path(d), Bytes: c.bytes, Entries: c.entries}}, nil
}

// Publish syncs the copy and renames it under its digest; when the store
// has that layer already, the copy goes and the stored one is returned.
// (The syncfs flushes the whole store, layers published unsynced before
// included.)
func (p *Pending) Publish() (Layer, error) { return p.publish(true) }

// PublishUnsynced is Publish without the sync: the layer is only as
// durable as the page cache, good until the host goes down (a live
// fork's, whose children die with the host anyway).
func (p *Pending) PublishUnsynced() (Layer, error) { return p.publish(false) }

func (p *Pending) publish(sync bool) (Layer, error) {
	published := false
	defer func() {
		if !published {
			os.RemoveAll(p.tmp)
		}
		p.release()
	}()
	// One syncfs for the whole tree, before the rename publishes it: a
	// crash can then never leave a layer whose files are not on disk.
	if sync {
		if err := syncPath(p.tmp); err != nil {
			return Layer{}, fmt.Errorf("commit layer: sync: %w", err)
		}
	}
	err := unix.Renameat2(unix.AT_FDCWD, p.tmp, unix.AT_FDCWD, p.layer.Path, unix.RENAME_NOREPLACE)
	switch {
	case errors.Is(err, unix.EEXIST) && sync:
		// The same tree is stored already, maybe published unsynced
		// after this copy's syncfs: flush again before saying durable.
		if err := syncPath(p.layer.Path); err != nil {
			return Layer{}, fmt.Errorf("commit layer: sync: %w", err)
		}
		return p.layer, nil
	case errors.Is(err, unix.EEXIST):
		return p.layer, nil // the same tree is stored already; tmp goes
	case err != nil:
		return Layer{}, fmt.Errorf("commit layer %s: %w", p.layer.Digest, err)
	}
	published = true
	return p.layer, nil
}

// syncPath flushes the filesystem that holds the directory dir.
func syncPath(dir string) error {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// Discard removes the copy.
func (p *Pending) Discard() {
	os.RemoveAll(p.tmp)
	p.release()
}

type fileID struct{ dev, ino uint64 }

type copier struct {
	sum            hash.Hash
	max            int64
	bytes, entries int64
	top            string // the copy's directory
	// links maps a multiply-linked source file to the first path (from
	// the top) it was copied to, so its other names become links again.
	links map[fileID]string
	buf   []byte
}

// record adds one entry's description to the digest.
func (c *copier) record(rel string, st *unix.Stat_t, extra string) {
	c.entries++
	fmt.Fprintf(c.sum, "%q %o %d %d %s\n", rel, st.Mode, st.Uid, st.Gid, extra)
}

// tree copies the children of directory src into directory dst.
func (c *copier) tree(src, dst int, rel string) error {
	names, err := fds.ReadNames(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", show(rel), err)
	}
	slices.Sort(names) // the digest must not depend on directory order
	for _, name := range names {
		if err := c.entry(src, dst, name, rel+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) entry(src, dst int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		c.record(rel, &st, "")
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		sub, err := unix.Openat(src, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(sub)
		dsub, err := unix.Openat(dst, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open copy of %s: %w", rel, err)
		}
		defer unix.Close(dsub)
		if err := c.tree(sub, dsub, rel); err != nil {
			return err
		}
	case unix.S_IFREG:
		id := fileID{st.Dev, st.Ino}
		if first, ok := c.links[id]; ok && st.Nlink > 1 {
			c.record(rel, &st, "link "+strconv.Quote(first))
			if err := unix.Linkat(unix.AT_FDCWD, c.top+first, dst, name, 0); err != nil {
				return fmt.Errorf("link %s: %w", rel, err)
			}
			return nil // the first name carries attributes and times
		}
		if err := c.file(src, dst, name, rel, &st); err != nil {
			return err
		}
		if st.Nlink > 1 {
			c.links[id] = rel
		}
	case unix.S_IFLNK:
		target, err := fds.ReadlinkAt(src, name)
		if err != nil {
			return fmt.Errorf("read link %s: %w", rel, err)
		}
		c.record(rel, &st, "-> "+strconv.Quote(target))
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return fmt.Errorf("create link %s: %w", rel, err)
		}
	case unix.S_IFIFO:
		c.record(rel, &st, "")
		if err := unix.Mkfifoat(dst, name, 0o600); err != nil {
			return fmt.Errorf("create fifo %s: %w", rel, err)
		}
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return fmt.Errorf("%s is a device node (%d:%d): a layer keeps only overlay whiteouts (0:0)",
				rel, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		c.record(rel, &st, "whiteout")
		if err := unix.Mknodat(dst, name, unix.S_IFCHR|0o600, 0); err != nil {
			return fmt.Errorf("create whiteout %s: %w", rel, err)
		}
	case unix.S_IFSOCK:
		return nil
	default:
		return fmt.Errorf("%s is a block device: a layer keeps no devices", rel)
	}
	return c.finish(src, name, dst, name, &st)
}

// file copies one regular file's content, hashing it on the way.
func (c *copier) file(src, dst int, name, rel string, st *unix.Stat_t) error {
	in, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer unix.Close(in)
	out, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	defer unix.Close(out)
	content := sha256.New()
	var n int64
	for {
		k, err := unix.Read(in, c.buf)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("read %s: %w", rel, err)
		}
		if k == 0 {
			break
		}
		n += int64(k)
		if c.max > 0 && c.bytes+n > c.max {
			return fmt.Errorf("%w: past %d bytes at %s", ErrTooLarge, c.max, rel)
		}
		content.Write(c.buf[:k])
		if err := fds.WriteAll(out, c.buf[:k]); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
	}
	c.bytes += n
	c.record(rel, st, fmt.Sprintf("%d %x", n, content.Sum(nil)))
	return nil
}

// finish gives the copy the source's extended attributes, owner, mode and
// times, in that order (chown clears setuid bits, so mode comes after it).
// An empty name means the directory itself.
func (c *copier) finish(src int, name string, dst int, dname string, st *unix.Stat_t) error {
	from, to := fdPath(src, name), fdPath(dst, dname)
	attrs, err := xattrs(from)
	if err != nil {
		return fmt.Errorf("read attributes of %s: %w", name, err)
	}
	for _, a := range attrs {
		fmt.Fprintf(c.sum, "  xattr %q %q\n", a.name, a.value)
		if err := unix.Lsetxattr(to, a.name, a.value, 0); err != nil {
			return fmt.Errorf("set attribute %s on %s: %w", a.name, name, err)
		}
	}
	if err := unix.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(to, st.Mode&0o7777); err != nil {
			return fmt.Errorf("chmod %s: %w", name, err)
		}
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, to, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", name, err)
	}
	return nil
}

type xattr struct {
	name  string
	value []byte
}

// xattrs reads every extended attribute of path (not following a final
// symlink), sorted by name.
func xattrs(path string) ([]xattr, error) {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	list := make([]byte, size)
	size, err = unix.Llistxattr(path, list)
	if err != nil {
		return nil, err
	}
	var out []xattr
	for _, name := range strings.Split(strings.TrimRight(string(list[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		value := make([]byte, n)
		if n, err = unix.Lgetxattr(path, name, value); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, xattr{name, value[:n]})
	}
	slices.SortFunc(out, func(a, b xattr) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// fdPath names entry name of the directory open at fd through /proc, so
// path-based calls (the l*xattr family, lchown) resolve the directory by
// its descriptor and only look the final name up, without following it.
// An empty name is the directory itself ("/." makes the magic link
// resolve, so the l* calls act on the directory, not on the link).
func fdPath(fd int, name string) string {
	if name == "" {
		name = "."
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
}

func show(rel string) string {
	if rel == "" {
		return "/"
	}
	return rel
}
