package sandbox

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/tine-run/tine/internal/kernel/landlock"
	"golang.org/x/sys/unix"
)

// RestrictThread puts the calling OS thread into a Landlock domain with
// the sandbox's write rules, opened in its root through its PID 1: what
// the thread starts then writes only where the sandbox's own processes
// may. A restoring criu runs so, because criu restores no Landlock
// domain: the processes it restores inherit its own (ADR 0016). The caller
// has locked the thread and never unlocks it (a domain cannot be left, so
// the thread must end with its goroutine). Without Landlock, or for a
// zygote sandbox (whose PID 1 has no domain either), it does nothing.
//
// Each of also (a file from outside the sandbox that restored processes
// held open for writing, such as an OCI container's stdout, which criu
// reopens) may be written too, but not truncated: what the processes could
// do with it already, though the rule stays in their domain, so they may
// reopen it (through /proc/self/fd) as well.
func (sb *Sandbox) RestrictThread(also ...*os.File) error {
	abi := sb.h.landlockABI
	if abi == 0 || sb.plan.Spec.Zygote {
		return nil
	}
	root, err := unix.Open(sb.Root(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	rs, err := landlock.NewRuleset(abi)
	if err != nil {
		return err
	}
	defer unix.Close(rs)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS}
	for _, r := range sb.plan.Landlock {
		fd, err := unix.Openat2(root, r.Path, how)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			continue // as PID 1 does: a rule whose path is gone grants less
		}
		if err != nil {
			return fmt.Errorf("landlock: open %s: %w", r.Path, err)
		}
		attr := landlock.PathBeneathAttr{Allowed: landlock.Supported(r.Rights, abi), ParentFd: int32(fd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs), landlock.RuleTypePathBeneath, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
		unix.Close(fd)
		if errno != 0 {
			return fmt.Errorf("landlock: allow writes beneath %s: %w", r.Path, errno)
		}
	}
	for _, f := range also {
		attr := landlock.PathBeneathAttr{Allowed: landlock.Supported(landlock.WriteFile, abi), ParentFd: int32(f.Fd())}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs), landlock.RuleTypePathBeneath, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock: allow writes to %s: %w", f.Name(), errno)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict: %w", errno)
	}
	return nil
}
