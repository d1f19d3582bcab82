// Package rawfile reads the small files and directories a one-shot run
// reads on its start (/proc, cgroupfs, tine's own caches) with plain
// syscalls. An os.File costs more there than the read: Go 1.26's open
// tries every file on the network poller (two fcntls to set it
// non-blocking, an epoll_ctl that fails for a regular file, two more
// fcntls to set it back), and the first open sets the poller up (an epoll
// instance and an eventfd) that nothing else on the run's path needs.
package rawfile

import (
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadFile reads name whole: one read for a file that fits 4 KB (or the
// size hint), then the read that says EOF.
func ReadFile(name string) ([]byte, error) {
	return ReadFileHint(name, 4<<10)
}

// ReadFileHint is ReadFile with a first buffer of hint bytes.
func ReadFileHint(name string, hint int) ([]byte, error) {
	fd, err := open(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, max(hint, 512))
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b))
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// Subdirs returns the names of the directories in dir (by the type
// getdents64 gives: a directory of cgroupfs, /proc or a tmpfs always has
// one), without "." and "..".
func Subdirs(dir string) ([]string, error) {
	fd, err := open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, &os.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			const nameOff = int(unsafe.Offsetof(unix.Dirent{}.Name))
			if len(b) < nameOff {
				break
			}
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < nameOff || reclen > len(b) {
				break
			}
			typ := b[18]
			name := b[nameOff:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			if typ == unix.DT_DIR && string(name) != "." && string(name) != ".." {
				names = append(names, string(name))
			}
			b = b[reclen:]
		}
	}
}

func open(name string, flags int) (int, error) {
	for {
		fd, err := unix.Open(name, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}
