package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/fds"
)

// ErrUnsafeLayer says a layer's tar tried to write outside its directory
// (a ".." path, an entry beneath a symlink, a hard link to a file it does
// not hold) or was otherwise malformed; the layer is refused whole.
var ErrUnsafeLayer = errors.New("unsafe layer")

// Unpacked describes a layer unpacked by Unpack.
type Unpacked struct {
	// DiffID is the sha256 of the uncompressed tar, as read.
	DiffID string
	// Bytes sums the regular files' sizes; Entries counts what was made.
	Bytes, Entries int64
	// Devices counts device nodes left out (a layer never holds one).
	Devices int
}

// Whiteout names of the OCI layer format.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Unpack writes the layer tar r into dir, an empty directory of the
// unpacker's own (a store draft), in overlayfs's format: a whiteout file
// ".wh.NAME" becomes a character device 0:0 named NAME, an opaque marker
// sets trusted.overlay.opaque=y on its directory. So the directory is an
// overlay lower as it is, stacked straight on the layers below it.
//
// The tar is the tenant's (any registry's), so nothing it says may reach
// outside dir: each entry's parent is walked from dir's descriptor one
// component at a time with O_NOFOLLOW|O_DIRECTORY, so a symlink the layer
// made is never followed; absolute names are taken as relative to the
// layer (as Docker does); a name whose ".." climbs above the layer, a hard
// link whose target the layer does not hold, or a whiteout of "." or ".."
// fails the whole layer with ErrUnsafeLayer. Device nodes are left out
// (counted). Symlink targets are stored as they are: they are resolved
// inside the sandbox's root, never by the unpacker. Extended attributes in
// the tar are not applied (an overlay.* one could forge a whiteout or a
// redirect).
func Unpack(r io.Reader, dir string) (Unpacked, error) {
	root, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Unpacked{}, fmt.Errorf("unpack layer: %w", err)
	}
	defer unix.Close(root)
	sum := sha256.New()
	u := &unpacker{root: root, buf: make([]byte, 256<<10)}
	tr := tar.NewReader(io.TeeReader(r, sum))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Unpacked{}, fmt.Errorf("unpack layer: read tar: %w", err)
		}
		if err := u.entry(h, tr); err != nil {
			return Unpacked{}, fmt.Errorf("unpack layer: %w", err)
		}
	}
	// The diff ID covers the whole stream, the tar's end padding too.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, sum)); err != nil {
		return Unpacked{}, fmt.Errorf("unpack layer: read tar: %w", err)
	}
	if err := u.dirTimes(); err != nil {
		return Unpacked{}, fmt.Errorf("unpack layer: %w", err)
	}
	u.out.DiffID = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	return u.out, nil
}

type unpacker struct {
	root int
	buf  []byte
	out  Unpacked
	dirs []*tar.Header // directories, whose times are set last
}

// clean turns a tar name into a path relative to the layer ("." for its
// root), or fails when it climbs out of it. Absolute names are the
// layer's.
func clean(name string) (string, error) {
	rel := path.Clean(strings.TrimLeft(name, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: entry %q climbs out of the layer with ..", ErrUnsafeLayer, name)
	}
	return rel, nil
}

// openDir opens directory rel of the layer by walking its components from
// the layer's root without following a symlink; missing ones are made
// (mode 0755, as Docker does for a tar without parent entries) when make
// is set.
func (u *unpacker) openDir(rel string, make bool) (int, error) {
	fd, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && make {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return -1, fmt.Errorf("%w: %s: %s is not a directory of the layer (a symlink or a file): an entry beneath it would land elsewhere", ErrUnsafeLayer, rel, c)
		case err != nil:
			return -1, fmt.Errorf("open %s: %w", rel, err)
		}
		fd = next
	}
	return fd, nil
}

func (u *unpacker) entry(h *tar.Header, body io.Reader) error {
	rel, err := clean(h.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		if h.Typeflag == tar.TypeDir {
			return nil // the layer's root is the store's
		}
		return fmt.Errorf("%w: entry %q names the layer's root", ErrUnsafeLayer, h.Name)
	}
	parent, name := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	pfd, err := u.openDir(parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)

	switch {
	case name == opaqueMarker:
		u.out.Entries++
		if err := unix.Fsetxattr(pfd, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return fmt.Errorf("mark %s opaque: %w", parent, err)
		}
		return nil
	case strings.HasPrefix(name, whiteoutPrefix+whiteoutPrefix):
		return nil // aufs metadata (.wh..wh.plnk, ...): nothing for overlayfs
	case strings.HasPrefix(name, whiteoutPrefix):
		gone := strings.TrimPrefix(name, whiteoutPrefix)
		if gone == "" || gone == "." || gone == ".." {
			return fmt.Errorf("%w: whiteout %q deletes no name", ErrUnsafeLayer, h.Name)
		}
		if err := u.replace(pfd, gone); err != nil {
			return err
		}
		u.out.Entries++
		if err := unix.Mknodat(pfd, gone, unix.S_IFCHR|0o600, 0); err != nil {
			return fmt.Errorf("whiteout %s: %w", path.Join(parent, gone), err)
		}
		return nil
	}

	switch h.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			break // seen already (made as a parent, or listed twice): attributes below
		}
		if err := u.replace(pfd, name); err != nil {
			return err
		}
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		u.dirs = append(u.dirs, h)
	case tar.TypeReg, tar.TypeRegA:
		if err := u.replace(pfd, name); err != nil {
			return err
		}
		if err := u.file(pfd, name, rel, body); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := u.replace(pfd, name); err != nil {
			return err
		}
		if err := unix.Symlinkat(h.Linkname, pfd, name); err != nil {
			return fmt.Errorf("create link %s: %w", rel, err)
		}
	case tar.TypeLink:
		return u.hardLink(pfd, name, rel, h)
	case tar.TypeFifo:
		if err := u.replace(pfd, name); err != nil {
			return err
		}
		if err := unix.Mkfifoat(pfd, name, 0o600); err != nil {
			return fmt.Errorf("create fifo %s: %w", rel, err)
		}
	case tar.TypeChar, tar.TypeBlock:
		u.out.Devices++ // a layer never holds a usable device
		return nil
	default:
		return nil // tar extensions that describe no file
	}
	u.out.Entries++
	return u.attributes(pfd, name, rel, h)
}

// replace clears name in the directory pfd for a new entry: a later tar
// entry of the same name wins over an earlier one.
func (u *unpacker) replace(pfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return removeTree(pfd, name)
	}
	return unix.Unlinkat(pfd, name, 0)
}

// removeTree removes directory name of pfd and everything in it, through
// descriptors only.
func removeTree(pfd int, name string) error {
	fd, err := unix.Openat(pfd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	names, err := fds.ReadNames(fd)
	if err != nil {
		unix.Close(fd)
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(fd)
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeTree(fd, n)
		} else {
			err = unix.Unlinkat(fd, n, 0)
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
	}
	unix.Close(fd)
	return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
}

func (u *unpacker) file(pfd int, name, rel string, body io.Reader) error {
	fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	defer unix.Close(fd)
	for {
		n, err := body.Read(u.buf)
		if n > 0 {
			if werr := fds.WriteAll(fd, u.buf[:n]); werr != nil {
				return fmt.Errorf("write %s: %w", rel, werr)
			}
			u.out.Bytes += int64(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
	}
}

// hardLink links name to an entry the layer already holds; the target is
// found the way entries are (no symlink followed), so a link can never
// name a host file.
func (u *unpacker) hardLink(pfd int, name, rel string, h *tar.Header) error {
	target, err := clean(h.Linkname)
	if err != nil {
		return err
	}
	tdir, tname := path.Split(target)
	tdir = strings.TrimSuffix(tdir, "/")
	if tdir == "" {
		tdir = "."
	}
	tfd, err := u.openDir(tdir, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, ErrUnsafeLayer) || (err == nil && tname == "") {
		if err == nil {
			unix.Close(tfd)
		}
		return fmt.Errorf("%w: hard link %s names %q, which this layer does not hold", ErrUnsafeLayer, rel, h.Linkname)
	}
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: hard link %s names %q, which this layer does not hold as a file", ErrUnsafeLayer, rel, h.Linkname)
	}
	if target == rel {
		return nil // a link to itself: nothing to do
	}
	if err := u.replace(pfd, name); err != nil {
		return err
	}
	u.out.Entries++
	// Flags 0: a final symlink is linked itself, never followed.
	if err := unix.Linkat(tfd, tname, pfd, name, 0); err != nil {
		return fmt.Errorf("link %s: %w", rel, err)
	}
	return nil
}

// attributes gives an entry its owner, mode and times, in that order
// (chown clears setuid bits). Directories get their times at the end.
func (u *unpacker) attributes(pfd int, name, rel string, h *tar.Header) error {
	if err := unix.Fchownat(pfd, name, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if h.Typeflag == tar.TypeSymlink {
		return setTimes(pfd, name, h)
	}
	// Not a symlink (made just now by this unpacker), so fchmodat's
	// following one is moot.
	if err := unix.Fchmodat(pfd, name, uint32(h.Mode&0o7777), 0); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	if h.Typeflag == tar.TypeDir {
		return nil
	}
	return setTimes(pfd, name, h)
}

func setTimes(pfd int, name string, h *tar.Header) error {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", name, err)
	}
	return nil
}

// dirTimes sets the directories' times once nothing more is made in them.
func (u *unpacker) dirTimes() error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		h := u.dirs[i]
		rel, _ := clean(h.Name)
		parent, name := path.Split(rel)
		parent = strings.TrimSuffix(parent, "/")
		if parent == "" {
			parent = "."
		}
		pfd, err := u.openDir(parent, false)
		if err != nil {
			continue // replaced by a later entry
		}
		err = setTimes(pfd, name, h)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}
