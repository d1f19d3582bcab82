package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// overlayfs refuses a lower directory that lies inside another lower one
// ("overlapping lowerdir", ELOOP), checked by walking up the dentries of
// each layer's filesystem. A fork stacks layers over a base that is often
// the host's root, of which every directory on the root filesystem is a
// descendant; so the store's layers must live on a filesystem of their own.

// DefaultImageBytes is the size of the store's filesystem image when one
// must be made (sparse: it takes only the disk its layers use).
const DefaultImageBytes = 32 << 30

// OwnFilesystem is one user's hold on a store directory's filesystem of
// its own (EnsureOwnFilesystem). Every process that opens the store (the
// daemon, tine pull, tine run --image) holds one while it uses the store;
// the last to Release the image's mount unmounts it.
type OwnFilesystem struct {
	dir string
	// users holds a shared flock on dir+".users" for the hold's life: the
	// kernel drops it when its holder dies, so a killed user never keeps
	// the mount from the last one's unmount.
	users *os.File
	// ours: dir was the store's own image's mount when the hold began.
	ours bool
}

// EnsureOwnFilesystem makes dir a filesystem of its own when it shares one
// with the host's root: an ext4 image dir+".img" (sparse, imageBytes, made
// once with mkfs.ext4) loop-mounted on dir. An image already mounted there
// (by another user of the store, or left by a killed one) is used as it is,
// and one left unmounted is mounted again; layers persist in it. The
// caller Releases the hold when it is done with the store; the loop device
// is released with the last unmount (autoclear).
func EnsureOwnFilesystem(dir string, imageBytes int64) (*OwnFilesystem, error) {
	dir, err := filepath.Abs(dir) // as loop devices name their files
	if err != nil {
		return nil, fmt.Errorf("layer store: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("layer store: %w", err)
	}
	lock, err := lockMounts(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	users, err := os.OpenFile(dir+".users", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("layer store: %w", err)
	}
	if err := flock(users, unix.LOCK_SH); err != nil {
		users.Close()
		return nil, fmt.Errorf("layer store: hold %s: %w", users.Name(), err)
	}
	h := &OwnFilesystem{dir: dir, users: users}
	if h.ours, err = mountOwnImage(dir, imageBytes); err != nil {
		users.Close()
		return nil, err
	}
	return h, nil
}

// Release ends the hold. The last hold of the store's own image unmounts
// it; a directory that was its own filesystem already (the host's) is
// left alone. Releasing twice, or a nil hold, does nothing.
func (h *OwnFilesystem) Release() error {
	if h == nil || h.users == nil {
		return nil
	}
	defer func() { h.users.Close(); h.users = nil }()
	lock, err := lockMounts(h.dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	_, err = unmountUnheld(h.dir, h.users)
	return err
}

// unmountUnheld unmounts dir's own image when users (its open hold file)
// can be locked exclusively: no hold is left but the caller's, and holds
// are taken under the mount lock the caller holds, so none comes
// meanwhile. It says whether it unmounted.
func unmountUnheld(dir string, users *os.File) (bool, error) {
	if unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil || !isOwnImageMount(dir) {
		return false, nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("layer store: unmount %s: %w", dir, err)
	}
	return true, nil
}

// UnmountUnused unmounts dir's own image when no process holds the store
// (a user killed before its Release leaves the image mounted; no later
// user may come) and says whether it did. A directory that is not its
// image's mount is left alone.
func UnmountUnused(dir string) (bool, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false, fmt.Errorf("layer store: %w", err)
	}
	if _, err := os.Stat(dir + ".users"); errors.Is(err, os.ErrNotExist) {
		return false, nil // never a store of its own image
	}
	lock, err := lockMounts(dir)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	users, err := os.OpenFile(dir+".users", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("layer store: %w", err)
	}
	defer users.Close()
	return unmountUnheld(dir, users)
}

// lockMounts takes the lock under which one process at a time checks,
// mounts, holds and unmounts dir's image: two could otherwise mount one
// ext4 image through two loop devices and corrupt it, or unmount it under
// a user that has just checked it.
func lockMounts(dir string) (*os.File, error) {
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("layer store: %w", err)
	}
	if err := flock(lock, unix.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("layer store: lock %s: %w", lock.Name(), err)
	}
	return lock, nil
}

func flock(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			return err
		}
	}
}

// isOwnImageMount says whether dir is now the mount of its store's image.
func isOwnImageMount(dir string) bool {
	var st, root unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat("/", &root) != nil {
		return false
	}
	return st.Dev != root.Dev && backingFile(st.Dev) == dir+".img"
}

// mountOwnImage mounts dir's image on dir unless dir is a filesystem of
// its own already, and says whether dir is now the image's mount.
func mountOwnImage(dir string, imageBytes int64) (bool, error) {
	var st, root unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, fmt.Errorf("layer store: %w", err)
	}
	if err := unix.Stat("/", &root); err != nil {
		return false, fmt.Errorf("layer store: %w", err)
	}
	image := dir + ".img"
	if st.Dev != root.Dev {
		// Its own filesystem already: our image, mounted by another user
		// or left by a killed one, else the host's.
		return backingFile(st.Dev) == image, nil
	}
	if imageBytes <= 0 {
		imageBytes = DefaultImageBytes
	}
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		if err := makeImage(image, imageBytes); err != nil {
			return false, err
		}
	}
	// A loop device may still hold the image: unmounted lazily while
	// something (a fork's overlay, a copy of the mount in another
	// namespace) kept its filesystem alive. Mounting that device again
	// reuses its superblock; a second device would make a second ext4
	// superblock over one file and corrupt it.
	loop, err := heldLoop(image)
	if err != nil {
		return false, err
	}
	if loop == nil {
		if loop, err = attachLoop(image); err != nil {
			return false, err
		}
	}
	// An autoclear device is released at its last close unless mounted:
	// close it only after the mount holds it.
	defer loop.Close()
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return false, fmt.Errorf("layer store: mount %s (%s) on %s: %w", image, loop.Name(), dir, err)
	}
	return true, nil
}

// backingFile names the file behind loop device dev, "" for another device.
func backingFile(dev uint64) string {
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// makeImage creates a sparse ext4 image, through a temporary name so a
// crash never leaves a half-made image under the real one.
func makeImage(image string, size int64) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(image), &fs); err == nil {
		if free := int64(fs.Bavail) * fs.Bsize; size > free {
			size = max(free/2, 1<<30)
		}
	}
	tmp := image + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("layer store: create image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("layer store: size image: %w", err)
	}
	// -E root_owner: the filesystem's root belongs to root, 0700 below.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0,lazy_itable_init=1", "-L", "tine-store", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("layer store: mkfs.ext4 %s: %v: %s (install e2fsprogs, or put the state directory on its own filesystem)", tmp, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, image); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("layer store: %w", err)
	}
	return nil
}

// heldLoop returns, open, a loop device already bound to image, or nil.
func heldLoop(image string) (*os.File, error) {
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range devs {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != image {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("layer store: %s still holds %s: %w", dev, image, err)
		}
		return loop, nil
	}
	return nil, nil
}

// attachLoop binds image to a free loop device and returns it open.
func attachLoop(image string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("layer store: open /dev/loop-control: %w (the loop driver is needed when the state directory shares the root filesystem)", err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("layer store: %w", err)
	}
	defer img.Close()
	for range 8 { // another process can take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("layer store: find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("layer store: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return nil, fmt.Errorf("layer store: configure %s: %w", dev, err)
		}
		return loop, nil
	}
	return nil, errors.New("layer store: no free loop device after 8 tries")
}
