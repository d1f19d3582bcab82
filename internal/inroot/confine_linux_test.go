package inroot

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/landlock"
)

// confined runs fn on an OS thread that Landlock lets write only beneath
// dir, and discards the thread afterwards. A fuzzed archive that escaped
// its root would then fail with EACCES (or EXDEV for a cross-directory
// link or rename) instead of writing to the host; root never gets either
// inside dir otherwise. It reports false when the kernel has no Landlock.
func confined(t *testing.T, dir string, fn func()) bool {
	abi := landlock.ABI()
	if abi < 1 {
		return false
	}
	ran := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, domain and all.
		runtime.LockOSThread()
		ran <- restrictThread(dir, abi)
		fn()
		ran <- nil
	}()
	if err := <-ran; err != nil {
		t.Fatalf("confine the extraction to %s: %v", dir, err)
	}
	<-ran
	return true
}

// restrictThread puts the calling thread in a Landlock domain that handles
// every write right and grants them beneath dir.
func restrictThread(dir string, abi int) error {
	handled := landlock.Supported(landlock.Write, abi)
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&handled)), unsafe.Sizeof(handled), 0)
	if errno != 0 {
		return errno
	}
	defer unix.Close(int(fd))
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	rule := landlock.PathBeneathAttr{Allowed: landlock.Supported(landlock.Writable, abi), ParentFd: int32(dirfd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, landlock.RuleTypePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return errno
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// TestConfined: the fuzz's confinement does refuse a write outside its
// directory, which the same write outside the confinement makes (the
// negative control), and allows one inside.
func TestConfined(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	write := func(dir string) error { return os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644) }
	var inErr, outErr error
	if !confined(t, in, func() { inErr, outErr = write(in), write(out) }) {
		t.Skipf("needs Landlock: ABI %d", landlock.ABI())
	}
	if inErr != nil {
		t.Fatalf("a write inside the confinement: %v", inErr)
	}
	if !errors.Is(outErr, syscall.EACCES) {
		t.Fatalf("a write outside the confinement: got %v, want EACCES", outErr)
	}
	if err := write(out); err != nil {
		t.Fatalf("the same write unconfined: %v", err)
	}
}
