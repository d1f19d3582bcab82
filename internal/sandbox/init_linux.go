package sandbox

// The child side. Everything in this file runs in the process created by
// clone in cloneChild: a copy of the tine process with a single thread and
// no Go runtime behind it (no scheduler, no GC, no other threads). It may
// only run the nosplit functions below, which do nothing but raw syscalls
// on memory the parent prepared (see program_linux.go). It becomes the
// sandbox's PID 1: it applies the setup ops, forks the command (PID 2),
// then reaps and forwards signals until the command exits.

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// op is one raw syscall of the child's program.
type op struct {
	nr   uintptr
	args [6]uintptr
	// reg is a register read by this op: its value replaces args[regArg]
	// (when regArg >= 0) and is stored to *store (when store != nil)
	// before the call. -1: none.
	reg    int8
	regArg int8
	store  *int32
	// save is the register the result goes to (-1: none).
	save int8
	// load, when set, makes the op a register load: *load goes to
	// register save, and no syscall is made.
	load *int32
	// tolerate lists errnos that count as success (EEXIST for mkdir,
	// ENOENT for optional masks); 0 entries are unused.
	tolerate [2]syscall.Errno
	// want, when >= 0, is the only acceptable result (1 byte read).
	want int
}

// failure codes written to the error pipe instead of an op index.
const (
	failExec  = -1 // every execve candidate failed; errno is the most telling one
	failClone = -2 // forking the command failed
)

// childReport is what the child writes to the error pipe on failure.
type childReport struct {
	index int32
	errno int32
}

// runOps runs ops in order and returns the index and errno of the first
// failure, or -1.
//
//go:nosplit
//go:norace
func runOps(ops []op, regs *[4]uintptr) (int, syscall.Errno) {
	for i := 0; i < len(ops); i++ {
		o := &ops[i]
		if o.load != nil {
			regs[o.save&3] = uintptr(*o.load)
			continue
		}
		a := o.args
		if o.reg >= 0 {
			v := regs[o.reg&3]
			if o.regArg >= 0 {
				a[o.regArg%6] = v
			}
			if o.store != nil {
				*o.store = int32(v)
			}
		}
		r, _, e := syscall.RawSyscall6(o.nr, a[0], a[1], a[2], a[3], a[4], a[5])
		if e != 0 {
			if e == o.tolerate[0] || e == o.tolerate[1] {
				continue
			}
			return i, e
		}
		if o.want >= 0 && int(r) != o.want {
			return i, syscall.EPIPE
		}
		if o.save >= 0 {
			regs[o.save&3] = r
		}
	}
	return -1, 0
}

// report writes a failure to the error pipe and exits with code.
//
//go:nosplit
//go:norace
func report(p *program, index int, errno syscall.Errno, code uintptr) {
	p.report.index = int32(index)
	p.report.errno = int32(errno)
	syscall.RawSyscall(syscall.SYS_WRITE, slotErr, uintptr(unsafe.Pointer(&p.report)), unsafe.Sizeof(p.report))
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
}

// childMain is the sandbox's PID 1. It never returns.
//
//go:nosplit
//go:norace
func childMain(p *program) {
	var regs [4]uintptr
	if i, e := runOps(p.setup, &regs); i >= 0 {
		report(p, i, e, 1)
	}
	if len(p.execs) == 0 {
		// A live sandbox: closing the error pipe tells the parent it is
		// ready; PID 1 then only reaps until it is killed.
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, slotStatus-1, 0)
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotStatus+1, ^uintptr(0)>>1, 0)
		reap(p, 0)
	}
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		report(p, failClone, e, 1)
	}
	if pid == 0 {
		commandMain(p)
	}
	// PID 1 keeps only the status pipe: closing the error pipe lets the
	// parent see EOF once the command's execve closes the last copy.
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, slotStatus-1, 0)
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotStatus+1, ^uintptr(0)>>1, 0)
	reap(p, pid)
}

// commandMain is PID 2: it finishes its own setup and execs the command,
// trying each PATH candidate like execvp.
//
//go:nosplit
//go:norace
func commandMain(p *program) {
	var regs [4]uintptr
	if i, e := runOps(p.command, &regs); i >= 0 {
		report(p, len(p.setup)+i, e, 1)
	}
	worst := syscall.ENOENT
	for i := 0; i < len(p.execs); i++ {
		o := &p.execs[i]
		_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, o.args[0], o.args[1], o.args[2])
		if e != syscall.ENOENT && e != syscall.ENOTDIR {
			worst = e
		}
	}
	code := uintptr(127)
	if worst != syscall.ENOENT {
		code = 126
	}
	report(p, failExec, worst, code)
}

// reap waits for signals: SIGCHLD reaps (orphans included) and ends the
// sandbox when the command is reaped, passing its wait status on; any
// other signal is forwarded to the command. With cmd 0 (a live sandbox's
// PID 1) it only reaps. All signals are blocked (the
// parent blocked them before clone), so none is lost or runs a handler.
//
//go:nosplit
//go:norace
func reap(p *program, cmd uintptr) {
	for {
		sig, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGTIMEDWAIT, uintptr(unsafe.Pointer(&p.waitSet)), uintptr(unsafe.Pointer(&p.siginfo)), 0, 8, 0, 0)
		if e != 0 {
			continue
		}
		if sig != uintptr(syscall.SIGCHLD) {
			if cmd != 0 {
				syscall.RawSyscall(syscall.SYS_KILL, cmd, sig, 0)
			}
			continue
		}
		for {
			pid, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&p.status)), syscall.WNOHANG|0x40000000 /* __WALL */, 0, 0, 0)
			if e != 0 || pid == 0 {
				break
			}
			if pid == cmd {
				syscall.RawSyscall(syscall.SYS_WRITE, slotStatus, uintptr(unsafe.Pointer(&p.status)), 4)
				syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
			}
		}
	}
}
