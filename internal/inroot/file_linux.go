package inroot

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"

	"golang.org/x/sys/unix"
)

// Stat describes p without following a final symlink (lstat semantics);
// symlinks on the way are followed, inside the root.
func (r *Root) Stat(p string) (Info, error) {
	rel, err := clean(p)
	if err != nil {
		return Info{}, fmt.Errorf("stat %q: %w", p, err)
	}
	info, err := r.stat(rel)
	if err != nil {
		return Info{}, fmt.Errorf("stat %q: %w", p, err)
	}
	return info, nil
}

func (r *Root) stat(rel string) (Info, error) {
	fd, err := r.open(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return Info{}, mapErrno(err)
	}
	defer unix.Close(fd)
	st, err := fstat(fd)
	if err != nil {
		return Info{}, err
	}
	link := ""
	if isType(&st, unix.S_IFLNK) {
		if link, err = readlinkAt(fd, ""); err != nil {
			return Info{}, err
		}
	}
	return infoOf(rel, &st, link), nil
}

// List describes the entries of directory p, sorted by name. A final
// symlink is followed, inside the root; the entries themselves are
// described without following them.
func (r *Root) List(p string) ([]Info, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", p, err)
	}
	infos, err := r.list(rel)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", p, err)
	}
	return infos, nil
}

func (r *Root) list(rel string) ([]Info, error) {
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, mapErrno(err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	infos := make([]Info, 0, len(names))
	for _, name := range names {
		st, err := lstatAt(fd, name)
		if errors.Is(err, unix.ENOENT) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, mapErrno(err))
		}
		link := ""
		if isType(&st, unix.S_IFLNK) {
			if link, err = readlinkAt(fd, name); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		infos = append(infos, infoOf(path.Join(rel, name), &st, link))
	}
	return infos, nil
}

// Read copies the regular file p to w, following a final symlink inside
// the root. A file larger than max fails with ErrTooLarge before anything
// is copied; one that grows past max while being read fails with
// ErrTooLarge after exactly max bytes. Devices and FIFOs are refused
// without being opened, and so are files on kernel interface filesystems
// such as /proc and /sys (ErrUnsupported). The Info is the file's as opened, with Size set to
// the bytes copied.
func (r *Root) Read(p string, w io.Writer, max int64) (Info, error) {
	rel, err := clean(p)
	if err != nil {
		return Info{}, fmt.Errorf("read %q: %w", p, err)
	}
	info, err := r.read(rel, w, max)
	if err != nil {
		return info, fmt.Errorf("read %q: %w", p, err)
	}
	return info, nil
}

func (r *Root) read(rel string, w io.Writer, max int64) (Info, error) {
	pathfd, err := r.open(rel, unix.O_PATH)
	if err != nil {
		return Info{}, mapErrno(err)
	}
	defer unix.Close(pathfd)
	st, err := fstat(pathfd)
	if err != nil {
		return Info{}, err
	}
	info := infoOf(rel, &st, "")
	if err := refuseKernelFS(pathfd); err != nil {
		return info, err
	}
	switch {
	case isType(&st, unix.S_IFDIR):
		return info, ErrIsDir
	case !isType(&st, unix.S_IFREG):
		return info, ErrNotRegular
	case st.Size > max:
		return info, fmt.Errorf("%d bytes, limit %d: %w", st.Size, max, ErrTooLarge)
	}
	f, err := reopenRegular(pathfd)
	if err != nil {
		return info, err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, max))
	info.Size = n
	if err != nil {
		return info, fmt.Errorf("copy: %w", err)
	}
	if n == max {
		var one [1]byte
		if k, _ := f.Read(one[:]); k > 0 {
			return info, fmt.Errorf("grew past the limit of %d bytes while read: %w", max, ErrTooLarge)
		}
	}
	return info, nil
}

// Write creates or replaces the regular file p with the bytes of rd,
// atomically: they go to a temporary file in the same directory that is
// renamed over p once complete, so readers see the old file or the new
// one. The file gets mode (07777 bits, not masked by the umask) and
// owner uid:gid (-1 leaves either as the daemon's). More than max bytes
// fail with ErrTooLarge and leave nothing behind. p's directory must exist
// (ErrNotFound), and a final symlink is refused (ErrNotRegular), not
// written through. Here and in Mkdir and Remove, a directory on a kernel
// interface filesystem (/proc, /sys, a cgroup mount, ...) is refused with
// ErrUnsupported.
func (r *Root) Write(p string, rd io.Reader, mode uint32, max int64, uid, gid int) (Info, error) {
	rel, err := clean(p)
	if err == nil && rel == "" {
		err = fmt.Errorf("%w: the root is a directory", ErrIsDir)
	}
	if err != nil {
		return Info{}, fmt.Errorf("write %q: %w", p, err)
	}
	dirfd, base, err := r.openParent(rel)
	if err != nil {
		return Info{}, fmt.Errorf("write %q: %w", p, err)
	}
	defer unix.Close(dirfd)
	st, err := writeFile(dirfd, base, rd, max, attrs{mode: mode, uid: uid, gid: gid}, false)
	if err != nil {
		return Info{}, fmt.Errorf("write %q: %w", p, err)
	}
	return infoOf(rel, &st, ""), nil
}

// Mkdir makes directory p with mode (07777 bits, not masked by the umask)
// and owner uid:gid (-1 leaves either as the daemon's). Without parents, p's directory must exist and p must
// not (ErrExists). With parents, missing directories above p are made the
// same way and existing ones are left as they are, like mkdir -p.
func (r *Root) Mkdir(p string, mode uint32, parents bool, uid, gid int) error {
	rel, err := clean(p)
	if err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	a := attrs{mode: mode, uid: uid, gid: gid}
	if parents {
		fd, err := mkdirAll(r.fd, rel, a, nil)
		if err != nil {
			return fmt.Errorf("mkdir %q: %w", p, err)
		}
		unix.Close(fd)
		return nil
	}
	if rel == "" {
		return fmt.Errorf("mkdir %q: the root: %w", p, ErrExists)
	}
	dirfd, base, err := r.openParent(rel)
	if err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	defer unix.Close(dirfd)
	if err := mkdirAt(dirfd, base, a); err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	return nil
}

// Remove removes p: a file, a symlink (never its target) or an empty
// directory; with recursive, a directory and everything in it, without
// descending into other mounts. The root itself is refused.
func (r *Root) Remove(p string, recursive bool) error {
	rel, err := clean(p)
	if err == nil && rel == "" {
		err = fmt.Errorf("%w: refusing to remove the root", ErrInvalidPath)
	}
	if err != nil {
		return fmt.Errorf("remove %q: %w", p, err)
	}
	dirfd, base, err := r.openParent(rel)
	if err != nil {
		return fmt.Errorf("remove %q: %w", p, err)
	}
	defer unix.Close(dirfd)
	if recursive {
		err = removeAll(dirfd, base, rel, true)
	} else {
		err = removeEntry(dirfd, base)
	}
	if err != nil {
		return fmt.Errorf("remove %q: %w", p, err)
	}
	return nil
}
