package store

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CopyTree copies the children of directory src into directory dst as a
// layer's copy does (through descriptors, never following a symlink,
// devices refused, sockets skipped, owners, modes, times and extended
// attributes kept), outside the store: the memory tier keeps a sandbox's
// tmpfs directories with its images and puts them back in a replica.
// maxBytes bounds the contents (0: no bound). It returns the bytes copied.
func CopyTree(src, dst *os.File, maxBytes int64) (int64, error) {
	c := &copier{sum: sha256.New(), max: maxBytes, top: "/proc/self/fd/" + strconv.Itoa(int(dst.Fd())),
		links: map[fileID]string{}, buf: make([]byte, 256<<10)}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return 0, fmt.Errorf("copy tree: stat source: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("copy tree: source is not a directory")
	}
	if err := c.tree(int(src.Fd()), int(dst.Fd()), ""); err != nil {
		return 0, fmt.Errorf("copy tree: %w", err)
	}
	return c.bytes, nil
}
