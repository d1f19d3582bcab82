package policy

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The session mode lets setns name exactly one namespace type a forked
// copy joins; setns with 0 ("any type"), with two types at once or with
// the time namespace stays refused, as do unshare and mount, which Default
// refuses and Session must not add. Default itself refuses setns.
func TestSessionSetnsTypes(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode string, nr uint32, args ...uint64) uint32 {
		prog, err := Compile(mode)
		if err != nil {
			t.Fatal(err)
		}
		var a6 [6]uint64
		copy(a6[:], args)
		return newFilterVM(t, prog).run(t, uint32(a.ID), nr, a6)
	}
	for _, nstype := range sessionSetnsTypes {
		if got := run(Session, unix.SYS_SETNS, 3, nstype); got != allow {
			t.Errorf("session: setns(3, %#x): %#x, want allowed", nstype, got)
		}
		if got := run(Default, unix.SYS_SETNS, 3, nstype); got == allow {
			t.Errorf("default: setns(3, %#x): allowed, want refused (the negative control)", nstype)
		}
	}
	for _, bad := range []uint64{0, unix.CLONE_NEWUSER | unix.CLONE_NEWNS, unix.CLONE_NEWTIME, 1<<32 | unix.CLONE_NEWNS} {
		if got := run(Session, unix.SYS_SETNS, 3, bad); got == allow {
			t.Errorf("session: setns(3, %#x): allowed, want refused", bad)
		}
	}
	if got := run(Session, unix.SYS_UNSHARE, unix.CLONE_NEWUSER); got == allow {
		t.Error("session: unshare(CLONE_NEWUSER) allowed, want refused")
	}
	if got := run(Session, unix.SYS_MOUNT); got == allow {
		t.Error("session: mount allowed, want refused")
	}
}
