package policy

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The zygote mode lets unshare make exactly the namespaces a request walls
// itself in with (user, mount, IPC, network), alone or together, and
// nothing else: no pid, uts, cgroup or time namespace, even combined with
// an allowed flag.
func TestZygoteUnshareFlags(t *testing.T) {
	prog, err := Compile(Zygote)
	if err != nil {
		t.Fatal(err)
	}
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	vm := newFilterVM(t, prog)
	unshare := func(flags uint64) uint32 {
		return vm.run(t, uint32(a.ID), unix.SYS_UNSHARE, [6]uint64{flags})
	}
	allowed := []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWIPC, unix.CLONE_NEWNET}
	for mask := 1; mask < 1<<len(allowed); mask++ {
		var flags uint64
		for i, f := range allowed {
			if mask&(1<<i) != 0 {
				flags |= f
			}
		}
		if got := unshare(flags); got != allow {
			t.Errorf("unshare(%#x): %#x, want allowed", flags, got)
		}
		for _, bad := range []uint64{unix.CLONE_NEWPID, unix.CLONE_NEWUTS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME, unix.CLONE_FS, 1 << 32} {
			if got := unshare(flags | bad); got == allow {
				t.Errorf("unshare(%#x): allowed, want refused", flags|bad)
			}
		}
	}
}
