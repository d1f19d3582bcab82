package image

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dropResolvConf removes etc/resolv.conf from a build's writable layer
// (upper): it is the build network's, written for pip, and must not shadow
// the image's in the layer. The upper directory itself is changed, so no
// whiteout is left; nothing in it is followed.
func dropResolvConf(upper *os.File) error {
	etc, err := unix.Openat(int(upper.Fd()), "etc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open the build's etc: %w", err)
	}
	defer unix.Close(etc)
	var st unix.Stat_t
	if err := unix.Fstatat(etc, "resolv.conf", &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("the build's etc/resolv.conf: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("the build made etc/resolv.conf a directory")
	}
	if err := unix.Unlinkat(etc, "resolv.conf", 0); err != nil {
		return fmt.Errorf("remove the build's etc/resolv.conf: %w", err)
	}
	return nil
}
