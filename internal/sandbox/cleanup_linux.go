package sandbox

// The cleanup a one-shot run leaves behind (Process.WaitAndLeave): a
// process forked once the command's status is known, which waits for the
// sandbox's PID 1 to end and removes its cgroup, so that tine run exits as
// soon as it has the status, as bwrap does. Both sides are here: the
// child, like PID 1 (init_linux.go), has no Go runtime behind it and runs
// only the nosplit function below, on memory of its own (see
// forkCleanup).

import (
	"errors"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"golang.org/x/sys/unix"
)

// cleanupProgram is what the cleanup process runs on, prepared by the
// parent before the fork in memory mapped for it alone (Go's runtime
// neither moves nor frees it), followed by the child's stack.
type cleanupProgram struct {
	pidfd int32
	ndirs int32
	poll  unix.PollFd
	pause unix.Timespec
	root  [2]byte // "/"
	// dirs point at the group's directories, NUL-terminated in text,
	// removed in order.
	dirs [cleanupMaxDirs]uintptr
	text [cleanupText]byte
}

const (
	cleanupMaxDirs = 16
	cleanupText    = 4096
	// cleanupMem is the mapping: the program, then the stack.
	cleanupMem = 64 << 10
)

// cleanupTries bounds the rmdirs of one directory that find it busy (a
// task of the group not yet through its exit), cleanupPause apart: 500 ×
// 1 ms. What is still there then is the next run's reap's (the group's
// owner, the tine that made it, is gone by then).
const (
	cleanupTries = 500
	cleanupPause = 1_000_000 // ns
)

// leaveCleanup forks the process that waits for the PID 1 behind pidfd to
// end and then removes g's directories. The child holds nothing of the
// caller's but pidfd (stdio and pipes closed, so a reader of the caller's
// output sees EOF when the caller exits); it blocks every signal, so
// SIGKILL alone ends it early, leaving the group to the next run's reap
// (cgroup.Host.Reap: its owner, this process, is dead by then).
func leaveCleanup(pidfd int, g *cgroup.Group) error {
	mem, err := unix.Mmap(-1, 0, cleanupMem, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	c := (*cleanupProgram)(unsafe.Pointer(&mem[0]))
	c.pidfd, c.root[0] = int32(pidfd), '/'
	c.poll = unix.PollFd{Fd: int32(pidfd), Events: unix.POLLIN}
	c.pause = unix.Timespec{Nsec: cleanupPause}
	at := 0
	for _, dir := range g.RemovalOrder() {
		if at+len(dir)+1 > len(c.text) || int(c.ndirs) == len(c.dirs) {
			unix.Munmap(mem)
			return errors.New("cleanup: too many cgroup directories")
		}
		c.dirs[c.ndirs] = uintptr(unsafe.Pointer(&c.text[at]))
		c.ndirs++
		at += copy(c.text[at:], dir) + 1
	}
	top := uintptr(unsafe.Pointer(&mem[len(mem)-64])) &^ 15
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all, old := ^uint64(0), uint64(0)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	errno := forkCleanup(top, c)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if errno != 0 {
		unix.Munmap(mem)
		return syscall.Errno(errno)
	}
	// The mapping is the child's now: never unmapped here (the caller
	// exits next; the child runs on it until it exits).
	return nil
}

// cleanupMain is the cleanup process. It never returns.
//
//go:nosplit
//go:norace
func cleanupMain(c *cleanupProgram) {
	fd := uintptr(c.pidfd)
	if fd > 0 {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, fd-1, 0)
	}
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, fd+1, ^uintptr(0)>>1, 0)
	syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(&c.root[0])), 0, 0)
	// A pidfd polls readable once its process has exited, which for a
	// pid namespace's init is after every process of the namespace was
	// killed and reaped, each leaving its cgroups on the way.
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&c.poll)), 1, 0, 0, 0, 0)
		if e == 0 && n == 1 || e != 0 && e != syscall.EINTR {
			break
		}
	}
	for i := 0; i < int(c.ndirs) && i < len(c.dirs); i++ {
		for try := 0; try < cleanupTries; try++ {
			_, _, e := syscall.RawSyscall6(unix.SYS_UNLINKAT, atFdcwd, c.dirs[i], unix.AT_REMOVEDIR, 0, 0, 0)
			if e != syscall.EBUSY {
				break
			}
			syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&c.pause)), 0, 0)
		}
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
}
