package inroot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// WriteTar writes p to w as a tar stream. A directory's entries are named
// relative to it ("a.txt", "sub/", "sub/b.txt"), p itself not included; a
// file or a symlink becomes one entry named by its last element. Regular
// files, directories and symlinks (as links, never followed) carry mode,
// owner and mtime (to the second); a file with several links inside p is
// written once and then as hard links to that entry; sockets, devices,
// FIFOs and the contents of kernel interface filesystems mounted inside p
// (/proc, /sys, ...) are left out, and p on one is refused
// (ErrUnsupported). A file that shrinks while being read is padded with
// zeros to the size it had when opened; one that grows is cut at it.
func (r *Root) WriteTar(p string, w io.Writer) error {
	rel, err := clean(p)
	if err != nil {
		return fmt.Errorf("tar %q: %w", p, err)
	}
	fd, err := r.open(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("tar %q: %w", p, mapErrno(err))
	}
	defer unix.Close(fd)
	if err := refuseKernelFS(fd); err != nil {
		return fmt.Errorf("tar %q: %w", p, err)
	}
	t := &tarWriter{tw: tar.NewWriter(w), links: map[fileID]string{}}
	st, err := fstat(fd)
	if err == nil {
		if isType(&st, unix.S_IFDIR) {
			err = t.walkAt(fd, "")
		} else {
			err = t.add(fd, path.Base(display(rel)))
		}
	}
	if err == nil {
		err = t.tw.Close()
	}
	if err != nil {
		return fmt.Errorf("tar %q: %w", p, err)
	}
	return nil
}

type tarWriter struct {
	tw    *tar.Writer
	links map[fileID]string // first entry written for each multiply-linked file
}

type fileID struct{ dev, ino uint64 }

// walkAt writes the entries of the directory an O_PATH descriptor refers
// to, named under prefix. The contents of a kernel interface filesystem
// mounted inside p (/proc, /sys, ...) are left out.
func (t *tarWriter) walkAt(pathfd int, prefix string) error {
	if fs, err := kernelFS(pathfd); err != nil || fs != "" {
		return err
	}
	fd, err := openat2(pathfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, 0)
	if err != nil {
		return mapErrno(err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		child, err := openat2(fd, name, unix.O_PATH|unix.O_NOFOLLOW, 0, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // removed since it was listed
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join(prefix, name), mapErrno(err))
		}
		err = t.add(child, path.Join(prefix, name))
		unix.Close(child)
		if err != nil {
			return err
		}
	}
	return nil
}

// add writes the entry an O_PATH|O_NOFOLLOW descriptor refers to as name,
// and for a directory everything in it. An error names the entry.
func (t *tarWriter) add(pathfd int, name string) error {
	fail := func(err error) error { return fmt.Errorf("%s: %w", name, err) }
	st, err := fstat(pathfd)
	if err != nil {
		return fail(err)
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0),
	}
	switch {
	case isType(&st, unix.S_IFDIR):
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		if err := t.tw.WriteHeader(hdr); err != nil {
			return fail(err)
		}
		return t.walkAt(pathfd, name)
	case isType(&st, unix.S_IFLNK):
		hdr.Typeflag = tar.TypeSymlink
		if hdr.Linkname, err = readlinkAt(pathfd, ""); err != nil {
			return fail(err)
		}
		if err := t.tw.WriteHeader(hdr); err != nil {
			return fail(err)
		}
		return nil
	case isType(&st, unix.S_IFREG):
		return t.addFile(pathfd, hdr, &st)
	}
	return nil // sockets, devices and FIFOs are not archived
}

func (t *tarWriter) addFile(pathfd int, hdr *tar.Header, st *unix.Stat_t) error {
	fail := func(err error) error { return fmt.Errorf("%s: %w", hdr.Name, err) }
	if st.Nlink > 1 {
		id := fileID{st.Dev, st.Ino}
		if first, ok := t.links[id]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			if err := t.tw.WriteHeader(hdr); err != nil {
				return fail(err)
			}
			return nil
		}
		t.links[id] = hdr.Name
	}
	if fs, err := kernelFS(pathfd); err != nil || fs != "" {
		return err // a kernel interface file, bind-mounted: left out
	}
	f, err := reopenRegular(pathfd)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := t.tw.WriteHeader(hdr); err != nil {
		return fail(err)
	}
	n, err := io.Copy(t.tw, io.LimitReader(f, st.Size))
	if err != nil {
		return fail(err)
	}
	if _, err := io.CopyN(t.tw, zeros{}, st.Size-n); err != nil {
		return fail(err)
	}
	return nil
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// ExtractTar unpacks the tar stream rd into directory p, which must exist.
// Every entry is resolved with p as its root: absolute names are taken as
// relative to p, names that climb above it ("../x", "a/../../x") are
// refused with an error naming the entry, and symlinks on the way —
// including ones the archive itself made — resolve inside p, so nothing
// lands outside it. Directories missing on the way are made (mode 0755).
// Regular files and directories get the archive's mode and mtime; every
// entry gets owner uid:gid, not the archive's (-1 leaves either as the
// daemon's; ArchiveOwner keeps the archive's, for a tree the daemon itself
// wrote). Symlinks are made as given;
// hard links must point at an entry inside p. Existing files and symlinks
// are replaced atomically, existing directories are kept as they are.
// Devices and FIFOs are refused (ErrUnsupported), and so is any entry on a
// kernel interface filesystem (/proc, /sys, a cgroup mount, ...). More than max bytes of
// file contents in all fail with ErrTooLarge. On any error, what the
// archive made is removed again; files it replaced stay replaced.
func (r *Root) ExtractTar(p string, rd io.Reader, max int64, uid, gid int) error {
	rel, err := clean(p)
	if err != nil {
		return fmt.Errorf("extract into %q: %w", p, err)
	}
	dst, err := r.open(rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("extract into %q: %w", p, mapErrno(err))
	}
	defer unix.Close(dst)
	if err := refuseKernelFS(dst); err != nil {
		return fmt.Errorf("extract into %q: %w", p, err)
	}
	x := &extractor{dst: dst, budget: max, uid: uid, gid: gid, implicit: map[string]bool{}}
	if err := x.run(tar.NewReader(rd)); err != nil {
		x.undo()
		return fmt.Errorf("extract into %q: %w", p, err)
	}
	return nil
}

// daemonIf maps ArchiveOwner to -1 (the daemon's), for what no header names.
func daemonIf(id int) int {
	if id == ArchiveOwner {
		return -1
	}
	return id
}

// ArchiveOwner, as ExtractTar's uid or gid, gives each entry the owner
// its header names; directories made on the way stay the daemon's.
const ArchiveOwner = -2

type extractor struct {
	dst      int   // O_PATH descriptor of the destination, the root of every entry
	budget   int64 // file bytes still allowed
	uid, gid int
	made     []string        // entries made (not replaced), in order, for undo
	implicit map[string]bool // directories made on the way, not yet described by an entry
	dirs     []pendingDir    // mtimes to set once the directories' contents are in
}

type pendingDir struct {
	rel   string
	mtime time.Time
}

func (x *extractor) run(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) { // names are checked below
			return fmt.Errorf("read archive: %w", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.at(d.rel, attrs{mtime: d.mtime}.touch); err != nil {
			return fmt.Errorf("directory %q: %w", d.rel, err)
		}
	}
	return nil
}

func (x *extractor) entry(hdr *tar.Header, body io.Reader) error {
	rel, err := clean(hdr.Name)
	if err != nil {
		return err
	}
	a := attrs{mode: uint32(hdr.Mode) & 0o7777, uid: x.uid, gid: x.gid, mtime: hdr.ModTime}
	if a.uid == ArchiveOwner {
		a.uid = hdr.Uid
	}
	if a.gid == ArchiveOwner {
		a.gid = hdr.Gid
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(rel, a)
	case tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: device and FIFO entries are refused", ErrUnsupported)
	default:
		return fmt.Errorf("%w: entry type %q", ErrUnsupported, hdr.Typeflag)
	}
	if rel == "" {
		return fmt.Errorf("%w: names the destination directory itself", ErrInvalidPath)
	}
	dirfd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	_, err = lstatAt(dirfd, base)
	existed := err == nil
	switch hdr.Typeflag {
	case tar.TypeReg:
		if hdr.Size > x.budget {
			return fmt.Errorf("%d more bytes pass the limit of the archive's file contents: %w", hdr.Size, ErrTooLarge)
		}
		x.budget -= hdr.Size
		_, err = writeFile(dirfd, base, body, hdr.Size, a, true)
	case tar.TypeSymlink:
		err = symlinkAt(dirfd, base, hdr.Linkname, a)
	case tar.TypeLink:
		err = x.link(dirfd, base, hdr.Linkname)
	}
	if err == nil && !existed {
		x.made = append(x.made, rel)
	}
	return err
}

// parent returns an O_PATH descriptor of the directory holding rel inside
// the destination, making missing directories, and rel's last element.
func (x *extractor) parent(rel string) (int, string, error) {
	dir, base := split(rel)
	if dir == "." {
		dir = ""
	}
	fd, err := mkdirAll(x.dst, dir, attrs{mode: 0o755, uid: daemonIf(x.uid), gid: daemonIf(x.gid)}, func(made string) {
		x.made = append(x.made, made)
		x.implicit[made] = true
	})
	if err == nil {
		if err = refuseKernelFS(fd); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		return -1, "", fmt.Errorf("parent directory: %w", err)
	}
	return fd, base, nil
}

// at calls fn with the directory holding rel inside the destination and
// rel's last element.
func (x *extractor) at(rel string, fn func(dirfd int, name string) error) error {
	dir, base := split(rel)
	fd, err := openat2(x.dst, dir, unix.O_PATH|unix.O_DIRECTORY, 0, 0)
	if err != nil {
		return mapErrno(err)
	}
	defer unix.Close(fd)
	return fn(fd, base)
}

func (x *extractor) dir(rel string, a attrs) error {
	if rel == "" {
		return nil // the destination itself is kept as it is
	}
	dirfd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	mtime := a.mtime
	a.mtime = time.Time{} // set once the directory's contents are in
	err = mkdirAt(dirfd, base, a)
	switch {
	case err == nil:
		x.made = append(x.made, rel)
	case !errors.Is(err, ErrExists):
		return err
	case x.implicit[rel]:
		// Made on the way to an earlier entry: now it gets its own attributes.
		fd, err := openat2(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, 0)
		if err != nil {
			return mapErrno(err)
		}
		err = a.apply(fd)
		unix.Close(fd)
		if err != nil {
			return err
		}
		delete(x.implicit, rel)
	default:
		st, err := lstatAt(dirfd, base)
		if err == nil && isType(&st, unix.S_IFDIR) {
			return nil // an existing directory is kept as it is
		}
		return fmt.Errorf("%w: and is not a directory", ErrExists)
	}
	x.dirs = append(x.dirs, pendingDir{rel, mtime})
	return nil
}

// link makes name in dirfd a hard link to the entry target, which is
// resolved inside the destination and must be a regular file or a
// symlink.
func (x *extractor) link(dirfd int, name, target string) error {
	trel, err := clean(target)
	if err == nil && trel == "" {
		err = fmt.Errorf("%w: names the destination directory itself", ErrInvalidPath)
	}
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	err = x.at(trel, func(tdirfd int, tname string) error {
		st, err := lstatAt(tdirfd, tname)
		if err != nil {
			return mapErrno(err)
		}
		if !isType(&st, unix.S_IFREG) && !isType(&st, unix.S_IFLNK) {
			return ErrNotRegular
		}
		return linkAt(tdirfd, tname, dirfd, name)
	})
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	return nil
}

// undo removes what the archive made, newest first.
func (x *extractor) undo() {
	for i := len(x.made) - 1; i >= 0; i-- {
		x.at(x.made[i], removeEntry)
	}
}
