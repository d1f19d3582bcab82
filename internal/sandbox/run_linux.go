package sandbox

// The parent side: create the cgroup, clone the namespaced child, place it,
// release it, learn whether the command started, wait, and clean up.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/tine-run/tine/internal/kernel/caps"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/landlock"
	"github.com/tine-run/tine/internal/kernel/osthread"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"golang.org/x/sys/unix"
)

// hostOnce caches what does not change while tine runs.
var hostOnce = sync.OnceValues(func() (*host, error) {
	h := &host{landlockABI: landlock.ABI()}
	cg, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	h.cgroup = cg
	keep, err := caps.Mask(caps.Default)
	if err != nil {
		return nil, err
	}
	h.keepCaps, h.dropCaps = keep, caps.ToDrop(keep)
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(StageDir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", StageDir, err)
		}
		// A tine that was SIGKILLed leaves its cgroups behind: reap them,
		// in the background (it reads every owner's /proc entry), while
		// this process starts its own sandbox; Wait waits for it.
		h.reaped = make(chan struct{})
		go func() {
			defer close(h.reaped)
			cg.Reap()
		}()
	}
	return h, nil
})

type host struct {
	cgroup      *cgroup.Host
	landlockABI int
	keepCaps    uint64
	dropCaps    []int
	// reaped is closed once the start's reap of dead tines' cgroups is
	// done (nil: none was started).
	reaped chan struct{}
}

// awaitReap waits for the reap hostOnce started, so that a one-shot tine
// does not exit in the middle of it.
func awaitReap() {
	if h, err := hostOnce(); err == nil && h.reaped != nil {
		<-h.reaped
	}
}

// Process is a started sandbox.
type Process struct {
	plan    *Plan
	pid     int
	pidfd   int
	group   *cgroup.Group
	statusR *os.File
	started time.Time
	phases  Phases

	// tty is the master of the command's pseudo-terminal, when it has one.
	tty *os.File
	// launchFD is a live sandbox's end of its PID 1's launch socket.
	launchFD int
	// commitFD is a detached sandbox's end of the release socket, until
	// Commit.
	commitFD int
	// cmdPid is the command's pid as the reaper saw it: for an exec, a
	// host pid, which also names the command's process group.
	cmdPid int

	// sandbox is the live sandbox an exec runs in (nil for a sandbox's own
	// PID 1); oomBefore its OOM-kill count when the exec started.
	sandbox   *Sandbox
	oomBefore int64
	// track holds everything an exec's command starts (see Launched).
	track *cgroup.Group

	mu       sync.Mutex
	timedOut bool
	killed   bool
	done     chan struct{} // closed when Wait has the exit: stops the timeout

	waitOnce sync.Once
	exited   chan struct{} // closed once the process was reaped
	ws       unix.WaitStatus
	ru       unix.Rusage
	waitErr  error
}

// Start builds the plan for s and starts the sandbox. It returns once the
// command has been exec'd, or with the reason it could not be: ErrNotFound
// (exit 127), ErrPermission (126), ErrSetup, ErrInvalidSpec.
func Start(s *Spec) (*Process, error) {
	if len(s.Args) == 0 {
		return nil, fmt.Errorf("%w: no command given", ErrInvalidSpec)
	}
	t0 := time.Now()
	rootless := os.Geteuid() != 0
	// The host's facts (hostOnce: the cgroup hierarchies, the capability
	// mask, the reap) and then the sandbox's cgroup are made on a goroutine
	// of their own while this one makes the plan (whose host view checks
	// the freshness of its cache, ~170 lstats): neither needs the other.
	hc := make(chan hostStart, 1)
	go beginHost(s, rootless, hc)
	plan, err := NewPlan(s, rootless)
	hs := <-hc
	if err != nil || hs.err != nil {
		discardGroup(hs.group)
		if err == nil {
			err = hs.err
		}
		return nil, err
	}
	return startPlan(hs.h, plan, t0, hs.group)
}

// hostStart is what beginHost hands Start: the host, or why it is not
// usable, and the sandbox's cgroup being made (nil: none to make).
type hostStart struct {
	h     *host
	err   error
	group chan groupResult
}

// beginHost sends Start the host once hostOnce has it, then makes s's
// cgroup (as beginGroup does, on this goroutine: it is one already).
func beginHost(s *Spec, rootless bool, hc chan<- hostStart) {
	h, err := hostOnce()
	if err != nil || rootless || h.cgroup.Version == cgroup.None {
		hc <- hostStart{h: h, err: err}
		return
	}
	c := make(chan groupResult, 1)
	hc <- hostStart{h: h, group: c}
	c <- createGroup(h, s)
}

// startPlan starts a sandbox from a plan; tests use it to run plans with a
// wall taken away, to prove the next one holds. group is the sandbox's
// cgroup being made (beginGroup), or nil to begin it here.
func startPlan(h *host, plan *Plan, t0 time.Time, group chan groupResult) (*Process, error) {
	s, rootless, userns := plan.Spec, plan.Rootless, plan.UserNS
	// The group is removed on any failure; deferred first, so that it
	// runs after the undos below (which kill the child in it).
	groupc, started := group, false
	defer func() {
		if !started {
			discardGroup(groupc)
		}
	}()
	stdio, err := stdioFDs(s.Stdio)
	if err != nil {
		return nil, err
	}
	if rootless && (s.Limits != cgroup.Limits{}) {
		return nil, fmt.Errorf("%w: --memory, --cpus and --pids need cgroups, which tine drives only as root (run as root, or drop the limits)", ErrRootlessOnly)
	}
	mode := s.Seccomp
	if s.Zygote && mode != seccomp.Unconfined {
		mode = seccomp.Zygote
	}
	in, err := h.wallInputs(mode, userns)
	if err != nil {
		return nil, err
	}
	in.asRoot = userns && !rootless
	in.narrowCaps(s.Capabilities)
	for _, f := range s.ExtraFiles {
		in.extra = append(in.extra, int(f.Fd()))
	}
	if s.CgroupFS && !rootless {
		in.cgroupFS = cgroupFSMounts(h.cgroup)
	}
	if in.ruleset >= 0 && s.Zygote {
		unix.Close(in.ruleset) // requests restrict themselves (RequestWalls)
		in.ruleset = -1
	}
	if in.ruleset >= 0 {
		defer unix.Close(in.ruleset)
	}
	// The bind sources, held from here to the child's mounts; the child
	// has its own copies once cloned.
	if in.binds, err = openBindSources(plan); err != nil {
		return nil, err
	}
	in.nbinds = len(plan.Binds)
	defer func() {
		for _, fd := range in.binds {
			unix.Close(fd)
		}
	}()
	pr := &Process{plan: plan, pidfd: -1, launchFD: -1, commitFD: -1, done: make(chan struct{}), exited: make(chan struct{})}
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()

	// The network namespace is the costliest one to create (~0.8 ms here):
	// make it on another thread while this one prepares the rest.
	var netns chan netnsResult
	if !userns {
		netns = make(chan netnsResult, 1)
		if s.NetNS != nil {
			fd, err := unix.FcntlInt(s.NetNS.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				err = fmt.Errorf("%w: the network namespace given: %v", ErrSetup, err)
			}
			netns <- netnsResult{fd: fd, err: err}
		} else {
			go func() { netns <- newNetNS() }()
		}
		undo = append(undo, func() {
			if r := <-netns; r.fd >= 0 {
				unix.Close(r.fd)
			}
		})
	}

	cgVersion := cgroup.None
	if !rootless {
		cgVersion = h.cgroup.Version
	}
	if cgVersion == cgroup.None && !rootless && (s.Limits != cgroup.Limits{}) {
		return nil, fmt.Errorf("%w: %s", cgroup.ErrUnavailable, h.cgroup.Why)
	}
	// The cgroup is made on another thread too, while this one prepares
	// the rest; the child is born in it (v2) or moves itself in as its
	// first step (v1, see cgroup.Group.JoinFiles): either way no process
	// is moved by another, which would wait on the kernel's global cgroup
	// lock (an RCU grace period after a quiet spell, ≈10 ms here).
	if groupc == nil {
		groupc = h.beginGroup(s, rootless)
	}
	ch, err := newChannels()
	if err != nil {
		return nil, err
	}
	defer ch.closeParentEnds()
	undo = append(undo, func() { ch.statusR.Close() })
	ch.wire(&in, stdio)
	if len(plan.Argv) == 0 {
		// A live sandbox: its PID 1 launches commands sent on this socket.
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("launch socket: %w", err)
		}
		pr.launchFD, in.launch = pair[0], pair[1]
		defer unix.Close(pair[1])
		// pr owns pair[0] now: cleanup closes it, once.
		undo = append(undo, pr.cleanup)
	}

	flags := uint64(unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	join := joinedNamespaces(s)
	for _, j := range join {
		flags &^= uint64(j.nstype)
	}
	if userns {
		// A namespace made by the parent would belong to the host's user
		// namespace, where the child cannot mount sysfs for it.
		flags |= unix.CLONE_NEWUSER | unix.CLONE_NEWNET
	}
	if rootless {
		flags |= unix.CLONE_NEWCGROUP // no cgroup to be placed in first
	}
	cgroupFD := -1
	if groupc != nil {
		r := <-groupc
		groupc <- r // for discardGroup, if the start fails
		if r.err != nil {
			return nil, r.err
		}
		pr.group = r.group
		switch {
		case r.group.FD() >= 0:
			cgroupFD = r.group.FD()
			flags |= unix.CLONE_NEWCGROUP
		default:
			// v1: it joins first thing, then enters a cgroup namespace
			// rooted there once its mounts are done.
			if in.join, err = r.group.JoinFiles(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrSetup, err)
			}
			defer closeAll(in.join)
			in.newCgroupNS = true
		}
	}
	var hop *nestedHop
	if s.ForkOf != nil {
		hop = newNestedHop(flags, ch.childRelease)
	}
	if lr := plan.lateRoot; lr != nil {
		// A spare: its stage first, in a mount namespace of its own.
		if err := lr.mountStage(); err != nil {
			return nil, err
		}
		defer lr.close()
	}
	pg, err := compileBoot(plan, in, hop)
	if err != nil {
		return nil, err
	}
	pr.phases.Plan = ms(time.Since(t0))
	t1 := time.Now()
	nestIn, cloneFlags := -1, flags
	if s.ForkOf != nil {
		release, err := s.ForkOf.use()
		if err != nil {
			return nil, err
		}
		defer release()
		nestIn = s.ForkOf.init.pidfd
		// The hop's clone makes the namespaces (the cgroup one too, with
		// cgroup v2: rooted where the first process was born).
		pg.hop.setFlags(flags)
		cloneFlags = 0
	}
	var pid, pidfd int
	if len(join) > 0 {
		pid, pidfd, err = cloneInNamespaces(pg, cloneFlags, cgroupFD, join)
	} else {
		pid, pidfd, err = cloneOnParentThread(pg, cloneFlags, cgroupFD, nestIn)
	}
	pg.residentMem.release() // PID 1 has its own copy
	runtime.KeepAlive(s)
	ch.closeChildEnds()
	if err == nil && pg.hop != nil {
		pid, pidfd, err = pg.hop.receive(pid, pidfd, ch.releaseFD)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: clone: %v", ErrSetup, err)
	}
	pr.pid, pr.pidfd, pr.statusR = pid, pidfd, ch.statusR
	undo = append(undo, func() { pr.kill(); pr.reapQuietly() })

	if userns {
		if err := writeIDMaps(pid, rootless, s.ForkOf != nil); err != nil {
			return nil, err
		}
	}
	if s.spare != nil {
		if plan.buildsAhead() {
			// Its /proc, /dev and /sys while it waits for its root.
			if err := ch.release(nil); err != nil {
				return nil, err
			}
		}
		if err := s.spare.await(s, pr, plan.lateRoot); err != nil {
			return nil, err
		}
		t1 = time.Now() // the start's phase counts from the completion
	}
	var rights []byte
	if !userns {
		r := <-netns
		netns <- netnsResult{fd: -1} // the undo above finds nothing more to close
		if r.err != nil {
			return nil, r.err
		}
		defer unix.Close(r.fd)
		rights = unix.UnixRights(r.fd)
	}
	if err := ch.release(rights); err != nil {
		// The child is gone: its own report says why better than EPIPE.
		if rerr := ch.awaitExec(pg, pr, s.Args); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	if lr := plan.lateRoot; lr != nil {
		lr.close() // while PID 1 finishes (its root is attached)
	}
	if s.TTY {
		pr.tty = ch.receiveTTY()
		undo = append(undo, func() {
			if pr.tty != nil {
				pr.tty.Close()
			}
		})
	}
	if err := ch.awaitExec(pg, pr, s.Args); err != nil {
		return nil, err
	}
	if len(plan.Argv) > 0 && !s.Detach {
		pr.readCmdPid()
	}
	if s.Detach {
		pr.commitFD, ch.releaseFD = ch.releaseFD, -1
	}
	pr.phases.Start = ms(time.Since(t1))
	pr.started = time.Now()
	undo, started = nil, true
	if s.Timeout > 0 {
		go pr.enforceTimeout(s.Timeout)
	}
	return pr, nil
}

type groupResult struct {
	group *cgroup.Group
	err   error
}

// beginGroup starts making the cgroup of a sandbox of s on another
// goroutine; nil when it gets none (rootless, or no usable hierarchy).
func (h *host) beginGroup(s *Spec, rootless bool) chan groupResult {
	if rootless || h.cgroup.Version == cgroup.None {
		return nil
	}
	c := make(chan groupResult, 1)
	go func() { c <- createGroup(h, s) }()
	return c
}

// discardGroup removes the group beginGroup made, once it is made.
func discardGroup(c chan groupResult) {
	if c == nil {
		return
	}
	if r := <-c; r.group != nil {
		r.group.Kill()
		r.group.Remove()
	}
}

// createGroup makes a sandbox's cgroup with its limits, where its spec
// says (Spec.CgroupPath) or under tine's parent. A live or detached
// sandbox's group is long-lived: it can be paused (frozen).
func createGroup(h *host, s *Spec) groupResult {
	lim, longLived := s.limits(true), len(s.Args) == 0 || s.Detach
	var g *cgroup.Group
	var err error
	if s.CgroupPath != "" {
		g, err = h.cgroup.CreateAt(s.CgroupPath, lim, longLived)
	} else {
		g, err = h.cgroup.Create(cgroup.NewName(), lim, longLived)
	}
	return groupResult{g, err}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// narrowCaps keeps only list (Spec.Capabilities, checked by Validate) when
// it is not nil.
func (in *inputs) narrowCaps(list []string) {
	if list != nil {
		in.keepCaps, _ = caps.Mask(list)
		in.dropCaps = caps.ToDrop(in.keepCaps)
	}
}

// wallInputs returns what every child needs for its walls: the seccomp
// program, the capabilities to keep and drop, and a fresh Landlock ruleset
// (the caller closes in.ruleset when it is >= 0).
func (h *host) wallInputs(mode seccomp.Mode, userns bool) (inputs, error) {
	filter, err := seccomp.Program(mode)
	if err != nil {
		return inputs{}, fmt.Errorf("seccomp policy %q: %w", mode, err)
	}
	in := inputs{ruleset: -1, target: -1, launch: -1, filter: filter, keepCaps: h.keepCaps, dropCaps: h.dropCaps, userns: userns, landlockABI: h.landlockABI}
	if h.landlockABI > 0 {
		if in.ruleset, err = landlock.NewRuleset(h.landlockABI); err != nil {
			return inputs{}, err
		}
	}
	return in, nil
}

// wire gives the child its ends of the channels and its stdio (checked
// by stdioFDs).
func (ch *channels) wire(in *inputs, stdio [3]int) {
	in.errW, in.sync, in.statusW = int(ch.errW.Fd()), ch.childRelease, int(ch.statusW.Fd())
	in.stdio = stdio
}

// channels are the pipes and socket between the parent and a child.
type channels struct {
	// errR reads the child's failure report; EOF means the command was
	// exec'd (the write end is close-on-exec) or a live sandbox is ready.
	errR, errW *os.File
	// The release socket: the parent's end releases the child (and can hand
	// it the network namespace); the child sees EOF if the parent dies.
	releaseFD, childRelease int
	// statusR receives the command's wait status from its reaper.
	statusR, statusW *os.File
}

func newChannels() (*channels, error) {
	ch := &channels{releaseFD: -1, childRelease: -1}
	var err error
	if ch.errR, ch.errW, err = blockingPipe(); err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		ch.closeParentEnds()
		ch.closeChildEnds()
		return nil, fmt.Errorf("release socket: %w", err)
	}
	ch.releaseFD, ch.childRelease = pair[0], pair[1]
	if ch.statusR, ch.statusW, err = blockingPipe(); err != nil {
		ch.closeParentEnds()
		ch.closeChildEnds()
		return nil, err
	}
	return ch, nil
}

// blockingPipe is os.Pipe without O_NONBLOCK: the parent's reads of the
// child's reports (its exec, its command's pid, its status) block in
// read(2), and the child's write wakes the reading thread itself, not Go's
// network poller, which then has to wake a thread to run the reader (two
// hand-offs on a loaded host instead of one). Nothing closes these to
// abort a read: each read ends with the child's write or its exit.
func blockingPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// closeChildEnds closes the parent's copies of the child's ends, once the
// child holds its own.
func (ch *channels) closeChildEnds() {
	ch.errW.Close()
	if ch.childRelease >= 0 {
		unix.Close(ch.childRelease)
		ch.childRelease = -1
	}
	if ch.statusW != nil {
		ch.statusW.Close()
	}
}

// closeParentEnds closes what the parent needs only while starting; the
// status pipe's read end stays with the Process.
func (ch *channels) closeParentEnds() {
	ch.errR.Close()
	if ch.releaseFD >= 0 {
		unix.Close(ch.releaseFD)
		ch.releaseFD = -1
	}
}

// release lets the child go on, handing it the descriptors in rights.
func (ch *channels) release(rights []byte) error {
	if err := unix.Sendmsg(ch.releaseFD, []byte{1}, rights, nil, 0); err != nil {
		return fmt.Errorf("%w: release the child: %v", ErrSetup, err)
	}
	return nil
}

// receiveTTY receives the pseudo-terminal master the child allocated; nil
// if the child failed first (awaitExec then reports why).
func (ch *channels) receiveTTY() *os.File {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(ch.releaseFD, b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || oobn == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil
	}
	return os.NewFile(uintptr(fds[0]), "/dev/ptmx")
}

// awaitExec waits until the child exec'd the command (or, for a live
// sandbox, is ready) and turns a failure report into an error.
func (ch *channels) awaitExec(pg *program, pr *Process, argv []string) error {
	var rep childReport
	n, _ := readFull(ch.errR, (*[unsafe.Sizeof(rep)]byte)(unsafe.Pointer(&rep))[:])
	runtime.KeepAlive(pg)
	if n != int(unsafe.Sizeof(rep)) {
		return nil
	}
	failure := pg.describe(rep)
	if rep.index != failExec {
		return failure
	}
	// The command's reaper exits by itself; wait so nothing lingers.
	pr.reapQuietly()
	switch syscall.Errno(rep.errno) {
	case unix.ENOENT, unix.ENOTDIR:
		return fmt.Errorf("%s: %w", argv[0], ErrNotFound)
	case unix.EACCES, unix.EPERM:
		return fmt.Errorf("%s: %w", argv[0], ErrPermission)
	}
	return fmt.Errorf("%w: exec %s: %v", ErrSetup, argv[0], failure)
}

// stdioFDs returns the descriptors for the command's stdio: the given
// files, or tine's own; none may give a way into the host (checkStdio).
func stdioFDs(files [3]*os.File) ([3]int, error) {
	var fds [3]int
	for i, f := range files {
		fds[i] = i
		if f != nil {
			fds[i] = int(f.Fd())
		}
	}
	return fds, checkStdio(fds)
}

type netnsResult struct {
	fd  int
	err error
}

// newNetNS creates a network namespace with lo up and returns a descriptor
// for it. It is made on a throwaway thread, so no Go code ever runs in the
// new namespace again.
func newNetNS() (r netnsResult) {
	osthread.Throwaway(func() { r = netnsOnThisThread() })
	return r
}

func netnsOnThisThread() netnsResult {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return netnsResult{fd: -1, err: fmt.Errorf("%w: create network namespace: %v", ErrSetup, err)}
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netnsResult{fd: -1, err: fmt.Errorf("%w: open network namespace: %v", ErrSetup, err)}
	}
	if err := loopbackUp(); err != nil {
		unix.Close(fd)
		return netnsResult{fd: -1, err: err}
	}
	return netnsResult{fd: fd}
}

// loopbackUp brings lo up in the calling thread's network namespace.
func loopbackUp() error {
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: bring up lo: %v", ErrSetup, err)
	}
	defer unix.Close(sock)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%w: bring up lo: %v", ErrSetup, err)
	}
	return nil
}

// The sandbox's PID 1 gets SIGKILL when the *thread* that cloned it exits
// (PR_SET_PDEATHSIG follows the parent thread), so clones happen on one
// thread that stays locked for the life of the process: Go ends threads
// whose goroutine exits while locked, as newNetNS's do.
var (
	parentThreadOnce sync.Once
	cloneRequests    chan cloneRequest
)

type cloneRequest struct {
	pg       *program
	flags    uint64
	cgroupFD int
	nestIn   int
	reply    chan cloneResult
}

type cloneResult struct {
	pid, pidfd int
	err        error
}

// nestIn, when >= 0, is the pidfd of a sandbox's PID 1 whose pid namespace
// the clone's new one nests in (Spec.ForkOf).
func cloneOnParentThread(pg *program, flags uint64, cgroupFD, nestIn int) (pid, pidfd int, err error) {
	parentThreadOnce.Do(func() {
		cloneRequests = make(chan cloneRequest)
		go func() {
			runtime.LockOSThread() // never unlocked
			for req := range cloneRequests {
				pid, pidfd, err := cloneChild(req.pg, req.flags, req.cgroupFD, req.nestIn)
				req.reply <- cloneResult{pid, pidfd, err}
			}
		}()
	})
	reply := make(chan cloneResult, 1)
	cloneRequests <- cloneRequest{pg, flags, cgroupFD, nestIn, reply}
	r := <-reply
	return r.pid, r.pidfd, r.err
}

// joinedNS is a namespace a sandbox joins instead of making one.
type joinedNS struct {
	f      *os.File
	nstype int
}

func joinedNamespaces(s *Spec) []joinedNS {
	var join []joinedNS
	if s.IPCNS != nil {
		join = append(join, joinedNS{s.IPCNS, unix.CLONE_NEWIPC})
	}
	if s.UTSNS != nil {
		join = append(join, joinedNS{s.UTSNS, unix.CLONE_NEWUTS})
	}
	return join
}

// cloneInNamespaces clones the child from a thread of its own that has
// entered the namespaces first, so the child is born in them (its mqueue
// mount belongs to the IPC namespace it joined). The thread is never given
// back to Go: its goroutine ends locked, and the runtime ends the thread,
// namespaces and all. Only a detached sandbox may do this: a parent-death
// signal would fire when that thread ends.
func cloneInNamespaces(pg *program, flags uint64, cgroupFD int, join []joinedNS) (pid, pidfd int, err error) {
	// On a thread Go throws away, never the main one: /proc/self is the
	// main thread's view, and a main thread that joined a sandbox's mount
	// namespace would stay there (Go wedges it rather than ending it).
	osthread.Throwaway(func() {
		for _, j := range join {
			if err = unix.Setns(int(j.f.Fd()), j.nstype); err != nil {
				err = fmt.Errorf("%w: join namespace %s: %v", ErrSetup, j.f.Name(), err)
				return
			}
		}
		pid, pidfd, err = cloneChild(pg, flags, cgroupFD, -1)
	})
	return pid, pidfd, err
}

// cloneSandbox clones a sandbox's first process (PID 1, or an exec's
// reaper) with clone3, as a copy of tine's memory. It must not share it
// (CLONE_VM): the OOM killer kills every process sharing the victim's
// memory, so an OOM in a sandbox that picked its PID 1 would take tine,
// or the daemon with all its sandboxes, down with it. (The command's own
// process may share PID 1's copy for the moment until its execve: see
// forkCommand.)
func cloneSandbox(args *cloneArgs, pg *program) (uintptr, syscall.Errno) {
	r, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if errno == 0 && r == 0 {
		childMain(pg) // the child: never returns
	}
	return r, errno
}

// cloneChild clones the child with all signals blocked (so no Go signal
// handler can run in it) and runs childMain there; nestIn, when >= 0, is
// the pidfd whose pid namespace the child's new one nests in.
func cloneChild(pg *program, flags uint64, cgroupFD, nestIn int) (pid, pidfd int, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all, old := ^uint64(0), uint64(0)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	var pidfd32 int32 = -1
	args := cloneArgs{flags: flags | unix.CLONE_PIDFD, pidfd: uint64(uintptr(unsafe.Pointer(&pidfd32))), exitSignal: uint64(unix.SIGCHLD)}
	if cgroupFD >= 0 {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(cgroupFD)
	}
	leave := func() {}
	if nestIn >= 0 {
		if leave, err = enterPidNSForChildren(nestIn); err != nil {
			unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
			return 0, -1, err
		}
	}
	r, errno := cloneSandbox(&args, pg)
	leave()
	if errno == unix.ENOSYS && cgroupFD < 0 && nestIn < 0 {
		// Kernels before 5.3: plain clone (a copy of tine's memory), no pidfd.
		pidfd32 = -1
		r, _, errno = unix.RawSyscall6(unix.SYS_CLONE, uintptr(flags)|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if errno == 0 && r == 0 {
			childMain(pg) // the child: never returns
		}
	}
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if errno != 0 {
		return 0, -1, errno
	}
	return int(r), int(pidfd32), nil
}

// cloneArgs is struct clone_args (clone3(2)), up to the cgroup member.
type cloneArgs struct {
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// writeIDMaps maps the sandbox's users: a rootless sandbox's root to the
// user who runs tine (only one id can be mapped without privilege); as
// root, ids 0 to UserNSSize-1 to the unprivileged host range UserNSRange,
// so the sandbox's users (apt's _apt, nobody, ...) exist and setgroups
// works.
//
// identity maps every id to itself (Spec.ForkOf).
func writeIDMaps(pid int, rootless, identity bool) error {
	dir := fmt.Sprintf("/proc/%d/", pid)
	uidMap, gidMap := fmt.Sprintf("0 %d 1", os.Geteuid()), fmt.Sprintf("0 %d 1", os.Getegid())
	switch {
	case identity:
		uidMap, gidMap = "0 0 4294967295", "0 0 4294967295"
	case !rootless:
		uid, gid := UserNSRange()
		uidMap, gidMap = fmt.Sprintf("0 %d %d", uid, UserNSSize), fmt.Sprintf("0 %d %d", gid, UserNSSize)
	}
	if err := os.WriteFile(dir+"uid_map", []byte(uidMap), 0); err != nil {
		return fmt.Errorf("%w: map user: %v", ErrSetup, err)
	}
	if rootless {
		if err := os.WriteFile(dir+"setgroups", []byte("deny"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: deny setgroups: %v", ErrSetup, err)
		}
	}
	if err := os.WriteFile(dir+"gid_map", []byte(gidMap), 0); err != nil {
		return fmt.Errorf("%w: map group: %v", ErrSetup, err)
	}
	return nil
}

// Signal forwards sig to the sandbox's PID 1 (or an exec's reaper), which
// passes it to the command. SIGKILL ends the whole sandbox of a one-shot
// run, and an exec's command with its process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if sig == unix.SIGKILL {
		p.killGroup()
		if p.track != nil {
			p.mu.Lock()
			p.killed = true
			p.mu.Unlock()
			p.track.KillAll()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
	}
	select {
	case <-p.exited:
		return unix.ESRCH // reaped: the pid may belong to someone else now
	default:
	}
	return unix.Kill(p.pid, sig)
}

// kill ends the command (see Signal).
func (p *Process) kill() { p.Signal(unix.SIGKILL) }

// killGroup kills an exec's command and its process group (the command is
// a session leader). An exec's reaper lives outside the sandbox's pid
// namespace, so killing it alone would leave the command's children
// running; whatever left the group dies with the sandbox.
func (p *Process) killGroup() {
	if p.sandbox == nil || p.cmdPid <= 0 {
		return
	}
	select {
	case <-p.exited: // reaped: the group is gone, the number may be reused
	default:
		unix.Kill(-p.cmdPid, unix.SIGKILL)
	}
}

// untrack ends an exec's tracking group: killing what is in it, or
// leaving what the command left running to the sandbox.
func (p *Process) untrack(kill bool) {
	if p.track == nil {
		return
	}
	if kill {
		p.track.KillAll()
		p.track.Remove()
	} else {
		p.track.Release()
	}
}

// readCmdPid reads the pid the reaper reports first on the status pipe.
func (p *Process) readCmdPid() {
	var pid int32
	if n, _ := readFull(p.statusR, (*[4]byte)(unsafe.Pointer(&pid))[:]); n == 4 {
		p.cmdPid = int(pid)
	}
}

func (p *Process) enforceTimeout(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		p.mu.Lock()
		p.timedOut = true
		p.mu.Unlock()
		p.kill()
	case <-p.done:
	}
}

// waitExit reaps the process once, keeping its wait status and rusage.
func (p *Process) waitExit() {
	p.waitOnce.Do(func() {
		for {
			_, err := unix.Wait4(p.pid, &p.ws, unix.WALL, &p.ru)
			if err != unix.EINTR {
				p.waitErr = err
				break
			}
		}
		close(p.exited)
	})
}

func (p *Process) reapQuietly() {
	p.waitExit()
	p.cleanup()
}

func (p *Process) cleanup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	if p.statusR != nil {
		p.statusR.Close()
		p.statusR = nil
	}
	if p.launchFD >= 0 {
		unix.Close(p.launchFD)
		p.launchFD = -1
	}
}

// Wait waits for the command to end and returns the outcome. For a
// one-shot sandbox nothing of it remains when Wait returns; for an exec,
// the live sandbox stays.
func (p *Process) Wait() (*Outcome, error) {
	p.waitExit()
	if p.waitErr != nil {
		return nil, fmt.Errorf("wait for sandbox: %w", p.waitErr)
	}
	var rep exitReport
	n := p.readExit(&rep)
	return p.finish(rep, n, true)
}

// WaitAndLeave is Wait for a caller that exits right after it (tine run):
// it returns as soon as the command's status is known, and leaves the rest
// of the sandbox's end (its PID 1's exit, which tears the namespaces down,
// and the removal of its cgroup) to a cleanup process forked here, which
// outlives the caller (see leaveCleanup). The caller must exit soon: PID 1
// stays its child, a zombie, until then. When the command did not report
// its end (the sandbox was killed, or timed out), or for anything but a
// one-shot sandbox with a cgroup of no nested groups, it is Wait.
func (p *Process) WaitAndLeave() (*Outcome, error) {
	if p.sandbox != nil || p.group == nil || p.pidfd < 0 || p.tty != nil || p.plan.Spec.CgroupFS || len(p.plan.Argv) == 0 || p.plan.Spec.Detach {
		return p.Wait()
	}
	var rep exitReport
	n := p.readExit(&rep)
	p.mu.Lock()
	timedOut := p.timedOut
	p.mu.Unlock()
	if n != int(unsafe.Sizeof(rep)) || timedOut {
		p.waitExit()
		if p.waitErr != nil {
			return nil, fmt.Errorf("wait for sandbox: %w", p.waitErr)
		}
		return p.finish(rep, n, true)
	}
	o, err := p.finish(rep, n, false)
	if err != nil {
		return nil, err
	}
	if err := leaveCleanup(p.pidfd, p.group); err != nil {
		// No cleanup process: the end is this one's, as in Wait.
		p.waitExit()
		if err := p.group.Remove(); err != nil {
			return nil, err
		}
	}
	p.cleanup()
	return o, nil
}

// readExit reads the reaper's exitReport; it returns how many bytes came
// (fewer than its size: the reaper died before the command).
func (p *Process) readExit(rep *exitReport) int {
	n, _ := readFull(p.statusR, (*[unsafe.Sizeof(*rep)]byte)(unsafe.Pointer(rep))[:])
	return n
}

// finish makes the outcome from the reaper's report (n bytes of it) and,
// when reaped is true, PID 1's wait status and rusage, and removes a
// one-shot sandbox's cgroup (reaped only: otherwise PID 1 may still be in
// it).
func (p *Process) finish(rep exitReport, n int, reaped bool) (*Outcome, error) {
	close(p.done)
	o := &Outcome{Rootless: p.plan.Rootless, Phases: p.phases, Cgroup: "none"}
	o.Phases.Run = ms(time.Since(p.started))
	if reaped {
		o.CPUTimeMs = ms(time.Duration(p.ru.Utime.Nano() + p.ru.Stime.Nano()))
		p.cleanup()
	} else {
		o.CPUTimeMs = ms(time.Duration(rep.cpuUs) * time.Microsecond)
	}
	cmd := unix.WaitStatus(rep.status)
	p.mu.Lock()
	timedOut, killed := p.timedOut, p.killed
	p.mu.Unlock()
	full := n == int(unsafe.Sizeof(rep))
	switch {
	case timedOut:
		o.ExitCode, o.Reason = 124, "timeout"
	case !full:
		// The reaper died before the command did: killed from outside.
		o.ExitCode, o.Reason, o.Signal = 137, "signal", int(unix.SIGKILL)
		if ws := p.ws; reaped && ws.Signaled() {
			o.ExitCode, o.Signal = 128+int(ws.Signal()), int(ws.Signal())
		}
	case cmd.Signaled():
		o.ExitCode, o.Reason, o.Signal = 128+int(cmd.Signal()), "signal", int(cmd.Signal())
	default:
		o.ExitCode, o.Reason = cmd.ExitStatus(), "exit"
	}
	// Only a SIGKILL can be the OOM killer's: the count is read then, and
	// of the group's figures only those the outcome reports (ADR 0023).
	mayBeOOM := o.ExitCode == 137 && !timedOut
	switch {
	case p.group != nil:
		o.PeakMemoryBytes = p.group.PeakMemory()
		o.Cgroup = hostCgroupVersion()
		if mayBeOOM && p.group.OOMKills() > 0 {
			o.Reason = "oom"
		}
		// PID 1 is gone, so is its pid namespace: the group is empty, or
		// Remove kills what a stray process left in it.
		if reaped {
			if err := p.group.Remove(); err != nil {
				return nil, err
			}
		}
	case p.sandbox != nil && p.sandbox.init.group != nil:
		// (Its peak is the sandbox's, not this command's: not reported.)
		o.Cgroup = hostCgroupVersion()
		if mayBeOOM && p.sandbox.init.group.OOMKills() > p.oomBefore {
			o.Reason = "oom"
		}
	}
	p.untrack(timedOut || killed || !full)
	awaitReap()
	return o, nil
}

func hostCgroupVersion() string {
	h, err := hostOnce()
	if err != nil {
		return "none"
	}
	return h.cgroup.Version.String()
}

// Pid returns the host pid of the sandbox's PID 1.
func (p *Process) Pid() int { return p.pid }

// Commit tells a detached sandbox's PID 1 (Spec.Detach) that its caller
// recorded it: PID 1 exits, and the sandbox with it, if the caller dies
// (or returns) before it commits, so no container is left that nobody
// knows of.
func (p *Process) Commit() error {
	if p.commitFD < 0 {
		return errors.New("commit: not a detached sandbox, or committed already")
	}
	defer func() { unix.Close(p.commitFD); p.commitFD = -1 }()
	if _, err := unix.Write(p.commitFD, []byte{1}); err != nil {
		return fmt.Errorf("commit the sandbox: %w", err)
	}
	return nil
}

// TTY returns the master of the command's pseudo-terminal (nil without
// one). The caller copies to and from it, sets its size, and closes it.
func (p *Process) TTY() *os.File { return p.tty }

// Run starts s and waits for it.
func Run(s *Spec) (*Outcome, error) {
	p, err := Start(s)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

func readFull(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
