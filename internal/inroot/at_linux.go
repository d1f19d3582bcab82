package inroot

// Helpers on descriptors. A name given with a directory descriptor is a
// single path element, used only through calls that do not follow it if it
// is a symlink; every walk over more than one element is openat2's.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/fds"
)

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("fstat: %w", err)
	}
	return st, nil
}

// lstatAt stats name in dirfd without following it.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	}
	return TypeOther
}

func isType(st *unix.Stat_t, ifmt uint32) bool { return st.Mode&unix.S_IFMT == ifmt }

func infoOf(rel string, st *unix.Stat_t, link string) Info {
	p := display(rel)
	return Info{
		Path:    p,
		Name:    path.Base(p),
		Type:    fileType(st.Mode),
		Size:    st.Size,
		Mode:    st.Mode & 0o7777,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		UID:     int(st.Uid),
		GID:     int(st.Gid),
		Link:    link,
	}
}

// reopenRegular turns an O_PATH descriptor of a regular file into one open
// for reading. It goes through /proc/self/fd, which reaches exactly the
// inode already checked, so a device or FIFO is never opened.
func reopenRegular(pathfd int) (*os.File, error) {
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pathfd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen for reading: %w", mapErrno(err))
	}
	return os.NewFile(uintptr(fd), "file"), nil
}

// attrs are what a created file gets: mode (07777 bits, set after
// creation so the umask does not apply), owner (-1 leaves one unchanged),
// and, when not zero, the modification time.
type attrs struct {
	mode     uint32
	uid, gid int
	mtime    time.Time
}

// apply sets owner then mode on a descriptor open for reading or writing:
// chown clears setuid and setgid, so chmod comes second.
func (a attrs) apply(fd int) error {
	if a.uid >= 0 || a.gid >= 0 {
		if err := unix.Fchown(fd, a.uid, a.gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(fd, a.mode&0o7777); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// touch sets the modification time of name in dirfd without following it.
func (a attrs) touch(dirfd int, name string) error {
	if a.mtime.IsZero() {
		return nil
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(a.mtime.UnixNano())}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set mtime: %w", err)
	}
	return nil
}

// tempName is a name for a file made next to its final name and renamed
// over it; creation uses O_EXCL, so the name only has to be unlikely.
func tempName() string {
	return fmt.Sprintf(".tine-%016x.tmp", rand.Uint64())
}

// withTemp calls create with fresh temporary names until one is free.
func withTemp(create func(tmp string) error) (string, error) {
	for range 16 {
		tmp := tempName()
		err := create(tmp)
		if err == nil {
			return tmp, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free temporary name: %w", ErrExists)
}

// writeFile creates or replaces name in dirfd with at most max bytes from
// rd: the data goes to a temporary file in the same directory, which is
// renamed over name only when complete. A final symlink is refused unless
// replaceSymlink, and then it is replaced, never written through.
func writeFile(dirfd int, name string, rd io.Reader, max int64, a attrs, replaceSymlink bool) (unix.Stat_t, error) {
	var st unix.Stat_t
	old, err := lstatAt(dirfd, name)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return st, mapErrno(err)
	case isType(&old, unix.S_IFREG):
	case isType(&old, unix.S_IFDIR):
		return st, ErrIsDir
	case isType(&old, unix.S_IFLNK) && !replaceSymlink:
		return st, fmt.Errorf("%w: is a symlink, which is not written through (remove it first)", ErrNotRegular)
	case !isType(&old, unix.S_IFLNK):
		return st, ErrNotRegular
	}

	fd := -1
	tmp, err := withTemp(func(tmp string) (err error) {
		fd, err = openat2(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600, 0)
		return err
	})
	if err != nil {
		return st, fmt.Errorf("create temporary file: %w", mapErrno(err))
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	renamed := false
	defer func() {
		if !renamed {
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()

	limited := rd
	if max < math.MaxInt64 {
		limited = io.LimitReader(rd, max+1)
	}
	n, err := io.Copy(f, limited)
	if err != nil {
		return st, fmt.Errorf("write: %w", mapErrno(err))
	}
	if n > max {
		return st, fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
	}
	if err := a.apply(fd); err != nil {
		return st, err
	}
	if err := a.touch(dirfd, tmp); err != nil {
		return st, err
	}
	if st, err = fstat(fd); err != nil {
		return st, err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return st, fmt.Errorf("rename into place: %w", mapErrno(err))
	}
	renamed = true
	return st, nil
}

// mkdirAt makes the directory name in dirfd and gives it a, removing it
// again if that fails.
func mkdirAt(dirfd int, name string, a attrs) error {
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
		return mapErrno(err)
	}
	err := func() error {
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, 0)
		if err != nil {
			return fmt.Errorf("open: %w", mapErrno(err))
		}
		defer unix.Close(fd)
		if err := a.apply(fd); err != nil {
			return err
		}
		return a.touch(dirfd, name)
	}()
	if err != nil {
		unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		return fmt.Errorf("set up new directory: %w", err)
	}
	return nil
}

// mkdirAll makes the cleaned path rel beneath top and every missing
// directory above it, like mkdir -p, each with a; existing directories
// (or symlinks to them, resolved inside top) are left as they are. It
// reports each directory it makes to made and returns an O_PATH
// descriptor of the last one.
func mkdirAll(top int, rel string, a attrs, made func(rel string)) (int, error) {
	parent, err := openat2(top, ".", unix.O_PATH|unix.O_DIRECTORY, 0, 0)
	if err != nil {
		return -1, mapErrno(err)
	}
	if rel == "" {
		return parent, nil
	}
	elems := strings.Split(rel, "/")
	for i, base := range elems {
		prefix := strings.Join(elems[:i+1], "/")
		fd, err := openat2(top, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = refuseKernelFS(parent); err == nil {
				err = mkdirAt(parent, base, a)
			}
			switch {
			case err == nil:
				if made != nil {
					made(prefix)
				}
			case !errors.Is(err, ErrExists): // lost a race, or a dangling symlink: the open below tells
				unix.Close(parent)
				return -1, err
			}
			fd, err = openat2(top, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, 0)
		}
		unix.Close(parent)
		if err != nil {
			return -1, mapErrno(err)
		}
		parent = fd
	}
	return parent, nil
}

// removeEntry removes name from dirfd: a file, a symlink (not its target)
// or an empty directory.
func removeEntry(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	}
	return mapErrno(err)
}

// removeAll removes name from dirfd and, if it is a directory, everything
// in it. Symlinks are removed, never followed, and it does not descend into
// other mounts (removing a mount point fails instead). rel is the cleaned
// path of name; an error below the top names the entry that failed.
func removeAll(dirfd int, name, rel string, top bool) error {
	fail := func(err error) error {
		if err == nil || top {
			return err
		}
		return fmt.Errorf("%s: %w", display(rel), err)
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err != unix.EISDIR {
		return fail(mapErrno(err))
	}
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_XDEV)
	if err == unix.EXDEV {
		return fail(fmt.Errorf("is a mount point: %w", unix.EBUSY))
	}
	if err != nil {
		return fail(mapErrno(err))
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return fail(err)
	}
	for _, child := range names {
		if err := removeAll(fd, child, path.Join(rel, child), false); err != nil {
			return err
		}
	}
	return fail(mapErrno(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)))
}

// symlinkAt makes name in dirfd a symlink to target, replacing what is
// there unless it is a directory.
func symlinkAt(dirfd int, name, target string, a attrs) error {
	if target == "" {
		return fmt.Errorf("%w: empty symlink target", ErrInvalidPath)
	}
	tmp, err := withTemp(func(tmp string) error { return unix.Symlinkat(target, dirfd, tmp) })
	if err != nil {
		return fmt.Errorf("symlink: %w", mapErrno(err))
	}
	if a.uid >= 0 || a.gid >= 0 {
		err = unix.Fchownat(dirfd, tmp, a.uid, a.gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		err = a.touch(dirfd, tmp)
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("symlink: %w", mapErrno(err))
	}
	return nil
}

// linkAt makes name in dirfd a hard link to oldname in olddirfd (never
// following it), replacing what is there unless it is a directory.
func linkAt(olddirfd int, oldname string, dirfd int, name string) error {
	tmp, err := withTemp(func(tmp string) error { return unix.Linkat(olddirfd, oldname, dirfd, tmp, 0) })
	if err != nil {
		return mapErrno(err)
	}
	err = unix.Renameat(dirfd, tmp, dirfd, name)
	// Renaming over another link to the same file does nothing and leaves
	// tmp behind.
	unix.Unlinkat(dirfd, tmp, 0)
	return mapErrno(err)
}

// readlinkAt is fds.ReadlinkAt with this package's errors.
func readlinkAt(dirfd int, name string) (string, error) {
	link, err := fds.ReadlinkAt(dirfd, name)
	if err != nil {
		return "", fmt.Errorf("readlink: %w", mapErrno(err))
	}
	return link, nil
}

// readNames is fds.ReadNames with this package's errors.
func readNames(fd int) ([]string, error) {
	names, err := fds.ReadNames(fd)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", mapErrno(err))
	}
	return names, nil
}
