package store

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commitDir(t *testing.T, s *Store, dir string, max int64) (Layer, error) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return s.Commit(f, max)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(content), mode))
	must(t, os.Chmod(path, mode))
}

// upperLike builds a tree with every kind of entry an overlay upper holds.
func upperLike(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "upper")
	must(t, os.Mkdir(src, 0o755))
	write(t, src+"/etc/motd", "captured\n", 0o644)
	write(t, src+"/usr/bin/su", "#!/bin/sh\n", 0o4755|os.ModeSetuid)
	must(t, os.Chmod(src+"/usr/bin/su", 0o755|os.ModeSetuid))
	must(t, os.Link(src+"/etc/motd", src+"/etc/motd.link"))
	must(t, os.Symlink("/etc/shadow", src+"/shadow-link"))
	must(t, os.Symlink("../etc/motd", src+"/usr/motd-rel"))
	must(t, unix.Mkfifo(src+"/fifo", 0o640))
	must(t, unix.Mknod(src+"/etc/deleted", unix.S_IFCHR|0o600, 0)) // whiteout
	must(t, os.MkdirAll(src+"/opt/opaque", 0o750))
	must(t, unix.Setxattr(src+"/opt/opaque", "trusted.overlay.opaque", []byte("y"), 0))
	must(t, unix.Setxattr(src+"/etc/motd", "user.note", []byte("kept"), 0))
	must(t, os.Chown(src+"/opt/opaque", 1000, 1001))
	if l, err := netListen(src + "/sock"); err == nil {
		defer l.Close()
	}
	return src
}

func TestCommitCopiesEveryKind(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	layer, err := commitDir(t, s, upperLike(t), 0)
	must(t, err)
	if _, err := ParseDigest(string(layer.Digest)); err != nil {
		t.Fatal(err)
	}
	p := layer.Path
	if b, err := os.ReadFile(p + "/etc/motd"); err != nil || string(b) != "captured\n" {
		t.Errorf("motd = %q, %v", b, err)
	}
	if st, err := os.Stat(p + "/usr/bin/su"); err != nil || st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("setuid file mode = %v, %v", st.Mode(), err)
	}
	var a, b unix.Stat_t
	must(t, unix.Stat(p+"/etc/motd", &a))
	must(t, unix.Stat(p+"/etc/motd.link", &b))
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not kept: inodes %d %d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	if target, err := os.Readlink(p + "/shadow-link"); err != nil || target != "/etc/shadow" {
		t.Errorf("absolute symlink = %q, %v; want it copied as a link, not followed", target, err)
	}
	if target, err := os.Readlink(p + "/usr/motd-rel"); err != nil || target != "../etc/motd" {
		t.Errorf("relative symlink = %q, %v", target, err)
	}
	if st, err := os.Lstat(p + "/fifo"); err != nil || st.Mode()&os.ModeNamedPipe == 0 || st.Mode().Perm() != 0o640 {
		t.Errorf("fifo = %v, %v", st, err)
	}
	var wh unix.Stat_t
	if err := unix.Lstat(p+"/etc/deleted", &wh); err != nil || wh.Mode&unix.S_IFMT != unix.S_IFCHR || wh.Rdev != 0 {
		t.Errorf("whiteout = %+v, %v", wh, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Getxattr(p+"/opt/opaque", "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque xattr = %q, %v", buf[:n], err)
	}
	if n, err := unix.Getxattr(p+"/etc/motd", "user.note", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("user xattr = %q, %v", buf[:n], err)
	}
	var op unix.Stat_t
	if must(t, unix.Stat(p+"/opt/opaque", &op)); op.Uid != 1000 || op.Gid != 1001 || op.Mode&0o7777 != 0o750 {
		t.Errorf("opaque dir owner %d:%d mode %o", op.Uid, op.Gid, op.Mode&0o7777)
	}
	if _, err := os.Lstat(p + "/sock"); !os.IsNotExist(err) {
		t.Errorf("socket copied: %v", err)
	}
	if layer.Bytes != int64(len("captured\n")+len("#!/bin/sh\n")) {
		t.Errorf("Bytes = %d", layer.Bytes)
	}
	if debris, _ := os.ReadDir(s.tmpDir()); len(debris) != 0 {
		t.Errorf("tmp/ holds %d entries after a commit", len(debris))
	}
}

// TestCommitDedups: the same tree twice is one layer.
func TestCommitDedups(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	src := upperLike(t)
	a, err := commitDir(t, s, src, 0)
	must(t, err)
	// Times are not part of the description.
	must(t, os.Chtimes(src+"/etc/motd", a1970, a1970))
	b, err := commitDir(t, s, src, 0)
	must(t, err)
	if a.Digest != b.Digest {
		t.Fatalf("same tree, two digests: %s %s", a.Digest, b.Digest)
	}
	if list, _ := s.List(); len(list) != 1 {
		t.Errorf("List = %v, want one layer", list)
	}
	if debris, _ := os.ReadDir(s.tmpDir()); len(debris) != 0 {
		t.Errorf("tmp/ holds %d entries after a duplicate commit", len(debris))
	}
}

// TestDigestCoversMetadata: content, mode, owner, xattrs and link targets
// all change the digest.
func TestDigestCoversMetadata(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	src := upperLike(t)
	base, err := commitDir(t, s, src, 0)
	must(t, err)
	changes := map[string]func(){
		"content": func() { write(t, src+"/etc/motd", "changed\n", 0o644) },
		"mode":    func() { must(t, os.Chmod(src+"/fifo", 0o600)) },
		"owner":   func() { must(t, os.Lchown(src+"/shadow-link", 7, 7)) },
		"xattr":   func() { must(t, unix.Setxattr(src+"/etc/motd", "user.note", []byte("other"), 0)) },
		"link": func() {
			must(t, os.Remove(src+"/usr/motd-rel"))
			must(t, os.Symlink("/elsewhere", src+"/usr/motd-rel"))
		},
		"new dir": func() { must(t, os.Mkdir(src+"/new", 0o755)) },
	}
	seen := map[Digest]string{base.Digest: "base"}
	for what, change := range changes {
		change()
		l, err := commitDir(t, s, src, 0)
		must(t, err)
		if prev, dup := seen[l.Digest]; dup {
			t.Errorf("after a %s change the digest equals the one after %s", what, prev)
		}
		seen[l.Digest] = what
	}
}

func TestCommitRefusesDevicesAndKeepsNothing(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	src := upperLike(t)
	must(t, unix.Mknod(src+"/etc/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	if _, err := commitDir(t, s, src, 0); err == nil {
		t.Fatal("a tree with /dev/null's device node committed")
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("a failed commit left layers %v", list)
	}
	if debris, _ := os.ReadDir(s.tmpDir()); len(debris) != 0 {
		t.Errorf("a failed commit left %d entries in tmp/", len(debris))
	}
}

func TestCommitTooLarge(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	src := upperLike(t)
	write(t, src+"/big", string(make([]byte, 1<<20)), 0o644)
	if _, err := commitDir(t, s, src, 64<<10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("commit past the limit: %v, want ErrTooLarge", err)
	}
	if debris, _ := os.ReadDir(s.tmpDir()); len(debris) != 0 {
		t.Errorf("a refused commit left %d entries in tmp/", len(debris))
	}
}

func TestOpenRemovesDebrisAndRemove(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	write(t, s.tmpDir()+"/half/file", "x", 0o644)
	s2, err := Open(s.Root())
	must(t, err)
	if debris, _ := os.ReadDir(s2.tmpDir()); len(debris) != 0 {
		t.Errorf("Open left %d debris entries", len(debris))
	}
	l, err := commitDir(t, s2, upperLike(t), 0)
	must(t, err)
	must(t, s2.Remove(l.Digest))
	if s2.Has(l.Digest) {
		t.Error("removed layer still there")
	}
	if err := s2.Remove(l.Digest); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
}

// TestLayerIsAnOverlayLower mounts a committed layer over a base: its
// whiteout hides a base file, its opaque directory hides a base
// directory's contents, its files show.
func TestLayerIsAnOverlayLower(t *testing.T) {
	require.Root(t)
	require.Feature(t, "overlayfs")
	s := openStore(t)
	src := upperLike(t)
	l, err := commitDir(t, s, src, 0)
	must(t, err)
	base := t.TempDir()
	write(t, base+"/etc/deleted", "base file\n", 0o644)
	write(t, base+"/etc/kept", "base\n", 0o644)
	write(t, base+"/opt/opaque/hidden", "base\n", 0o644)
	merged := t.TempDir()
	must(t, unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+l.Path+":"+base))
	defer unix.Unmount(merged, unix.MNT_DETACH)
	if _, err := os.Stat(merged + "/etc/deleted"); !os.IsNotExist(err) {
		t.Errorf("whiteout does not hide the base file: %v", err)
	}
	if _, err := os.Stat(merged + "/opt/opaque/hidden"); !os.IsNotExist(err) {
		t.Errorf("opaque dir does not hide the base's contents: %v", err)
	}
	if b, _ := os.ReadFile(merged + "/etc/kept"); string(b) != "base\n" {
		t.Errorf("base file under the layer = %q", b)
	}
	if b, _ := os.ReadFile(merged + "/etc/motd"); string(b) != "captured\n" {
		t.Errorf("layer file = %q", b)
	}
}

func TestParseDigest(t *testing.T) {
	for _, bad := range []string{"", "sha256:", "md5:00", "sha256:" + string(make([]byte, 64)), "sha256:ABCDEF0000000000000000000000000000000000000000000000000000000000", "sha256:../../etc"} {
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
}

var a1970 = time.Unix(0, 0)

// An image unmounted lazily while its filesystem is still in use is
// mounted again through the loop device that still holds it: one
// superblock, never two over one file.
func TestOwnFilesystemRemountsTheDeviceStillHoldingIt(t *testing.T) {
	dir, _ := rootFSStoreDir(t)
	h, err := EnsureOwnFilesystem(dir, 256<<20)
	must(t, err)
	defer unix.Unmount(dir, unix.MNT_DETACH)
	var first unix.Stat_t
	must(t, unix.Stat(dir, &first))
	busy, err := os.Create(filepath.Join(dir, "busy")) // keeps the filesystem alive
	must(t, err)
	defer busy.Close()
	must(t, h.Release())
	if isMountPoint(t, dir) {
		t.Fatal("the last hold's release left the image mounted")
	}
	h, err = EnsureOwnFilesystem(dir, 256<<20)
	must(t, err)
	defer h.Release()
	var again unix.Stat_t
	must(t, unix.Stat(dir, &again))
	if again.Dev != first.Dev {
		t.Fatalf("mounted again as device %d:%d, was %d:%d: a second loop device over one image", unix.Major(again.Dev), unix.Minor(again.Dev), unix.Major(first.Dev), unix.Minor(first.Dev))
	}
	if _, err := os.Stat(filepath.Join(dir, "busy")); err != nil {
		t.Errorf("the file made before is not in the mount: %v", err)
	}
}

// A store left mounted by a user killed before its Release is unmounted
// by UnmountUnused, and only once no live process holds it.
func TestUnmountUnusedStore(t *testing.T) {
	dir, _ := rootFSStoreDir(t)
	if ok, err := UnmountUnused(dir); ok || err != nil {
		t.Fatalf("a store never opened: unmounted %v, %v", ok, err)
	}
	h, err := EnsureOwnFilesystem(dir, 256<<20)
	must(t, err)
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if ok, err := UnmountUnused(dir); ok || err != nil || !isMountPoint(t, dir) {
		t.Fatalf("with a hold: unmounted %v, %v; want it left mounted", ok, err)
	}
	// Dropping the hold without Release is what a killed user leaves.
	h.users.Close()
	h.users = nil
	if !isMountPoint(t, dir) {
		t.Fatal("negative control: the image is not mounted after its user died")
	}
	if ok, err := UnmountUnused(dir); !ok || err != nil || isMountPoint(t, dir) {
		t.Fatalf("with no hold: unmounted %v, %v, mounted %v; want it unmounted", ok, err, isMountPoint(t, dir))
	}
}

// rootFSStoreDir is a store directory on the root filesystem (under
// /var/tmp), removed at the end, and the root filesystem's device; the
// test is skipped where /var/tmp is a filesystem of its own.
func rootFSStoreDir(t *testing.T) (dir string, rootDev uint64) {
	t.Helper()
	require.Root(t)
	base, err := os.MkdirTemp("/var/tmp", "tine-store-test-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	var st, root unix.Stat_t
	must(t, unix.Stat(base, &st))
	must(t, unix.Stat("/", &root))
	if st.Dev != root.Dev {
		t.Skip("/var/tmp is not on the root filesystem here: nothing to prove")
	}
	return filepath.Join(base, "store"), root.Dev
}

// isMountPoint says whether dir is a mount point (on another device than
// its parent).
func isMountPoint(t *testing.T, dir string) bool {
	t.Helper()
	var st, parent unix.Stat_t
	must(t, unix.Stat(dir, &st))
	must(t, unix.Stat(filepath.Dir(dir), &parent))
	return st.Dev != parent.Dev
}

func netListen(path string) (net.Listener, error) { return net.Listen("unix", path) }

// TestOwnFilesystem: a store directory on the root filesystem becomes an
// ext4 image of its own, mounted again (with its layers) after an
// unmount, as after a reboot.
func TestOwnFilesystem(t *testing.T) {
	dir, rootDev := rootFSStoreDir(t)
	var st unix.Stat_t
	first, err := EnsureOwnFilesystem(dir, 256<<20)
	must(t, err)
	if !first.ours {
		t.Fatal("a store on the root filesystem was not given its own")
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	must(t, unix.Stat(dir, &st))
	if st.Dev == rootDev {
		t.Fatal("still on the root filesystem")
	}
	s, err := Open(dir)
	must(t, err)
	l, err := commitDir(t, s, upperLike(t), 0)
	must(t, err)
	second, err := EnsureOwnFilesystem(dir, 256<<20)
	if err != nil || !second.ours {
		t.Errorf("second hold on the mounted image: ours %v, %v; want it known as the store's image", second != nil && second.ours, err)
	}
	if mnt := t.TempDir(); unix.Mount("tmpfs", mnt, "tmpfs", 0, "") == nil {
		h, err := EnsureOwnFilesystem(mnt, 256<<20)
		if err != nil || h.ours {
			t.Errorf("a tmpfs of the host's: ours %v, %v; want it left alone", h != nil && h.ours, err)
		}
		must(t, h.Release())
		if !isMountPoint(t, mnt) {
			t.Error("releasing the only hold on a host's filesystem unmounted it")
		}
		unix.Unmount(mnt, 0)
	}
	// A hold whose process died is no hold: the kernel drops its flock.
	dead := exec.Command("flock", "--shared", dir+".users", "true")
	if out, err := dead.CombinedOutput(); err != nil {
		t.Fatalf("flock(1): %v: %s", err, out)
	}
	must(t, first.Release())
	if !isMountPoint(t, dir) {
		t.Fatal("the image was unmounted while a second hold remained")
	}
	must(t, second.Release())
	must(t, second.Release()) // twice: nothing
	if isMountPoint(t, dir) {
		t.Fatal("the last hold's release left the image mounted")
	}
	if _, err := os.Stat(l.Path); err == nil {
		t.Fatal("the layer is visible with the image unmounted: it was not in the image")
	}
	h, err := EnsureOwnFilesystem(dir, 256<<20)
	must(t, err)
	defer h.Release()
	s, err = Open(dir)
	must(t, err)
	if !s.Has(l.Digest) {
		t.Error("the layer did not survive an unmount and mount of the image")
	}
	// The layer stacks over the host's root, which a store on the root
	// filesystem could not (overlapping lowerdir).
	merged := t.TempDir()
	must(t, unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+l.Path+":/"))
	defer unix.Unmount(merged, unix.MNT_DETACH)
	if b, _ := os.ReadFile(merged + "/etc/motd"); string(b) != "captured\n" {
		t.Errorf("layer over / = %q", b)
	}
}
