package sandbox

// Live forks of a forkable session's interpreter (ADR 0013): the
// interpreter forks once per child, and while its copies wait the daemon
// makes each child sandbox with the normal machinery (Spec.ForkOf: a user
// namespace owned by root with every id mapped to itself, a pid namespace
// nested in the parent's); each copy joins its child's namespaces from the
// descriptors of a ForkTarget, hops into the child's pid namespace (a
// clone sharing its address space), joins a cgroup made for it, and puts
// up the walls ForkWalls describes before it answers. The parent walls
// itself off from its copies (ForkParentScope).
// The kernel rules this rests on:
//   - setns(CLONE_NEWUSER) needs CAP_SYS_ADMIN in the target; a process
//     whose euid owns a user namespace has every capability in it when it
//     sits in that namespace's parent, whatever its own capabilities (the
//     owner rule of cap_capable). The copy is euid 0 in the host's user
//     namespace, the owner of the child's: it may join with its
//     capabilities dropped, and gets a full set there, which it drops.
//   - setns(CLONE_NEWPID) accepts only a descendant of the caller's pid
//     namespace (or its own), hence the nesting.
//   - a Landlock domain is for good and its rules are inodes: the parent
//     interpreter has none (ExecSpec.Forkable), each copy makes its own.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/landlock"
	"github.com/tine-run/tine/internal/kernel/seccomp"
)

// A ForkNamespace is a namespace a copy joins: its name in /proc/PID/ns
// and the type setns is given for it.
type ForkNamespace struct {
	Name string
	Type int
}

// openNamespaces opens the namespaces of the process pid, in order; whose
// names it in errors.
func openNamespaces(pid int, list []ForkNamespace, whose string) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/ns/"
	fds := make([]int, 0, len(list))
	for _, ns := range list {
		fd, err := unix.Open(dir+ns.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("%w: open %s %s namespace: %v", ErrSetup, whose, ns.Name, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// ForkNamespaces are the namespaces a copy joins, in the order of
// ForkTarget.FDs, with the type setns is given for each. The user
// namespace comes first (it is what lets the copy join the others) and
// the pid namespace last (it only applies to the copy's own children).
var ForkNamespaces = []ForkNamespace{
	{"user", unix.CLONE_NEWUSER}, {"mnt", unix.CLONE_NEWNS}, {"ipc", unix.CLONE_NEWIPC},
	{"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET}, {"cgroup", unix.CLONE_NEWCGROUP},
	{"pid", unix.CLONE_NEWPID},
}

// EarlyForkNamespaces and LateForkNamespaces split ForkNamespaces for a
// spare (Spare.EarlyForkTarget): a copy can join the early ones, hop into
// the pid namespace and join its group while the spare completes; the
// mount namespace (PID 1 pivots its root after its release) and, on
// cgroup v1, the cgroup namespace (PID 1 unshares one then) come after.
var (
	EarlyForkNamespaces = []ForkNamespace{
		{"user", unix.CLONE_NEWUSER}, {"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS},
		{"net", unix.CLONE_NEWNET}, {"pid", unix.CLONE_NEWPID},
	}
	LateForkNamespaces = []ForkNamespace{
		{"mnt", unix.CLONE_NEWNS}, {"cgroup", unix.CLONE_NEWCGROUP},
	}
)

// ErrNotForkable: the sandbox cannot hold a forkable session.
var ErrNotForkable = errors.New("this sandbox cannot hold a forkable session")

// canForkFrom says whether a forkable interpreter can run in sb: its
// copies must be euid 0 in the host's user namespace (so not a user
// namespace sandbox, nor a fork child itself), and sb needs a cgroup
// (children are placed by join descriptors, cgroup.Group.JoinFiles) and Default seccomp
// (Session is Default plus setns: it would loosen Strict).
func (sb *Sandbox) canForkFrom() error {
	p := sb.plan
	switch {
	case p.Spec.ForkOf != nil:
		return fmt.Errorf("%w: it is itself a live fork's child (forks of forks are not built; fork the parent again)", ErrNotForkable)
	case p.UserNS:
		return fmt.Errorf("%w: it runs in a user namespace of its own (userns); a forked copy could not join a child sandbox from there", ErrNotForkable)
	case sb.init.group == nil:
		return fmt.Errorf("%w: it has no cgroup (tine drives cgroups only as root)", ErrNotForkable)
	case p.Spec.Seccomp != seccomp.Default:
		return fmt.Errorf("%w: its seccomp mode is %q; a forkable session's filter is default plus setns", ErrNotForkable, p.Spec.Seccomp)
	}
	return nil
}

// CanForkFrom is nil when a forkable session can run in sb (see
// ExecSpec.Forkable), else ErrNotForkable saying why.
func (sb *Sandbox) CanForkFrom() error { return sb.canForkFrom() }

// ForkTarget is what one copy needs to become a process of a fork child.
type ForkTarget struct {
	// FDs are the namespaces (ForkNamespaces' order), then the join files
	// (cgroup.Group.JoinFiles: tasks on v1) of the copy's tracking group. The caller passes them on and
	// closes them with Close. For a target made early (Spare.EarlyForkTarget)
	// they are the early namespaces' and the join files, and LateFDs the
	// late ones' (Late).
	FDs     []int
	LateFDs []int
	// Walls, of a target made early, are the child's ForkWalls, known
	// before it is complete (nil if they could not be made then): its
	// copy readies them while the child completes.
	Walls *RequestWalls
	sb    *Sandbox
	track *cgroup.Group
	early bool
}

// ForkTarget opens sb's namespaces and makes a tracking group for one copy
// (sb made with Spec.ForkOf).
func (sb *Sandbox) ForkTarget() (t *ForkTarget, err error) {
	if sb.plan.Spec.ForkOf == nil {
		return nil, fmt.Errorf("%w: not a live fork's child", ErrInvalidSpec)
	}
	release, err := sb.use()
	if err != nil {
		return nil, err
	}
	defer release()
	t, err = openForkTarget(sb.init.pid, ForkNamespaces, "the child's", sb.init.group)
	if err != nil {
		return nil, err
	}
	t.sb = sb
	return t, nil
}

// openForkTarget opens the namespaces nss of pid (a child's or a spare's
// PID 1; whose names it in errors) and makes the copy's tracking group in
// group: everything the copy starts is tracked, as for a launch.
func openForkTarget(pid int, nss []ForkNamespace, whose string, group *cgroup.Group) (t *ForkTarget, err error) {
	t = &ForkTarget{}
	defer func() {
		if err != nil {
			t.Discard()
		}
	}()
	if t.FDs, err = openNamespaces(pid, nss, whose); err != nil {
		return nil, err
	}
	if t.track, err = group.Track(fmt.Sprintf("exec-%d", execSeq.Add(1))); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	procs, err := t.track.JoinFiles()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	// On cgroup v1 the tracking group is in the pids hierarchy alone: the
	// copy joins the sandbox's own group in the others (memory, cpu,
	// cpuacct, freezer) first, or it would stay in the parent's there
	// (charged to its memory, frozen with it).
	if h, err := hostOnce(); err == nil && h.cgroup.Version == cgroup.V1 {
		top, err := group.JoinFiles()
		if err != nil {
			for _, fd := range procs {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		procs = append(top, procs...)
	}
	t.FDs = append(t.FDs, procs...)
	return t, nil
}

// Early says whether the target was made from a spare before it was
// completed (Spare.EarlyForkTarget): its copy joins in two frames.
func (t *ForkTarget) Early() bool { return t.early }

// Close closes the descriptors (once they were passed on).
func (t *ForkTarget) Close() {
	for _, fd := range append(t.FDs, t.LateFDs...) {
		unix.Close(fd)
	}
	t.FDs, t.LateFDs = nil, nil
}

// Discard closes the descriptors and kills what joined the group.
func (t *ForkTarget) Discard() {
	t.Close()
	if t.track != nil {
		t.track.KillAll()
		t.track.Remove()
		t.track = nil
	}
}

// Adopt returns the copy that joined the target's group, once it is ready.
func (t *ForkTarget) Adopt() (*Forked, error) {
	procs := t.track.Procs()
	if len(procs) != 1 {
		return nil, fmt.Errorf("%w: the forked copy's group holds %d processes, want 1", ErrSetup, len(procs))
	}
	pidfd, err := unix.PidfdOpen(procs[0], 0)
	if err != nil {
		return nil, fmt.Errorf("%w: the forked copy: %v", ErrSetup, err)
	}
	f := &Forked{sb: t.sb, pidfd: pidfd, track: t.track, exited: make(chan struct{})}
	if g := t.sb.init.group; g != nil {
		f.oomBefore = g.OOMKills()
	}
	t.track = nil
	return f, nil
}

// Forked is a copy of a forkable interpreter living in a fork child. Not
// a child of tine (its parent exited; the child sandbox's PID 1 reaps
// it), so its exit status is not known: Wait tells an OOM kill and a
// kill by tine from an exit.
type Forked struct {
	sb        *Sandbox
	track     *cgroup.Group
	oomBefore int64

	mu     sync.Mutex
	pidfd  int
	killed bool
	once   sync.Once
	exited chan struct{}
}

// Wait waits until the copy has exited.
func (f *Forked) Wait() (*Outcome, error) {
	f.once.Do(func() {
		fds := []unix.PollFd{{Fd: int32(f.pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		close(f.exited)
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	o := &Outcome{Cgroup: hostCgroupVersion(), ExitCode: 0, Reason: "exit"}
	if f.killed {
		o.ExitCode, o.Reason, o.Signal = 137, "signal", int(unix.SIGKILL)
	}
	if g := f.sb.init.group; g != nil && g.OOMKills() > f.oomBefore {
		o.ExitCode, o.Reason = 137, "oom"
	}
	if f.pidfd >= 0 {
		unix.Close(f.pidfd)
		f.pidfd = -1
		if f.killed {
			f.track.KillAll()
			f.track.Remove()
		} else {
			f.track.Release()
		}
	}
	return o, nil
}

// Signal sends sig to the copy; SIGKILL takes everything it started.
func (f *Forked) Signal(sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pidfd < 0 {
		return unix.ESRCH
	}
	if sig == unix.SIGKILL {
		f.killed = true
		defer f.track.KillAll()
	}
	return unix.PidfdSendSignal(f.pidfd, sig, nil, 0)
}

// ForkWalls are the walls a copy puts up in sb (a fork child) before it
// answers: those of an exec in sb — its Landlock rules (unscoped, as an
// exec's), its seccomp filter stacked on the Session filter the copy
// inherits, its capabilities.
func (sb *Sandbox) ForkWalls() (*RequestWalls, error) { return forkWalls(sb.plan, sb.h) }

// forkWalls are the ForkWalls of a fork child planned as p: a spare's
// are known before it is complete (its root changes none of them).
func forkWalls(p *Plan, h *host) (*RequestWalls, error) {
	if p.Spec.ForkOf == nil {
		return nil, fmt.Errorf("%w: not a live fork's child", ErrInvalidSpec)
	}
	filter, err := seccomp.Program(p.Spec.Seccomp)
	if err != nil {
		return nil, err
	}
	w := &RequestWalls{KeepCaps: h.keepCaps, DropCaps: h.dropCaps}
	if list := p.Spec.Capabilities; list != nil {
		var in inputs
		in.narrowCaps(list)
		w.KeepCaps, w.DropCaps = in.keepCaps, in.dropCaps
	}
	if len(filter) > 0 {
		w.Seccomp = unsafe.Slice((*byte)(unsafe.Pointer(&filter[0])), len(filter)*int(unsafe.Sizeof(unix.SockFilter{})))
	}
	if abi := h.landlockABI; abi > 0 {
		w.Landlock = &LandlockRuleset{Attr: landlock.UnscopedRulesetAttr(abi)}
		for _, r := range p.Landlock {
			w.Landlock.Rules = append(w.Landlock.Rules, LandlockRule{Path: r.Path, Rights: landlock.Supported(r.Rights, abi)})
		}
	}
	w.Syscalls = ForkSyscalls
	return w, nil
}

// ForkSyscalls are this architecture's numbers of the calls a forkable
// interpreter and its copies make through libc's syscall().
var ForkSyscalls = map[string]uintptr{
	"capset": unix.SYS_CAPSET, "seccomp": unix.SYS_SECCOMP, "setns": unix.SYS_SETNS,
	"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET,
	"landlock_add_rule":       unix.SYS_LANDLOCK_ADD_RULE,
	"landlock_restrict_self":  unix.SYS_LANDLOCK_RESTRICT_SELF,
}

// ForkParentScope is the Landlock layer a forkable interpreter puts up on
// itself after each fork (landlock.SignalScopeAttr; nil without Landlock
// ABI 6): its copies, forked before it, are outside its domain, so it can
// no longer signal, ptrace, or open the memory, environment or namespaces
// of theirs or any other process of the children (Landlock refuses a
// domain those of processes not nested in it). Without it the owner rule
// gives the parent, euid 0 in the host's user namespace, every capability
// in the children's.
func (sb *Sandbox) ForkParentScope() []byte { return landlock.SignalScopeAttr(sb.h.landlockABI) }

// ownPidNS is tine's own pid namespace, which the clone thread returns to
// after a nested clone.
var ownPidNS = sync.OnceValues(func() (int, error) {
	return unix.Open("/proc/self/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// enterPidNSForChildren makes the calling thread's next children be born
// in a pid namespace nested in that of the process nestIn (a pidfd) names;
// leave undoes it. Only the clone thread calls them, with nothing between
// them but the clone: a Go thread made from this one meanwhile would fail
// (CLONE_THREAD refuses a pid namespace for children other than the
// caller's own).
func enterPidNSForChildren(nestIn int) (leave func(), err error) {
	own, err := ownPidNS()
	if err != nil {
		return nil, fmt.Errorf("%w: open tine's pid namespace: %v", ErrSetup, err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETNS, uintptr(nestIn), unix.CLONE_NEWPID, 0); errno != 0 {
		return nil, fmt.Errorf("%w: enter the parent sandbox's pid namespace: %v", ErrSetup, errno)
	}
	return func() {
		if _, _, errno := unix.RawSyscall(unix.SYS_SETNS, uintptr(own), unix.CLONE_NEWPID, 0); errno != 0 {
			// Every later sandbox would be born in the wrong one.
			panic(fmt.Sprintf("sandbox: return to tine's pid namespace: %v", errno))
		}
	}, nil
}

// nestedHop makes a fork child's PID 1 in a pid namespace nested in the
// parent sandbox's. The kernel makes a new pid namespace only as a child
// of the creator's own (copy_pid_ns: the namespace for children must be
// the active one), and tine's is the host's. So the clone thread enters
// the parent's namespace for its children (enterPidNSForChildren) and
// clones a first process without new namespaces: it is born a member of
// the parent's pid namespace. That process clones again, with the
// sandbox's namespaces and CLONE_PARENT (PID 1 is tine's child, as any
// PID 1), sends PID 1's pidfd to tine on the release socket, and exits;
// PID 1 goes on with the program.
type nestedHop struct {
	// ops make the root (Plan.RootSteps) in a mount namespace of the
	// first process's own, before the second clone; what describes them.
	ops   []op
	what  []string
	fail  [2]int32 // the failed op and its errno, sent instead of a pidfd
	args  cloneArgs
	pidfd int32
	sock  uintptr // the release socket, at its number in tine
	iov   unix.Iovec
	msg   unix.Msghdr
	byte_ [1]byte
	oob   []byte
	fdAt  *int32 // where the pidfd goes in oob
}

func newNestedHop(flags uint64, sock int) *nestedHop {
	h := &nestedHop{pidfd: -1, sock: uintptr(sock)}
	// exit_signal must be 0 with CLONE_PARENT: PID 1 gets the first
	// process's (SIGCHLD).
	h.args = cloneArgs{pidfd: uint64(uintptr(unsafe.Pointer(&h.pidfd)))}
	h.setFlags(flags)
	h.oob = unix.UnixRights(0)
	h.fdAt = (*int32)(unsafe.Pointer(&h.oob[unix.CmsgLen(0)]))
	h.iov = unix.Iovec{Base: &h.byte_[0], Len: 1}
	h.msg = unix.Msghdr{Iov: &h.iov, Iovlen: 1, Control: &h.oob[0]}
	h.msg.SetControllen(len(h.oob))
	return h
}

// compileRoot compiles what the first process runs: a mount namespace of
// its own, private, and the steps that make the root.
func (h *nestedHop) compileRoot(pg *program, p *Plan) error {
	add := func(what string, o op) { h.ops, h.what = append(h.ops, o), append(h.what, what) }
	if lr := p.lateRoot; lr != nil {
		// A spare: its stage is mounted already, in a private namespace
		// the daemon made for it (the first process holds a copy of its
		// descriptor); the steps left make no mount.
		add("join the spare's mount namespace", sys(unix.SYS_SETNS, uintptr(lr.ns), unix.CLONE_NEWNS))
	} else {
		add("unshare the mount namespace", sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS))
		add("make mounts private", sys(unix.SYS_MOUNT, pg.cstr("none"), pg.cstr("/"), 0, unix.MS_REC|unix.MS_PRIVATE, 0))
	}
	for _, st := range p.Steps[:p.RootSteps] {
		if st.Beneath || st.InNetns {
			return fmt.Errorf("%w: step %s cannot run before the user namespace", ErrSetup, st)
		}
		ops := pg.upperOps(st, false)
		if st.Kind != StepUpper {
			var err error
			if ops, err = pg.stepOp(st); err != nil {
				return err
			}
		}
		for _, o := range ops {
			add(st.String(), o)
		}
	}
	return nil
}

// setFlags sets the namespaces PID 1 is cloned with.
func (h *nestedHop) setFlags(flags uint64) {
	h.args.flags = flags | unix.CLONE_PARENT | unix.CLONE_PIDFD
}

// run is the first process's part: it returns in PID 1 only.
//
//go:nosplit
//go:norace
func (h *nestedHop) run() {
	var regs [4]uintptr
	if i, e := runOps(h.ops, &regs); i >= 0 {
		h.fail[0], h.fail[1] = int32(i), int32(e)
		h.iov.Base, h.iov.Len = (*byte)(unsafe.Pointer(&h.fail)), uint64(unsafe.Sizeof(h.fail))
		h.msg.Control, h.msg.Controllen = nil, 0
		syscall.RawSyscall(unix.SYS_SENDMSG, h.sock, uintptr(unsafe.Pointer(&h.msg)), 0)
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 1, 0, 0)
	}
	r, _, e := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&h.args)), unsafe.Sizeof(h.args), 0)
	if e == 0 && r == 0 {
		return // PID 1
	}
	if e == 0 {
		*h.fdAt = h.pidfd
		syscall.RawSyscall(unix.SYS_SENDMSG, h.sock, uintptr(unsafe.Pointer(&h.msg)), 0)
	}
	syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
}

// receive reaps the first process and returns PID 1's pid and pidfd.
func (h *nestedHop) receive(firstPid, firstPidfd, releaseFD int) (pid, pidfd int, err error) {
	defer func() {
		unix.Close(firstPidfd)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(firstPid, &ws, unix.WALL, nil); err != unix.EINTR {
				break
			}
		}
	}()
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(releaseFD, b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 0, -1, fmt.Errorf("the nested clone: %w", err)
	}
	if n == 8 && oobn == 0 {
		i, errno := int(int32(binary.NativeEndian.Uint32(b[:]))), syscall.Errno(binary.NativeEndian.Uint32(b[4:]))
		what := "?"
		if i >= 0 && i < len(h.what) {
			what = h.what[i]
		}
		return 0, -1, fmt.Errorf("%s: %v", what, errno)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return 0, -1, errors.New("the nested clone failed (no pidfd came back)")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return 0, -1, errors.New("the nested clone failed (no pidfd came back)")
	}
	pid = pidOfPidfd(fds[0])
	if pid <= 0 {
		unix.Close(fds[0])
		return 0, -1, errors.New("the nested clone: PID 1's pid is unknown")
	}
	return pid, fds[0], nil
}
