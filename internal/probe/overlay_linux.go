package probe

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/osthread"
)

func checkOverlay() Check {
	listed := filesystemListed("overlay")
	if os.Geteuid() != 0 {
		if !listed {
			return Check{Detail: "overlay is not in /proc/filesystems", Fix: "modprobe overlay (a kernel with CONFIG_OVERLAY_FS)"}
		}
		return Check{OK: true, Detail: "overlay is in /proc/filesystems (mounting not tried: needs root)"}
	}
	// Try even when unlisted: the mount loads the module if there is one.
	onTmpfs, overHostRoot := tryOverlayMounts()
	switch {
	case onTmpfs != nil:
		return Check{Detail: "cannot mount an overlay: " + onTmpfs.Error(), Fix: "modprobe overlay (a kernel with CONFIG_OVERLAY_FS)"}
	case overHostRoot != nil:
		return Check{
			Detail: "overlay mounts on tmpfs, but not over the host root (lowerdir=/), tine run's default: " + overHostRoot.Error(),
			Fix:    fmt.Sprintf("the root filesystem (%s) cannot be an overlay lower layer: give tine run a root directory on a filesystem that can (ext4, xfs, btrfs)", rootFSType()),
		}
	}
	return Check{OK: true, Detail: fmt.Sprintf("mounted an overlay on tmpfs and one over the host root (%s)", rootFSType())}
}

// tryOverlayMounts mounts an overlay over tmpfs layers, and one with the
// host root as its lower layer, in a mount namespace only one throwaway OS
// thread ever enters (osthread.Throwaway): when that thread ends, the
// namespace and its mounts go with it, and the host sees nothing but an
// empty temporary directory, removed here.
func tryOverlayMounts() (onTmpfs, overHostRoot error) {
	dir, err := os.MkdirTemp("", "tine-probe-overlay-")
	if err != nil {
		return fmt.Errorf("make mount point: %w", err), nil
	}
	defer os.Remove(dir)
	osthread.Throwaway(func() {
		onTmpfs, overHostRoot = overlayInPrivateNamespace(dir)
	})
	return onTmpfs, overHostRoot
}

// overlayInPrivateNamespace moves the calling (locked) thread into a new
// mount namespace, mounts a tmpfs on dir and tries both overlays in it.
func overlayInPrivateNamespace(dir string) (onTmpfs, overHostRoot error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err), nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err), nil
	}
	if err := unix.Mount("tine-probe", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err), nil
	}
	if err := overlayAndWrite(dir, "tmpfs", filepath.Join(dir, "lower")); err != nil {
		return err, nil
	}
	return nil, overlayAndWrite(dir, "root", "/")
}

// overlayAndWrite mounts an overlay of lower under dir/<name>-merged, with
// upper and work directories on dir's tmpfs, writes a file through it and
// checks the write landed in the upper layer.
func overlayAndWrite(dir, name, lower string) error {
	upper := filepath.Join(dir, name+"-upper")
	work := filepath.Join(dir, name+"-work")
	merged := filepath.Join(dir, name+"-merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("make %s: %w", d, err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay (%s): %w", opts, err)
	}
	if err := os.WriteFile(filepath.Join(merged, "tine-probe"), []byte("ok\n"), 0o600); err != nil {
		return fmt.Errorf("write through overlay: %w", err)
	}
	if _, err := os.Stat(filepath.Join(upper, "tine-probe")); err != nil {
		return fmt.Errorf("write through overlay did not reach the upper layer: %w", err)
	}
	return nil
}

// filesystemListed reports whether /proc/filesystems lists fstype.
func filesystemListed(fstype string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == fstype {
			return true
		}
	}
	return false
}

// rootFSType returns the filesystem type mounted on /, "unknown" if it
// cannot be read.
func rootFSType() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	fstype := "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if ok && len(pf) >= 5 && len(qf) >= 1 && pf[4] == "/" {
			fstype = qf[0] // the last mount on / is the one seen
		}
	}
	return fstype
}
