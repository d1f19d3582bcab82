// Package fds has the loops over raw descriptors that the packages working
// at directory descriptors (inroot, image's unpack, store's commit) share:
// calls the kernel may answer in part.
package fds

import "golang.org/x/sys/unix"

// WriteAll writes all of b to fd, going on after short writes and EINTR.
func WriteAll(fd int, b []byte) error {
	for len(b) > 0 {
		k, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// ReadNames lists the directory fd (open for reading, not O_PATH) from its
// start, without "." and "..". It moves fd's offset.
func ReadNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// ReadlinkAt reads the symlink name in dirfd, whatever its length; an
// empty name reads the symlink an O_PATH|O_NOFOLLOW descriptor refers to.
func ReadlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
