package seccomp

import "golang.org/x/sys/unix"

// zygoteExtras are the calls the Zygote filter allows on top of Default.
var zygoteExtras = []uint32{unix.SYS_UNSHARE, unix.SYS_MOUNT, unix.SYS_UMOUNT2}

// UndoZygote returns the filter a zygote's request loads on top of the
// Zygote filter it inherits, once it has walled itself in: it refuses
// exactly what Zygote adds to Default (EPERM, as Default does), so the
// two stacked decide as Default alone. It checks no architecture: the
// Zygote filter below it already kills other ABIs and refuses x32 calls.
// Six instructions load in microseconds, where Default's program costs
// about 0.1 ms per request.
func UndoZygote() []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		retK = unix.BPF_RET | unix.BPF_K
	)
	n := len(zygoteExtras)
	prog := []unix.SockFilter{{Code: ldW, K: 0}} // seccomp_data.nr
	for i, nr := range zygoteExtras {
		// Match: jump over the remaining tests and the allow.
		prog = append(prog, unix.SockFilter{Code: jeqK, K: nr, Jt: uint8(n - i)})
	}
	return append(prog,
		unix.SockFilter{Code: retK, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: retK, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	)
}
