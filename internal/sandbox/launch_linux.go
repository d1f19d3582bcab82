package sandbox

// The parent side of launching: a command sent to a live sandbox's PID 1,
// which forks it inside (see serve in init_linux.go). Nothing is cloned,
// joined, placed or walled by the parent: the command inherits all of it
// from PID 1, so a launch costs a fork and an execve.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// Launched is a command a live sandbox's PID 1 started.
type Launched struct {
	sb *Sandbox
	// status is the parent's end of the status socket, non-blocking under
	// Go's poller: a waiting launch holds no OS thread.
	status    *os.File
	pidfd     int
	hostPid   int // the command's pid on the host, which names its process group
	started   time.Time
	oomBefore int64

	// track holds everything the command starts (nil when the caller
	// placed it in a cgroup of its own, or the sandbox has none): a
	// timeout or SIGKILL kills it all, whatever session it moved to.
	track *cgroup.Group

	mu       sync.Mutex
	done     chan struct{}
	timedOut bool
	killed   bool
}

// execSeq numbers the exec tracking groups of this process.
var execSeq atomic.Uint64

// Launch starts e in the sandbox through its PID 1 and returns once the
// command was exec'd (ErrNotFound, ErrPermission otherwise). Unlike Exec it
// cannot give the command a terminal.
func (sb *Sandbox) Launch(e *ExecSpec) (*Launched, error) {
	if len(e.Args) == 0 || e.Args[0] == "" {
		return nil, fmt.Errorf("%w: no command given", ErrInvalidSpec)
	}
	defer sb.touches.Add(1) // once it returns (see Exec)
	release, err := sb.use()
	if err != nil {
		return nil, err
	}
	defer release()
	if e.TTY {
		return nil, fmt.Errorf("%w: launch has no terminal; use Exec", ErrInvalidSpec)
	}
	stdio, err := stdioFDs(e.Stdio)
	if err != nil {
		return nil, err
	}
	p := sb.plan
	env := buildEnv(&Spec{Env: append(append([]string(nil), p.Spec.Env...), e.Env...)}, p.Hostname)
	workdir := e.Workdir
	if workdir == "" {
		workdir = p.Workdir
	}
	if len(e.CgroupProcs) > launchMaxCgroups {
		return nil, fmt.Errorf("%w: more than %d cgroup descriptors", ErrInvalidSpec, launchMaxCgroups)
	}
	msg, err := launchMessage(workdir, e.Args, env, candidates(e.Args[0], env))
	if err != nil {
		return nil, err
	}
	cgroupProcs := e.CgroupProcs
	var track *cgroup.Group
	if g := sb.init.group; g != nil && len(cgroupProcs) == 0 && !e.Last {
		if track, err = g.Track(fmt.Sprintf("exec-%d", execSeq.Add(1))); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		if cgroupProcs, err = track.JoinFiles(); err != nil {
			track.Remove()
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		defer func() {
			for _, fd := range cgroupProcs {
				unix.Close(fd)
			}
		}()
	}
	untrack := func() {
		if track != nil {
			track.KillAll()
			track.Remove()
		}
	}
	binary.NativeEndian.PutUint32(msg[12:], uint32(len(cgroupProcs)))
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		untrack()
		return nil, fmt.Errorf("status socket: %w", err)
	}
	statusFD, childEnd := pair[0], pair[1]
	if err := unix.SetNonblock(statusFD, true); err != nil {
		unix.Close(statusFD)
		unix.Close(childEnd)
		untrack()
		return nil, err
	}
	status := os.NewFile(uintptr(statusFD), "launch status")
	checkR, checkW, err := os.Pipe()
	if err != nil {
		status.Close()
		unix.Close(childEnd)
		untrack()
		return nil, err
	}
	defer checkR.Close()
	l := &Launched{sb: sb, status: status, pidfd: -1, done: make(chan struct{})}
	if g := sb.init.group; g != nil {
		l.oomBefore = g.OOMKills()
	}
	l.track = track
	// sb.use keeps the launch socket open; no lock is held while sending
	// (a send can block on a wedged PID 1, and Destroy must still work).
	sb.init.mu.Lock()
	launchFD := sb.init.launchFD
	sb.init.mu.Unlock()
	if launchFD >= 0 {
		err = unix.Sendmsg(launchFD, msg, unix.UnixRights(append([]int{stdio[0], stdio[1], stdio[2], childEnd, int(checkW.Fd())}, cgroupProcs...)...), nil, 0)
	}
	unix.Close(childEnd)
	checkW.Close()
	if launchFD < 0 {
		status.Close()
		untrack()
		return nil, ErrSandboxGone
	}
	if err != nil {
		status.Close()
		untrack()
		return nil, fmt.Errorf("%w: send the command to the sandbox: %v", ErrSandboxGone, err)
	}
	tag, value, fd, err := l.readReport()
	switch {
	case err != nil:
		status.Close()
		untrack()
		return nil, err
	case tag == launchStarted && fd >= 0:
		l.pidfd = fd
		l.hostPid = pidOfPidfd(fd)
	case tag == launchExecFailed:
		status.Close()
		untrack()
		return nil, fmt.Errorf("%w: fork the command: %v", ErrSetup, syscall.Errno(value))
	default:
		status.Close()
		untrack()
		return nil, fmt.Errorf("%w: unexpected report %d from the sandbox", ErrSetup, tag)
	}
	// EOF on the exec-check pipe: exec'd; a report: no candidate worked.
	var rep childReport
	if n, _ := readFull(checkR, (*[unsafe.Sizeof(rep)]byte)(unsafe.Pointer(&rep))[:]); n == int(unsafe.Sizeof(rep)) {
		l.Wait() // collect the exit, close everything
		switch syscall.Errno(rep.errno) {
		case unix.ENOENT, unix.ENOTDIR:
			return nil, fmt.Errorf("%s: %w", e.Args[0], ErrNotFound)
		case unix.EACCES, unix.EPERM:
			return nil, fmt.Errorf("%s: %w", e.Args[0], ErrPermission)
		}
		return nil, fmt.Errorf("%w: exec %s: %v", ErrSetup, e.Args[0], syscall.Errno(rep.errno))
	}
	l.started = time.Now()
	if e.Timeout > 0 {
		go l.enforceTimeout(e.Timeout)
	}
	return l, nil
}

// launchMessage encodes a launch: header, then NUL-terminated strings.
func launchMessage(workdir string, argv, env, cands []string) ([]byte, error) {
	if len(argv)+len(env)+len(cands) > launchMaxStrings {
		return nil, fmt.Errorf("%w: more than %d arguments and environment entries", ErrInvalidSpec, launchMaxStrings)
	}
	b := make([]byte, unsafe.Sizeof(launchHeader{}), 4096)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(argv)))
	binary.NativeEndian.PutUint32(b[4:], uint32(len(env)))
	binary.NativeEndian.PutUint32(b[8:], uint32(len(cands)))
	for _, list := range [][]string{{workdir}, argv, env, cands} {
		for _, s := range list {
			for i := 0; i < len(s); i++ {
				if s[i] == 0 {
					return nil, fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidSpec, s)
				}
			}
			b = append(b, s...)
			b = append(b, 0)
		}
	}
	if len(b) > launchMaxMessage {
		return nil, fmt.Errorf("%w: arguments and environment exceed %d bytes", ErrInvalidSpec, launchMaxMessage)
	}
	return b, nil
}

// readReport reads one launchReport, and the descriptor attached to it.
func (l *Launched) readReport() (tag, value int32, fd int, err error) {
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	raw, err := l.status.SyscallConn()
	if err != nil {
		return 0, 0, -1, err
	}
	var n, oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b[:], oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, 0, -1, fmt.Errorf("read the sandbox's report: %w", err)
	}
	if n == 0 {
		return 0, 0, -1, errEOF
	}
	fd = -1
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
				fd = fds[0]
			}
		}
	}
	return int32(binary.NativeEndian.Uint32(b[0:])), int32(binary.NativeEndian.Uint32(b[4:])), fd, nil
}

var errEOF = errors.New("end of reports")

// Signal sends sig to the command. SIGKILL takes everything the command
// started with it: its tracking group (any session, any process group),
// or without one its process group (the command is a session leader).
func (l *Launched) Signal(sig syscall.Signal) error {
	l.mu.Lock()
	if l.pidfd < 0 {
		l.mu.Unlock()
		return unix.ESRCH
	}
	if sig == unix.SIGKILL {
		l.killed = true
		if l.hostPid > 0 && unix.PidfdSendSignal(l.pidfd, 0, nil, 0) == nil {
			// Still alive, so its number still names its group.
			unix.Kill(-l.hostPid, unix.SIGKILL)
		}
	}
	err := unix.PidfdSendSignal(l.pidfd, sig, nil, 0)
	l.mu.Unlock()
	if sig == unix.SIGKILL && l.track != nil {
		l.track.KillAll()
	}
	return err
}

// pidOfPidfd reads the pid a pidfd refers to, in tine's pid namespace.
func pidOfPidfd(fd int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			return pid
		}
	}
	return 0
}

func (l *Launched) enforceTimeout(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		l.mu.Lock()
		l.timedOut = true
		l.mu.Unlock()
		l.Signal(unix.SIGKILL)
	case <-l.done:
	}
}

// Wait waits for the command and returns its outcome.
func (l *Launched) Wait() (*Outcome, error) {
	var status unix.WaitStatus
	gotStatus := false
	for !gotStatus {
		tag, value, fd, err := l.readReport()
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			break // PID 1 died: the sandbox was destroyed
		}
		if tag == launchExitStatus {
			status, gotStatus = unix.WaitStatus(value), true
		}
	}
	close(l.done)
	l.mu.Lock()
	l.status.Close()
	if l.pidfd >= 0 {
		unix.Close(l.pidfd)
		l.pidfd = -1
	}
	timedOut, killed := l.timedOut, l.killed
	l.mu.Unlock()
	if l.track != nil {
		// Killed: nothing it started survives it. Ended by itself: what it
		// left running in the background (a server it started) stays, as
		// the sandbox's.
		if timedOut || killed || !gotStatus {
			l.track.KillAll()
			l.track.Remove()
		} else {
			l.track.Release()
		}
	}

	o := &Outcome{Rootless: l.sb.plan.Rootless, Cgroup: "none"}
	o.Phases.Run = ms(time.Since(l.started))
	switch {
	case timedOut:
		o.ExitCode, o.Reason = 124, "timeout"
	case !gotStatus:
		o.ExitCode, o.Reason, o.Signal = 137, "signal", int(unix.SIGKILL)
	case status.Signaled():
		o.ExitCode, o.Reason, o.Signal = 128+int(status.Signal()), "signal", int(status.Signal())
	default:
		o.ExitCode, o.Reason = status.ExitStatus(), "exit"
	}
	if g := l.sb.init.group; g != nil {
		o.Cgroup = hostCgroupVersion()
		// Only a SIGKILL can be the OOM killer's: the count is read then.
		if o.ExitCode == 137 && !timedOut && g.OOMKills() > l.oomBefore {
			o.Reason = "oom"
		}
	}
	return o, nil
}

// TTY returns nil: a launched command has no terminal (see Exec).
func (l *Launched) TTY() *os.File { return nil }
