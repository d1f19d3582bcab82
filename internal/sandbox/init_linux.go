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
	// ENOENT for optional masks); 0 entries are unused. A tolerated
	// failure leaves -1 in the op's save register, so ops using it fail
	// with EBADF (which they tolerate, or report) instead of using a stale
	// descriptor.
	tolerate [3]syscall.Errno
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
			if e == o.tolerate[0] || e == o.tolerate[1] || e == o.tolerate[2] {
				if o.save >= 0 {
					regs[o.save&3] = ^uintptr(0)
				}
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
	if p.hop != nil {
		p.hop.run()
	}
	var regs [4]uintptr
	if i, e := runOps(p.setup, &regs); i >= 0 {
		report(p, i, e, 1)
	}
	if len(p.execs) == 0 {
		// A live sandbox: closing the error pipe tells the parent it is
		// ready; PID 1 then reaps and launches commands until it is killed.
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, slotLaunch-1, 0)
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotUpper+1, ^uintptr(0)>>1, 0)
		serveResident(p.resident)
	}
	if p.detached {
		// A detached sandbox (an OCI container) is created now: closing
		// the error pipe, and every copy of the parent's descriptors
		// (clone copied them all) tells the parent; the command, with its
		// stdio, starts on the start signal (see Spec.Detach).
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotErr, slotErr, 0)
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotSync+1, slotStdio-1, 0)
		if p.nextra > 0 { // the command's extra descriptors stay
			syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotStdio+3, uintptr(p.extraBase-1), 0)
			syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(p.extraBase+p.nextra), ^uintptr(0)>>1, 0)
		} else {
			syscall.RawSyscall(unix.SYS_CLOSE_RANGE, slotStdio+3, ^uintptr(0)>>1, 0)
		}
		// The parent commits (Process.Commit) once it recorded the
		// container; if it died first, nobody knows of this one.
		if n, _, _ := syscall.RawSyscall(syscall.SYS_READ, slotSync, uintptr(unsafe.Pointer(&p.siginfo[0])), 1); n != 1 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 1, 0, 0)
		}
		syscall.RawSyscall(syscall.SYS_CLOSE, slotSync, 0, 0)
		for p.startSet != 0 {
			sig, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGTIMEDWAIT, uintptr(unsafe.Pointer(&p.startSet)), uintptr(unsafe.Pointer(&p.siginfo)), 0, 8, 0, 0)
			if e == 0 && sig == uintptr(StartSignal) {
				break
			}
		}
	}
	var pid uintptr
	if p.adopt != 0 {
		// A restored command, already PID 1's child (Spec.Adopt).
		pid = uintptr(p.adopt)
	} else {
		p.vfork.kind = vforkCommand
		var e uintptr
		if pid, e = forkCommand(&p.vfork); e != 0 {
			report(p, failClone, syscall.Errno(e), 1)
		}
	}
	// The parent learns the command's pid (a host pid when this is an
	// exec's reaper outside the sandbox's pid namespace): it kills the
	// command's process group by it.
	p.cmdPid = int32(pid)
	if !p.detached {
		syscall.RawSyscall(syscall.SYS_WRITE, slotStatus, uintptr(unsafe.Pointer(&p.cmdPid)), 4)
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
				if p.detached {
					// Detached: no parent reads a status pipe; whoever
					// waits for PID 1 (containerd's shim) reads the
					// command's exit code, or 128+signal, as a shell gives.
					code := uintptr(p.status>>8) & 0xff
					if sig := p.status & 0x7f; sig != 0 {
						code = 128 + uintptr(sig)
					}
					syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
				}
				reportExit(p)
				syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
			}
		}
	}
}

// exitReport is what a reaper writes on the status pipe when its command
// ends (after the command's pid): the command's wait status and the CPU
// time used so far by the reaper and everything it reaped, the figure its
// own wait4 rusage would give. A caller that does not wait for the
// reaper's exit (Process.WaitAndLeave) still has the run's CPU time.
type exitReport struct {
	status int32
	_      int32
	cpuUs  int64
}

// reportExit writes p.status and the CPU time on the status pipe, in one
// write (a pipe write this small is atomic).
//
//go:nosplit
//go:norace
func reportExit(p *program) {
	syscall.RawSyscall(syscall.SYS_GETRUSAGE, uintptr(unix.RUSAGE_SELF), uintptr(unsafe.Pointer(&p.usage[0])), 0)
	syscall.RawSyscall(syscall.SYS_GETRUSAGE, ^uintptr(0) /* RUSAGE_CHILDREN */, uintptr(unsafe.Pointer(&p.usage[1])), 0)
	us := int64(0)
	for i := 0; i < 2; i++ {
		u := &p.usage[i&1]
		us += (u.Utime.Sec+u.Stime.Sec)*1e6 + u.Utime.Usec + u.Stime.Usec
	}
	p.exit.status, p.exit.cpuUs = p.status, us
	syscall.RawSyscall(syscall.SYS_WRITE, slotStatus, uintptr(unsafe.Pointer(&p.exit)), unsafe.Sizeof(p.exit))
}

// Launching (a live sandbox's PID 1). The parent sends one SOCK_SEQPACKET
// message per command on the launch socket: a header (launchHeader), then
// NUL-terminated strings — the working directory, the argv, the
// environment, the execve candidates — and five descriptors: the command's
// stdin, stdout, stderr, a SOCK_SEQPACKET status socket, and the write end
// of an exec-check pipe. PID 1 forks the command (which inherits the
// sandbox's namespaces, cgroup and walls, so nothing is joined, placed or
// applied again) and reports on the status socket, in 8-byte launchReport
// messages: launchStarted with a pidfd of the command, then
// launchExitStatus with its wait status. Only the command holds the
// exec-check pipe, close-on-exec: EOF there means it was exec'd, a
// launchExecFailed report that no candidate could be.

const (
	launchMaxMessage = 64 << 10
	launchMaxStrings = 2048 // argv + env + candidates + 1
	launchMaxRunning = 256
	launchFDs        = 5
	// launchMaxCgroups is how many cgroup join descriptors may follow
	// the five (header flags): the command writes "0" to each before its
	// execve, so it is born into a request's cgroup with nothing run yet.
	launchMaxCgroups = 4
)

// launchHeader starts a launch message.
type launchHeader struct {
	nargs, nenv, ncand, flags uint32
}

// launchReport is one message on a command's status socket.
type launchReport struct {
	tag, value int32
}

const (
	launchStarted    = 1 // value: the command's pid in the sandbox; a pidfd attached
	launchExecFailed = 2 // value: errno of the most telling execve failure
	launchExitStatus = 3 // value: the wait status
)

// launchState is PID 1's own memory for serving launches.
type launchState struct {
	buf     [launchMaxMessage]byte
	control [64]byte // >= CmsgSpace(4 * (launchFDs + launchMaxCgroups))
	iov     unix.Iovec
	msg     unix.Msghdr
	ptrs    [launchMaxStrings + 3]uintptr // argv, NULL, envp, NULL
	poll    [2]unix.PollFd
	sigmask uint64
	sigfd   int32
	info    [128]byte
	report  launchReport
	sendIov unix.Iovec
	sendMsg unix.Msghdr
	sendCtl [24]byte
	running [launchMaxRunning]struct{ pid, status int32 }
	dfl     sigaction
	empty   uint64
	oomPath [32]byte // "/proc/self/oom_score_adj", NUL-terminated
	zero    [1]byte  // "0"
	// asUser: launched commands drop to uid, gid and groups[:ngroups]
	// before execve (Spec.User); set by the parent before the clone.
	asUser   bool
	uid, gid uint32
	ngroups  uintptr
	groups   [launchMaxGroups]uint32
}

// launchMaxGroups bounds Spec.User's supplementary groups.
const launchMaxGroups = 64

// prepare points the launch buffers at each other. It runs in the parent,
// before the clone: the child must not store pointers (that would run the
// garbage collector's write barrier, which it cannot), only numbers.
func (l *launchState) prepare() {
	l.iov = unix.Iovec{Base: &l.buf[0], Len: launchMaxMessage}
	l.msg = unix.Msghdr{Iov: &l.iov, Iovlen: 1, Control: &l.control[0]}
	l.sendIov = unix.Iovec{Base: (*byte)(unsafe.Pointer(&l.report)), Len: 8}
	l.sendMsg = unix.Msghdr{Iov: &l.sendIov, Iovlen: 1, Control: &l.sendCtl[0]}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&l.sendCtl[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_RIGHTS
	h.SetLen(unix.CmsgLen(4))
	copy(l.oomPath[:], "/proc/self/oom_score_adj\x00")
	l.zero[0] = '0'
}

// serve is a live sandbox's PID 1 loop: reap, and launch what the parent
// sends, forking commands from v. It returns never; it exits when the
// parent closes the socket.
//
//go:nosplit
//go:norace
func serve(l *launchState, v *vforkArgs) {
	l.sigmask = 1 << (syscall.SIGCHLD - 1)
	fd, _, e := syscall.RawSyscall6(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&l.sigmask)), 8, unix.SFD_CLOEXEC, 0, 0)
	if e != 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 1, 0, 0)
	}
	l.sigfd = int32(fd)
	l.poll[0] = unix.PollFd{Fd: l.sigfd, Events: unix.POLLIN}
	l.poll[1] = unix.PollFd{Fd: slotLaunch, Events: unix.POLLIN}
	for {
		_, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&l.poll[0])), 2, 0, 0, 0, 0)
		if e != 0 {
			continue
		}
		if l.poll[0].Revents != 0 {
			syscall.RawSyscall(syscall.SYS_READ, uintptr(l.sigfd), uintptr(unsafe.Pointer(&l.info[0])), 128)
			reapLaunched(l)
		}
		if l.poll[1].Revents&unix.POLLIN != 0 {
			launch(l, v)
		} else if l.poll[1].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0) // the parent is gone
		}
	}
}

// reapLaunched reaps every exited child and reports a launched command's
// status on its status socket.
//
//go:nosplit
//go:norace
func reapLaunched(l *launchState) {
	for {
		var ws int32
		pid, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)), syscall.WNOHANG|0x40000000, 0, 0, 0)
		if e != 0 || pid == 0 {
			return
		}
		for i := 0; i < launchMaxRunning; i++ {
			r := &l.running[i]
			if r.pid == int32(pid) {
				l.report = launchReport{tag: launchExitStatus, value: ws}
				syscall.RawSyscall(syscall.SYS_WRITE, uintptr(r.status), uintptr(unsafe.Pointer(&l.report)), 8)
				syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(r.status), 0, 0)
				r.pid, r.status = 0, 0
				break
			}
		}
	}
}

// launch receives one launch message and forks its command.
//
//go:nosplit
//go:norace
func launch(l *launchState, v *vforkArgs) {
	l.msg.Controllen = uint64(len(l.control)) // recvmsg rewrote it
	n, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, slotLaunch, uintptr(unsafe.Pointer(&l.msg)), unix.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return
	}
	if n == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	// The descriptors: one SCM_RIGHTS message of launchFDs int32s, and
	// h.flags cgroup join descriptors (cgroup.Group.JoinFiles).
	if l.msg.Controllen < uint64(unix.CmsgLen(4*launchFDs)) {
		return
	}
	fds := (*[launchFDs + launchMaxCgroups]int32)(unsafe.Pointer(&l.control[unix.CmsgLen(0)]))
	nfds := int(((*unix.Cmsghdr)(unsafe.Pointer(&l.control[0])).Len - uint64(unix.CmsgLen(0))) / 4)
	status := fds[3]
	h := (*launchHeader)(unsafe.Pointer(&l.buf[0]))
	total := int(h.nargs) + int(h.nenv) + int(h.ncand)
	if h.nargs == 0 || h.ncand == 0 || total > launchMaxStrings || h.flags > launchMaxCgroups || nfds != launchFDs+int(h.flags) {
		closeFDs(fds, nfds)
		return
	}
	// Split the strings: workdir, then argv, env and candidates, each
	// NUL-terminated; argv and env become NULL-terminated pointer arrays.
	pos := int(unsafe.Sizeof(launchHeader{}))
	end := int(n)
	workdir := uintptr(unsafe.Pointer(&l.buf[pos]))
	pos = skipString(&l.buf, pos, end)
	argv := 0
	envp := int(h.nargs) + 1
	cand := envp + int(h.nenv) + 1
	i := 0
	for ; i < total && pos < end; i++ {
		slot := argv + i
		if i >= int(h.nargs) {
			slot = envp + i - int(h.nargs)
		}
		if i >= int(h.nargs)+int(h.nenv) {
			slot = cand + i - int(h.nargs) - int(h.nenv)
		}
		if slot >= len(l.ptrs) {
			closeFDs(fds, nfds)
			return
		}
		l.ptrs[slot] = uintptr(unsafe.Pointer(&l.buf[pos]))
		pos = skipString(&l.buf, pos, end)
	}
	if i < total || pos > end || cand+int(h.ncand) > len(l.ptrs) {
		closeFDs(fds, nfds)
		return
	}
	l.ptrs[envp-1] = 0
	l.ptrs[cand-1] = 0

	// A free slot in the running table first: a command PID 1 could not
	// report on must not start.
	slot := -1
	for i := 0; i < launchMaxRunning; i++ {
		if l.running[i].pid == 0 {
			slot = i
			break
		}
	}
	if slot < 0 {
		l.report = launchReport{tag: launchExecFailed, value: int32(syscall.EAGAIN)}
		syscall.RawSyscall(syscall.SYS_WRITE, uintptr(status), uintptr(unsafe.Pointer(&l.report)), 8)
		closeFDs(fds, nfds)
		return
	}
	v.kind, v.workdir, v.argv, v.envp, v.cand, v.ncand, v.ncgroups = vforkLaunched, workdir, argv, envp, cand, int(h.ncand), int(h.flags)
	pid, errno := forkCommand(v)
	if errno != 0 {
		l.report = launchReport{tag: launchExecFailed, value: int32(errno)}
		syscall.RawSyscall(syscall.SYS_WRITE, uintptr(status), uintptr(unsafe.Pointer(&l.report)), 8)
		closeFDs(fds, nfds)
		return
	}
	for i := 0; i < nfds; i++ {
		if i != 3 { // the status socket stays until the command is reaped
			syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fds[i]), 0, 0)
		}
	}
	// Tell the parent, with a pidfd it can signal the command by; without
	// one the parent could not control it, so it does not run.
	pidfd, _, e := syscall.RawSyscall(unix.SYS_PIDFD_OPEN, pid, 0, 0)
	if e != 0 {
		syscall.RawSyscall(syscall.SYS_KILL, pid, uintptr(syscall.SIGKILL), 0)
	}
	l.report = launchReport{tag: launchStarted, value: int32(pid)}
	l.sendMsg.Controllen = 0
	if e == 0 {
		*(*int32)(unsafe.Pointer(&l.sendCtl[unix.CmsgLen(0)])) = int32(pidfd)
		l.sendMsg.Controllen = uint64(len(l.sendCtl))
		syscall.RawSyscall(syscall.SYS_SENDMSG, uintptr(status), uintptr(unsafe.Pointer(&l.sendMsg)), unix.MSG_NOSIGNAL)
		syscall.RawSyscall(syscall.SYS_CLOSE, pidfd, 0, 0)
	}
	// Its exit status goes to the status socket when it is reaped.
	l.running[slot].pid, l.running[slot].status = int32(pid), status
}

// vforkArgs is what forkCommand's child runs: PID 2 of a one-shot sandbox
// (commandMain) or a launched command (launchedMain). The parent sets the
// pointers before the clone; the child side writes only numbers.
type vforkArgs struct {
	kind                    int
	p                       *program     // vforkCommand's
	launch                  *launchState // vforkLaunched's
	stack                   *[vforkStackSize]byte
	workdir                 uintptr
	argv, envp, cand, ncand int
	ncgroups                int
}

const (
	vforkCommand = iota
	vforkLaunched
)

// vforkStackSize is the stack the forked child runs on before execve.
const vforkStackSize = 64 << 10

// vforkChild is where forkCommand's child starts. It never returns.
//
//go:nosplit
//go:norace
func vforkChild(a *vforkArgs) {
	if a.kind == vforkLaunched {
		l := a.launch
		launchedMain(l, (*[launchFDs + launchMaxCgroups]int32)(unsafe.Pointer(&l.control[unix.CmsgLen(0)])), a.ncgroups, a.workdir, a.argv, a.envp, a.cand, a.ncand)
	}
	commandMain(a.p)
}

// launchedMain is a launched command's process before execve.
//
//go:nosplit
//go:norace
func launchedMain(l *launchState, fds *[launchFDs + launchMaxCgroups]int32, ncgroups int, workdir uintptr, argv, envp, cand, ncand int) {
	// Into the request's cgroup before anything else: a command that
	// cannot be admitted does not run.
	for i := 0; i < ncgroups; i++ {
		if _, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fds[launchFDs+i]), uintptr(unsafe.Pointer(&l.zero[0])), 1); e != 0 {
			l.report = launchReport{tag: launchExecFailed, value: int32(e)}
			syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fds[4]), uintptr(unsafe.Pointer(&l.report)), 8)
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 126, 0, 0)
		}
	}
	syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0)
	for i := 0; i < 3; i++ {
		syscall.RawSyscall(unix.SYS_DUP3, uintptr(fds[i]), uintptr(i), 0)
	}
	// The exec-check pipe stays, close-on-exec, for an exec failure report.
	syscall.RawSyscall(unix.SYS_DUP3, uintptr(fds[4]), 3, unix.O_CLOEXEC)
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 4, ^uintptr(0)>>1, 0)
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig != uintptr(syscall.SIGKILL) && sig != uintptr(syscall.SIGSTOP) {
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&l.dfl)), 0, 8, 0, 0)
		}
	}
	// Back to the default OOM score (PID 1 keeps -1000; see addOOMScore).
	// In a user namespace neither write is allowed, and none is needed.
	if fd, _, e := syscall.RawSyscall6(syscall.SYS_OPENAT, atFdcwd, uintptr(unsafe.Pointer(&l.oomPath[0])), unix.O_WRONLY|unix.O_CLOEXEC, 0, 0, 0); e == 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&l.zero[0])), 1)
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&l.empty)), 0, 8, 0, 0)
	if l.asUser {
		// Groups first: setgroups and setresgid need the capabilities
		// that setresuid to a non-zero uid drops.
		_, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, l.ngroups, uintptr(unsafe.Pointer(&l.groups[0])), 0)
		if e == 0 {
			_, _, e = syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(l.gid), uintptr(l.gid), uintptr(l.gid))
		}
		if e == 0 {
			_, _, e = syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(l.uid), uintptr(l.uid), uintptr(l.uid))
		}
		if e != 0 {
			l.report = launchReport{tag: launchExecFailed, value: int32(e)}
			syscall.RawSyscall(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&l.report)), 8)
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 126, 0, 0)
		}
	}
	worst := syscall.ENOENT
	if _, _, e := syscall.RawSyscall(syscall.SYS_CHDIR, workdir, 0, 0); e != 0 {
		worst = e
	} else {
		for i := 0; i < ncand; i++ {
			_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, l.ptrs[cand+i], uintptr(unsafe.Pointer(&l.ptrs[argv])), uintptr(unsafe.Pointer(&l.ptrs[envp])))
			if e != syscall.ENOENT && e != syscall.ENOTDIR {
				worst = e
			}
		}
	}
	l.report = launchReport{tag: launchExecFailed, value: int32(worst)}
	syscall.RawSyscall(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&l.report)), 8)
	code := uintptr(127)
	if worst != syscall.ENOENT {
		code = 126
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
}

// skipString returns the position after the NUL that ends the string at pos.
//
//go:nosplit
//go:norace
func skipString(buf *[launchMaxMessage]byte, pos, end int) int {
	for pos < end && buf[pos] != 0 {
		pos++
	}
	return pos + 1
}

//go:nosplit
//go:norace
func closeFDs(fds *[launchFDs + launchMaxCgroups]int32, n int) {
	for i := 0; i < n && i < len(fds); i++ {
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fds[i]), 0, 0)
	}
}
