package sandbox

// The parent side of the child's program: a Plan compiled into the raw
// syscalls init_linux.go runs, with every string, struct and array the
// syscalls point at allocated here and kept alive by the program.

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/tine-run/tine/internal/kernel/landlock"
	"golang.org/x/sys/unix"
)

// Fixed descriptor slots in the child. The parent's descriptors are copied
// there first thing, and everything above is closed, so a sandbox never
// holds another sandbox's pipes (the daemon starts many at once).
const (
	slotErr       = 3  // error pipe, write end (close-on-exec)
	slotSync      = 4  // the child's end of the release socket
	slotStatus    = 5  // status pipe, write end
	slotRuleset   = 6  // Landlock ruleset
	slotTarget    = 7  // pidfd of the sandbox an exec joins
	slotStdio     = 8  // 8, 9, 10: the command's stdin, stdout, stderr
	slotLaunch    = 11 // a live sandbox's launch socket (see serve)
	slotUpper     = 12 // a live sandbox's writable layer (O_PATH), for snapshots
	slotFirstFree = slotUpper + 1
)

// slotBinds and up hold the bind sources, one detached mount each, until
// they are mounted (see beneathOps); what the child opens comes after them.
const slotBinds = slotFirstFree

// program is everything the child runs, in memory the parent prepared.
type program struct {
	setup   []op // PID 1, in order
	command []op // PID 2, before execve
	execs   []op // one execve per PATH candidate
	// what describes setup and command ops, for error messages.
	what []string

	report  childReport
	cmdPid  int32
	status  int32
	waitSet uint64
	// exit is what the reaper reports when the command ends; usage its
	// rusage and its children's, read for it.
	exit  exitReport
	usage [2]unix.Rusage
	// detached: the child outlives its parent (Spec.Detach, ExecSpec.Detach):
	// no parent-death signal, it waits for the parent's commit, and exits
	// with the command's exit code instead of reporting it on a pipe.
	detached bool
	// extraBase and nextra are the slots of Spec.ExtraFiles in PID 1.
	extraBase, nextra int
	// startSet is a detached sandbox's start signal, which PID 1 waits for
	// before it forks the command; 0 otherwise.
	startSet uint64
	// adopt is the pid (in the sandbox) PID 1 waits for instead of forking
	// the command (Spec.Adopt); 0 otherwise.
	adopt   int32
	siginfo [128]byte

	// A live sandbox's PID 1 launches commands (serve) from resident
	// memory; residentMem is the parent's copy, released after the clone.
	resident    *resident
	residentMem residentMem
	// vfork is what the command's process starts from (forkCommand).
	vfork vforkArgs

	// keep holds what the ops point at, so it outlives the clone.
	keep []any

	// root is the new root (host view) that Beneath steps resolve in;
	// rootOpen says register 3 holds a descriptor of it.
	root     string
	rootOpen bool
	// howDir and howAny are openat2's open_how for Beneath steps, howRule
	// for Landlock's rules: O_PATH, never following a symlink.
	howDir, howAny, howRule *unix.OpenHow

	// hop, for a live fork's child (Spec.ForkOf), is the second clone:
	// see nestedHop.
	hop *nestedHop
}

// inputs are the parent-side resources a program refers to.
type inputs struct {
	errW, sync, statusW int
	ruleset             int // -1 without Landlock
	target              int // pidfd of the sandbox to join; -1 when booting one
	launch              int // a live sandbox's end of the launch socket; -1 otherwise
	stdio               [3]int
	landlockABI         int // rights beyond it are masked off each rule
	// userns: the child runs in a user namespace: it waits for the parent
	// (ID maps) before any mount and makes its own network namespace.
	// Otherwise it mounts first, then waits for the parent to place it in
	// its cgroup and hand it the network namespace (made in parallel).
	userns bool
	// asRoot: the user namespace maps a range to unprivileged host ids
	// (Spec.UserNS as root); the child, still the host's root, becomes the
	// namespace's root once it is mapped.
	asRoot      bool
	newCgroupNS bool // unshare the cgroup namespace after placement (v1)
	// join are the cgroup files the child writes "0" to first thing,
	// moving itself into its group (v1; cgroup.Group.JoinFiles).
	join     []int
	cgroupFS []cgroupFSMount
	filter   []unix.SockFilter
	keepCaps uint64
	dropCaps []int

	// binds are detached mounts of the plan's bind sources, cloned by the
	// parent from descriptors it held since checking them (openBindSources);
	// a rootless child, which the parent cannot clone for, clones nbinds by
	// path.
	binds  []int
	nbinds int
	// extra are the command's descriptors 3, 4, ... (Spec.ExtraFiles).
	extra []int
}

func (pg *program) cstr(s string) uintptr {
	b := append([]byte(s), 0)
	pg.keep = append(pg.keep, b)
	return uintptr(unsafe.Pointer(&b[0]))
}

// cstrv returns a NULL-terminated array of C strings.
func (pg *program) cstrv(list []string) uintptr {
	v := make([]uintptr, len(list)+1)
	for i, s := range list {
		v[i] = pg.cstr(s)
	}
	pg.keep = append(pg.keep, v)
	return uintptr(unsafe.Pointer(&v[0]))
}

func (pg *program) ptr(v any, p unsafe.Pointer) uintptr {
	pg.keep = append(pg.keep, v)
	return uintptr(p)
}

func sys(nr uintptr, args ...uintptr) op {
	o := op{nr: nr, reg: -1, regArg: -1, save: -1, want: -1}
	copy(o.args[:], args)
	return o
}

func (o op) tolerating(e ...syscall.Errno) op {
	copy(o.tolerate[:], e)
	return o
}

func (o op) saving(reg int8) op { o.save = reg; return o }

func (o op) using(reg, arg int8) op { o.reg, o.regArg = reg, arg; return o }

func (pg *program) addSetup(what string, o op) {
	pg.setup = append(pg.setup, o)
	pg.what = append(pg.what, what)
}

func newProgram() *program {
	pg := &program{}
	pg.vfork.p = pg
	pg.vfork.stack = new([vforkStackSize]byte)
	pg.howDir = &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	pg.howAny = &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	pg.howRule = &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	return pg
}

// openat2 is openat2(dirfd, name, how) as an op.
func (pg *program) openat2(dirfd uintptr, name string, how *unix.OpenHow) op {
	return sys(unix.SYS_OPENAT2, dirfd, pg.cstr(name), pg.ptr(how, unsafe.Pointer(how)), unsafe.Sizeof(*how))
}

// command is what PID 2 (or an exec's command process) runs.
type command struct {
	argv, env, candidates []string
	workdir               string
	tty                   bool
	user                  *User // nil: the sandbox's root
	// size is the terminal's size, set before the command starts (zero:
	// the kernel's 0x0, for the caller to set).
	size unix.Winsize
	// detach: the command's reaper outlives its parent (ExecSpec.Detach).
	detach bool
	// filter is loaded last before execve (Spec.CommandFilter).
	filter []unix.SockFilter
}

func (p *Plan) command() *command {
	if len(p.Argv) == 0 {
		return nil // a live sandbox: PID 1 only reaps
	}
	return &command{argv: p.Argv, env: p.Env, candidates: p.Candidates, workdir: p.Workdir, tty: p.Spec.TTY, filter: p.Spec.CommandFilter, user: p.Spec.User}
}

// compileBoot turns plan p into the program of a new sandbox's PID 1.
//
// hop, for a live fork's child, is the nested clone PID 1 comes from.
func compileBoot(p *Plan, in inputs, hop *nestedHop) (*program, error) {
	pg := newProgram()
	// Most steps are one to four ops (an os view's entries are most of
	// them): sized once, the setup is not copied as it grows.
	pg.setup = make([]op, 0, 3*len(p.Steps)+64)
	pg.what = make([]string, 0, cap(pg.setup))
	pg.hop = hop
	pg.resetTimerSlack()
	if p.Spec.Detach {
		pg.detached, pg.startSet, pg.adopt = true, 1<<(StartSignal-1), int32(p.Spec.Adopt)
	} else {
		pg.addSetup("set parent-death signal", sys(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL)))
	}
	if p.RootSteps > 0 {
		if err := pg.hop.compileRoot(pg, p); err != nil {
			return nil, err
		}
	}
	pg.addJoinCgroup(in.join)
	pg.moveDescriptors(in)
	if !in.userns {
		// Through the host's /proc, before the sandbox's own shows this
		// score read-only (plan.go's readOnlyPaths), and while PID 1 still
		// has CAP_SYS_RESOURCE.
		pg.addOOMScore("-1000")
	}
	if in.userns {
		pg.addRelease(false)
	}
	pg.addBecomeRoot(in)

	// Filesystem.
	pg.addSetup("make mounts private", sys(unix.SYS_MOUNT, pg.cstr("none"), pg.cstr("/"), 0, unix.MS_REC|unix.MS_PRIVATE, 0))
	if in.userns {
		pg.cloneBindSources(p)
	}
	pg.root = p.Root
	if p.buildsAhead() {
		// A spare's /proc, /dev and /sys, built while it idles; the rest
		// waits for its root (a second release, once it is attached).
		for _, inNetns := range []bool{false, true} {
			for _, st := range p.Steps {
				if !st.Ahead || st.InNetns != inNetns {
					continue
				}
				o, err := pg.stepOp(st)
				if err != nil {
					return nil, err
				}
				for _, o := range o {
					pg.addSetup(st.String(), o)
				}
			}
		}
		pg.addRelease(false)
	}
	uppers := upperEntries{modes: map[string]uint32{}}
	// The os view's entries: one bind of the layer made on the host, when
	// it could be made (hostview_layer_linux.go).
	viewLayer, viewPrefix, viewBound := preparedViewLayer(p, in), p.Stage+"/view/", false
	for _, inNetns := range []bool{false, true} {
		if inNetns && !in.userns {
			pg.addRelease(true)
		}
		for i, st := range p.Steps {
			if st.InNetns != inNetns || i < p.RootSteps || st.Ahead {
				continue
			}
			if st.Kind == StepUpper && viewLayer != "" && !st.InNetns && strings.HasPrefix(st.Target, viewPrefix) {
				if !viewBound {
					uppers.end(pg)
					pg.addSetup("mount the os view's layer", sys(unix.SYS_MOUNT, pg.cstr(viewLayer), pg.cstr(p.Stage+"/view"), 0, unix.MS_BIND, 0))
					viewBound = true
				}
				continue
			}
			if st.Kind == StepUpper {
				uppers.add(pg, st)
				continue
			}
			uppers.end(pg)
			o, err := pg.stepOp(st)
			if err != nil {
				return nil, err
			}
			what := st.String()
			for _, o := range o {
				pg.addSetup(what, o)
			}
		}
		uppers.end(pg)
	}
	if pg.rootOpen {
		pg.addSetup("close the new root", sys(unix.SYS_CLOSE, 0).using(3, 0))
	}
	if in.launch >= 0 {
		// The upper layer is unreachable by path once the old root is
		// detached; PID 1 keeps it open for the daemon to snapshot
		// (Sandbox.OpenUpper). PID 1 is undumpable, so the sandbox's own
		// processes cannot open it through /proc/1/fd.
		// The slot is taken first (by a copy of the error pipe), so the
		// open cannot land in it and the dup3 below replace nothing.
		pg.addSetup("keep the writable layer", sys(unix.SYS_DUP3, slotErr, slotUpper, unix.O_CLOEXEC))
		pg.addSetup("keep the writable layer", sys(unix.SYS_OPENAT, atFdcwd, pg.cstr(p.Stage+"/upper"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC).saving(1))
		pg.addSetup("keep the writable layer", sys(unix.SYS_DUP3, 0, slotUpper, unix.O_CLOEXEC).using(1, 0))
		pg.addSetup("keep the writable layer", sys(unix.SYS_CLOSE, 0).using(1, 0))
	}
	pg.addSetup("enter new root", sys(unix.SYS_CHDIR, pg.cstr(p.Root)))
	dot := pg.cstr(".")
	pg.addSetup("pivot_root", sys(unix.SYS_PIVOT_ROOT, dot, dot))
	pg.addSetup("detach old root", sys(unix.SYS_UMOUNT2, dot, unix.MNT_DETACH))
	pg.addSetup("enter new root", sys(unix.SYS_CHDIR, pg.cstr("/")))

	if p.Spec.UTSNS == nil || p.Spec.Hostname != "" {
		pg.addSetup("set hostname", sys(unix.SYS_SETHOSTNAME, pg.cstr(p.Hostname), uintptr(len(p.Hostname))))
	}
	if in.userns {
		ifr := &ifreqFlags{flags: unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING}
		copy(ifr.name[:], "lo")
		pg.addSetup("bring up lo", sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0).saving(1))
		pg.addSetup("bring up lo", sys(unix.SYS_IOCTL, 0, unix.SIOCSIFFLAGS, pg.ptr(ifr, unsafe.Pointer(ifr))).using(1, 0))
		pg.addSetup("bring up lo", sys(unix.SYS_CLOSE, 0).using(1, 0))
	}
	if in.newCgroupNS {
		pg.addSetup("unshare cgroup namespace", sys(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP))
	}
	pg.addCgroupFS(in.cgroupFS)
	if c := p.command(); c != nil && c.tty {
		pg.addPTY(c.size)
	}
	pg.addWalls(p, in)
	pg.addCommandProcess(p.command(), false, !in.userns, p.Spec.OOMScoreAdj)
	if in.launch >= 0 {
		var err error
		if pg.resident, pg.residentMem, err = newResident(); err != nil {
			return nil, err
		}
		if u := p.Spec.User; u != nil {
			if len(u.Groups) > launchMaxGroups {
				pg.residentMem.release()
				return nil, fmt.Errorf("%w: user with %d supplementary groups, at most %d", ErrInvalidSpec, len(u.Groups), launchMaxGroups)
			}
			l := &pg.resident.launch
			l.asUser, l.uid, l.gid, l.ngroups = true, u.UID, u.GID, uintptr(len(u.Groups))
			copy(l.groups[:], u.Groups)
		}
	}
	return pg, nil
}

// compileJoin turns an exec into a live sandbox into a program: the child
// joins every namespace of the sandbox's PID 1 (slotTarget, a pidfd), puts
// up the same walls, and forks the command, which lands in the sandbox's
// pid namespace; the child stays outside it, reaping the command and
// forwarding signals, and dies with tine like PID 1 does.
func compileJoin(p *Plan, cmd *command, in inputs) (*program, error) {
	pg := newProgram()
	pg.resetTimerSlack()
	if cmd.detach {
		pg.detached = true
	} else {
		pg.addSetup("set parent-death signal", sys(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL)))
	}
	pg.addJoinCgroup(in.join)
	pg.moveDescriptors(in)
	pg.addRelease(false)
	ns := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP)
	if in.userns {
		ns |= unix.CLONE_NEWUSER
	}
	if !in.userns {
		pg.addOOMScore("-1000") // in tine's /proc, while the reaper still sees it
	}
	pg.addSetup("join the sandbox's namespaces", sys(unix.SYS_SETNS, slotTarget, ns))
	pg.addSetup("close the sandbox's pidfd", sys(unix.SYS_CLOSE, slotTarget))
	pg.addBecomeRoot(in)
	if cmd.tty {
		pg.addPTY(cmd.size)
	}
	pg.addWalls(p, in)
	pg.addCommandProcess(cmd, true, !in.userns, p.Spec.OOMScoreAdj)
	return pg, nil
}

// addJoinCgroup moves the child into its cgroup before it does anything
// else (so all it allocates is charged there): it writes "0" to each of
// the join files, at the numbers it inherited them under, and closes
// them before the descriptors move to their slots. The child has a single
// thread, so moving it is moving the whole process.
func (pg *program) addJoinCgroup(fds []int) {
	zero := pg.cstr("0")
	for _, fd := range fds {
		pg.addSetup("join the sandbox's cgroup", sys(unix.SYS_WRITE, uintptr(fd), zero, 1))
		pg.addSetup("join the sandbox's cgroup", sys(unix.SYS_CLOSE, uintptr(fd)))
	}
}

// addBecomeRoot makes a child in a user namespace with a mapped range
// (in.asRoot) that namespace's root: entering the namespace does not
// change its ids, the host's root, which is not mapped there (files it
// made would fail with EOVERFLOW); its host groups go too.
func (pg *program) addBecomeRoot(in inputs) {
	if !in.asRoot {
		return
	}
	pg.addSetup("drop host groups", sys(unix.SYS_SETGROUPS, 0, 0))
	pg.addSetup("become the namespace's root", sys(unix.SYS_SETRESGID, 0, 0, 0))
	pg.addSetup("become the namespace's root", sys(unix.SYS_SETRESUID, 0, 0, 0))
}

// addOOMScore sets the process's oom_score_adj. A sandbox's PID 1 and an
// exec's reaper are copies of tine, whose memory can look bigger to the
// OOM killer than the command that ran the sandbox out of memory: at -1000
// they are never its victim. The command's process sets itself back to 0
// before execve; as a vfork child it does not change its parent's value
// (the kernel exempts vfork children from oom_score_adj sharing). Lowering
// the score needs CAP_SYS_RESOURCE: where tine runs without it, this is
// skipped, and a small memory limit next to a large tine can still make
// the OOM killer pick PID 1 (the sandbox then dies as a whole).
func (pg *program) addOOMScore(value string) {
	pg.addSetup("set oom_score_adj", sys(unix.SYS_OPENAT, atFdcwd, pg.cstr("/proc/self/oom_score_adj"), unix.O_WRONLY|unix.O_CLOEXEC).saving(1))
	pg.addSetup("set oom_score_adj", sys(unix.SYS_WRITE, 0, pg.cstr(value), uintptr(len(value))).using(1, 0).tolerating(unix.EACCES, unix.EPERM))
	pg.addSetup("set oom_score_adj", sys(unix.SYS_CLOSE, 0).using(1, 0))
}

// addPTY allocates a pseudo-terminal in the sandbox's own devpts, so the
// command's terminal has a name there (tty, ssh and sudo look it up): the
// slave becomes the command's stdio, and the master goes to the parent
// over the release socket.
func (pg *program) addPTY(size unix.Winsize) {
	zero := new(int32)
	pg.addSetup("open /dev/ptmx", sys(unix.SYS_OPENAT, atFdcwd, pg.cstr("/dev/ptmx"), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC).saving(1))
	pg.addSetup("unlock the pseudo-terminal", sys(unix.SYS_IOCTL, 0, unix.TIOCSPTLCK, pg.ptr(zero, unsafe.Pointer(zero))).using(1, 0))
	pg.addSetup("open the pseudo-terminal's peer", sys(unix.SYS_IOCTL, 0, unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC).using(1, 0).saving(2))
	if size.Col > 0 && size.Row > 0 {
		// Sized before the command runs: a program that asks at once
		// (stty size, a full-screen editor) sees the caller's size.
		ws := &size
		pg.addSetup("size the pseudo-terminal", sys(unix.SYS_IOCTL, 0, unix.TIOCSWINSZ, pg.ptr(ws, unsafe.Pointer(ws))).using(2, 0))
	}
	for i := 0; i < 3; i++ {
		pg.addSetup("attach the pseudo-terminal", sys(unix.SYS_DUP3, 0, uintptr(slotStdio+i), unix.O_CLOEXEC).using(2, 0))
	}
	pg.addSetup("attach the pseudo-terminal", sys(unix.SYS_CLOSE, 0).using(2, 0))
	msg := &fdMessage{}
	copy(msg.control[:], unix.UnixRights(0))
	msg.iov = unix.Iovec{Base: &msg.byte[0], Len: 1}
	msg.msg = unix.Msghdr{Iov: &msg.iov, Iovlen: 1, Control: &msg.control[0]}
	msg.msg.SetControllen(len(msg.control))
	send := sys(unix.SYS_SENDMSG, slotSync, pg.ptr(msg, unsafe.Pointer(&msg.msg)), unix.MSG_NOSIGNAL)
	send.reg, send.store = 1, (*int32)(unsafe.Pointer(&msg.control[unix.CmsgLen(0)]))
	pg.addSetup("send the pseudo-terminal to the parent", send)
	pg.addSetup("close the pseudo-terminal's master", sys(unix.SYS_CLOSE, 0).using(1, 0))
}

// moveDescriptors moves the parent's descriptors to the fixed slots: first
// each to a number above all of them (so no move clobbers one still to be
// moved), then down into its slot. Whatever the child's copy of the
// descriptor table held at those numbers is junk it closes anyway.
func (pg *program) moveDescriptors(in inputs) {
	fds := []int{in.errW, in.sync, in.statusW, in.ruleset, in.target, in.stdio[0], in.stdio[1], in.stdio[2], in.launch}
	slots := []int{slotErr, slotSync, slotStatus, slotRuleset, slotTarget, slotStdio, slotStdio + 1, slotStdio + 2, slotLaunch}
	for i, fd := range in.binds {
		fds, slots = append(fds, fd), append(slots, slotBinds+i)
	}
	// The command's extra descriptors sit above the bind slots until the
	// command's process moves them to 3, 4, ...
	pg.extraBase, pg.nextra = slotBinds+in.nbinds, len(in.extra)
	for i, fd := range in.extra {
		fds, slots = append(fds, fd), append(slots, pg.extraBase+i)
	}
	high := pg.extraBase + pg.nextra
	for _, fd := range fds {
		high = max(high, fd+1)
	}
	for i, fd := range fds {
		if fd >= 0 {
			pg.addSetup("move descriptors", sys(unix.SYS_DUP3, uintptr(fd), uintptr(high+i), unix.O_CLOEXEC))
		}
	}
	for i, fd := range fds {
		if fd >= 0 {
			pg.addSetup("move descriptors", sys(unix.SYS_DUP3, uintptr(high+i), uintptr(slots[i]), unix.O_CLOEXEC))
		}
	}
	// Slots a rootless child will clone bind sources into are taken by a
	// placeholder meanwhile, so that no descriptor it opens lands in one.
	for i := len(in.binds); i < in.nbinds; i++ {
		pg.addSetup("move descriptors", sys(unix.SYS_DUP3, slotErr, uintptr(slotBinds+i), unix.O_CLOEXEC))
	}
	pg.addSetup("close inherited descriptors", sys(unix.SYS_CLOSE_RANGE, uintptr(pg.extraBase+pg.nextra), ^uintptr(0)>>1, 0))
}

// addWalls adds no_new_privs, Landlock, capabilities and seccomp — in that
// order, since each later step would forbid an earlier one. Without
// no_new_privs (Spec.Setuid) seccomp is loaded before the capabilities
// go, since loading a filter then needs CAP_SYS_ADMIN; the filter allows
// the prctl and capset that follow (runc's order in that case).
func (pg *program) addWalls(p *Plan, in inputs) {
	// The reaper keeps the same credentials as the command it reaps; not
	// dumpable, it cannot be ptraced (or its memory read) by that command.
	// The command itself becomes dumpable again at execve.
	pg.addSetup("make the reaper undumpable", sys(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0))
	if !p.Spec.Setuid {
		pg.addSetup("set no_new_privs", sys(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
	}
	if in.ruleset >= 0 {
		for _, r := range p.Landlock {
			attr := &landlock.PathBeneathAttr{Allowed: landlock.Supported(r.Rights, in.landlockABI)}
			// A rule whose path is gone, or has become a symlink, since the
			// plan is skipped: that grants less, never more.
			open := pg.openat2(atFdcwd, r.Path, pg.howRule).saving(2).tolerating(unix.ENOENT, unix.ELOOP, unix.ENOTDIR)
			pg.addSetup("landlock: open "+r.Path, open)
			add := sys(unix.SYS_LANDLOCK_ADD_RULE, slotRuleset, landlock.RuleTypePathBeneath, pg.ptr(attr, unsafe.Pointer(attr)), 0).tolerating(unix.EBADF)
			add.reg, add.store = 2, &attr.ParentFd
			pg.addSetup("landlock: allow writes beneath "+r.Path, add)
			pg.addSetup("landlock: close "+r.Path, sys(unix.SYS_CLOSE, 0).using(2, 0).tolerating(unix.EBADF))
		}
		pg.addSetup("landlock: restrict", sys(unix.SYS_LANDLOCK_RESTRICT_SELF, slotRuleset, 0))
		pg.addSetup("landlock: close ruleset", sys(unix.SYS_CLOSE, slotRuleset))
	}
	if p.Spec.Setuid {
		pg.addSeccomp(in.filter)
	}
	for _, c := range in.dropCaps {
		pg.addSetup("drop capabilities", sys(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0).tolerating(unix.EINVAL))
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{
		{Effective: uint32(in.keepCaps), Permitted: uint32(in.keepCaps), Inheritable: uint32(in.keepCaps)},
		{Effective: uint32(in.keepCaps >> 32), Permitted: uint32(in.keepCaps >> 32), Inheritable: uint32(in.keepCaps >> 32)},
	}
	pg.addSetup("set capabilities", sys(unix.SYS_CAPSET, pg.ptr(hdr, unsafe.Pointer(hdr)), pg.ptr(data, unsafe.Pointer(data))))
	if !p.Spec.Setuid {
		pg.addSeccomp(in.filter)
	}
	// The reaper waits for every signal but the two it cannot block.
	pg.waitSet = ^uint64(0) &^ (1<<(unix.SIGKILL-1) | 1<<(unix.SIGSTOP-1))
}

// addSeccomp loads the sandbox's seccomp filter, if it has one.
func (pg *program) addSeccomp(filter []unix.SockFilter) {
	if len(filter) == 0 {
		return
	}
	prog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	pg.keep = append(pg.keep, filter)
	pg.addSetup("load seccomp filter", sys(unix.SYS_SECCOMP, 1 /* SECCOMP_SET_MODE_FILTER */, 0, pg.ptr(prog, unsafe.Pointer(prog))))
}

// addCommandProcess adds what the forked command process runs before
// execve: its own session, stdio, default signal handling, and (resetOOM)
// the default OOM score its reaper lowered. An exec's command also dies
// with the child that reaps it (orphanedByParent).
func (pg *program) addCommandProcess(c *command, orphanedByParent, resetOOM bool, oomScore int) {
	if c == nil {
		return
	}
	pg.addCommand("start a session", sys(unix.SYS_SETSID))
	if orphanedByParent {
		pg.addCommand("set parent-death signal", sys(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL)))
	}
	for i := 0; i < 3; i++ {
		pg.addCommand("set up stdio", sys(unix.SYS_DUP3, uintptr(slotStdio+i), uintptr(i), 0))
	}
	if c.tty {
		pg.addCommand("set controlling terminal", sys(unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0))
	}
	dfl := &sigaction{handler: 0}
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		pg.addCommand("reset signal handlers", sys(unix.SYS_RT_SIGACTION, uintptr(sig), pg.ptr(dfl, unsafe.Pointer(dfl)), 0, 8).tolerating(unix.EINVAL))
	}
	if resetOOM {
		pg.addCommand("reset oom_score_adj", sys(unix.SYS_OPENAT, atFdcwd, pg.cstr("/proc/self/oom_score_adj"), unix.O_WRONLY|unix.O_CLOEXEC).saving(1))
		score := strconv.Itoa(oomScore)
		pg.addCommand("reset oom_score_adj", sys(unix.SYS_WRITE, 0, pg.cstr(score), uintptr(len(score))).using(1, 0))
		pg.addCommand("reset oom_score_adj", sys(unix.SYS_CLOSE, 0).using(1, 0))
	}
	empty := new(uint64)
	pg.addCommand("unblock signals", sys(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, pg.ptr(empty, unsafe.Pointer(empty)), 0, 8))
	if pg.nextra > 0 {
		// A detached sandbox's PID 1 closed the error pipe (slot 3): the
		// extra descriptors go to 3, 4, ..., through slots above them all
		// (the two ranges may overlap), without close-on-exec.
		tmp := pg.extraBase + pg.nextra
		for i := 0; i < pg.nextra; i++ {
			pg.addCommand("pass descriptors", sys(unix.SYS_DUP3, uintptr(pg.extraBase+i), uintptr(tmp+i), 0))
		}
		for i := 0; i < pg.nextra; i++ {
			pg.addCommand("pass descriptors", sys(unix.SYS_DUP3, uintptr(tmp+i), uintptr(3+i), 0))
		}
		pg.addCommand("close descriptors", sys(unix.SYS_CLOSE_RANGE, uintptr(3+pg.nextra), ^uintptr(0)>>1, 0))
	} else {
		pg.addCommand("close descriptors", sys(unix.SYS_CLOSE_RANGE, slotErr+1, ^uintptr(0)>>1, 0))
	}
	if u := c.user; u != nil {
		// Groups first: setgroups and setresgid need the capabilities that
		// setresuid to a non-zero uid drops.
		groups := append([]uint32(nil), u.Groups...)
		if len(groups) == 0 {
			groups = []uint32{0} // something to point at; the count says none
		}
		pg.addCommand("set supplementary groups", sys(unix.SYS_SETGROUPS, uintptr(len(u.Groups)), pg.ptr(groups, unsafe.Pointer(&groups[0]))))
		pg.addCommand("set group id", sys(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)))
		pg.addCommand("set user id", sys(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), uintptr(u.UID)))
	}
	pg.addCommand("enter working directory "+c.workdir, sys(unix.SYS_CHDIR, pg.cstr(c.workdir)))
	if len(c.filter) > 0 {
		// Last, so that it judges only the command (runc's order).
		prog := &unix.SockFprog{Len: uint16(len(c.filter)), Filter: &c.filter[0]}
		pg.keep = append(pg.keep, c.filter)
		pg.addCommand("load the config's seccomp filter", sys(unix.SYS_SECCOMP, 1 /* SECCOMP_SET_MODE_FILTER */, 0, pg.ptr(prog, unsafe.Pointer(prog))))
	}
	argv := pg.cstrv(c.argv)
	envp := pg.cstrv(c.env)
	for _, cand := range c.candidates {
		pg.execs = append(pg.execs, sys(unix.SYS_EXECVE, pg.cstr(cand), argv, envp))
	}
}

// atFdcwd is AT_FDCWD (-100) as a raw syscall argument.
const atFdcwd = ^uintptr(99)

func (pg *program) addCommand(what string, o op) {
	pg.command = append(pg.command, o)
	pg.what = append(pg.what, what)
}

// addRelease blocks the child until the parent releases it with one byte
// on the release socket; EOF (the parent died) fails the setup. With
// netns, the byte carries the network namespace (SCM_RIGHTS), which the
// child enters.
func (pg *program) addRelease(netns bool) {
	rel := &fdMessage{}
	rel.iov = unix.Iovec{Base: &rel.byte[0], Len: 1}
	rel.msg = unix.Msghdr{Iov: &rel.iov, Iovlen: 1}
	if netns {
		rel.msg.Control = &rel.control[0]
		rel.msg.SetControllen(len(rel.control))
	}
	o := sys(unix.SYS_RECVMSG, slotSync, pg.ptr(rel, unsafe.Pointer(&rel.msg)), unix.MSG_CMSG_CLOEXEC)
	o.want = 1
	pg.addSetup("wait for the parent", o)
	if !netns {
		return
	}
	// The descriptor is the data of the one SCM_RIGHTS message.
	load := sys(0)
	load.load, load.save = (*int32)(unsafe.Pointer(&rel.control[unix.CmsgLen(0)])), 1
	pg.addSetup("enter network namespace", load)
	pg.addSetup("enter network namespace", sys(unix.SYS_SETNS, 0, unix.CLONE_NEWNET).using(1, 0))
	pg.addSetup("close network namespace", sys(unix.SYS_CLOSE, 0).using(1, 0))
}

// fdMessage is a one-byte message carrying one descriptor (SCM_RIGHTS):
// the parent's release of the child, or the child's pseudo-terminal.
type fdMessage struct {
	msg     unix.Msghdr
	iov     unix.Iovec
	byte    [1]byte
	control [24]byte // CmsgSpace(4)
}

func (pg *program) stepOp(st Step) ([]op, error) {
	if st.Beneath {
		return pg.beneathOps(st)
	}
	o, err := pg.pathOp(st)
	if err == nil && st.Kind == StepMknod {
		// mknod applies the umask (tine's, 022 from a shell): the node's
		// mode is set exactly, or /dev/null would be 0644 and unwritable
		// for any user but root (an image's USER, a desktop's session).
		return []op{o, sys(unix.SYS_FCHMODAT, atFdcwd, pg.cstr(st.Target), uintptr(st.Mode&0o7777))}, nil
	}
	return []op{o}, err
}

// pathOp is a step on a host-view path: tine's own mounts and nodes, at
// paths it chose in a base it checked.
func (pg *program) pathOp(st Step) (op, error) {
	var tol []syscall.Errno
	if st.Optional {
		// Missing, or not of the kind the step expects (a mask made for a
		// file or for a directory).
		tol = append(tol, unix.ENOENT, unix.ENOTDIR)
	}
	switch st.Kind {
	case StepMount:
		var fstype, data uintptr
		if st.FSType != "" {
			fstype = pg.cstr(st.FSType)
		}
		if st.Data != "" {
			data = pg.cstr(st.Data)
		}
		src := pg.cstr(st.Source)
		return sys(unix.SYS_MOUNT, src, pg.cstr(st.Target), fstype, st.Flags, data).tolerating(tol...), nil
	case StepMkdir:
		return sys(unix.SYS_MKDIRAT, atFdcwd, pg.cstr(st.Target), uintptr(st.Mode)).tolerating(append(tol, unix.EEXIST)...), nil
	case StepMknod:
		return sys(unix.SYS_MKNODAT, atFdcwd, pg.cstr(st.Target), uintptr(st.Mode), uintptr(st.Dev)).tolerating(append(tol, unix.EEXIST)...), nil
	case StepSymlink:
		return sys(unix.SYS_SYMLINKAT, pg.cstr(st.Source), atFdcwd, pg.cstr(st.Target)).tolerating(append(tol, unix.EEXIST)...), nil
	case StepTouch:
		return sys(unix.SYS_MKNODAT, atFdcwd, pg.cstr(st.Target), uintptr(unix.S_IFREG|st.Mode), 0).tolerating(append(tol, unix.EEXIST)...), nil
	}
	return op{}, fmt.Errorf("unknown step kind %d", st.Kind)
}

// upperEntries compiles runs of StepUpper entries (an os view's are a
// hundred or more) with PID 1's umask cleared around each run, saved in
// register 0 and restored after it: an entry then gets its exact mode
// from mkdir or mknod, and needs no chmod unless a chown or a set-gid
// parent would change it (see upperOps).
type upperEntries struct {
	cleared bool
	modes   map[string]uint32 // the entries made so far, by path
}

func (u *upperEntries) add(pg *program, st Step) {
	if !u.cleared {
		pg.addSetup("clear the umask for the upper layer's entries", sys(unix.SYS_UMASK, 0).saving(0))
		u.cleared = true
	}
	exact := u.modes[path.Dir(st.Target)]&unix.S_ISGID == 0
	u.modes[st.Target] = st.Mode
	what := st.String()
	for _, o := range pg.upperOps(st, exact) {
		pg.addSetup(what, o)
	}
}

// end restores the umask after a run of entries.
func (u *upperEntries) end(pg *program) {
	if u.cleared {
		pg.addSetup("restore the umask", sys(unix.SYS_UMASK, 0).using(0, 0))
		u.cleared = false
	}
}

// upperOps makes a StepUpper entry: the directory or empty file, its
// owner, its exact mode, and the opaque xattr. exact says the umask is
// cleared and the parent is not set-gid, so mkdir and mknod give the mode
// as it is; otherwise (the umask applies, a parent's set-gid bit is
// inherited, chown clears set-id bits) a chmod sets it.
func (pg *program) upperOps(st Step, exact bool) []op {
	target := pg.cstr(st.Target)
	perm := uintptr(st.Mode & 0o7777)
	ops := make([]op, 0, 4)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		ops = append(ops, sys(unix.SYS_MKDIRAT, atFdcwd, target, perm).tolerating(unix.EEXIST))
	} else {
		ops = append(ops, sys(unix.SYS_MKNODAT, atFdcwd, target, unix.S_IFREG|perm, 0).tolerating(unix.EEXIST))
	}
	chown := st.UID != 0 || st.GID != 0
	if chown {
		ops = append(ops, sys(unix.SYS_FCHOWNAT, atFdcwd, target, uintptr(st.UID), uintptr(st.GID), unix.AT_SYMLINK_NOFOLLOW))
	}
	setID := uint32(unix.S_ISUID | unix.S_ISGID)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		setID |= unix.S_ISVTX // mkdir keeps a sticky bit; mknod is not promised to
	}
	if !exact || chown || st.Mode&setID != 0 {
		ops = append(ops, sys(unix.SYS_FCHMODAT, atFdcwd, target, perm))
	}
	if st.Data != "" {
		ops = append(ops, sys(unix.SYS_LSETXATTR, target, pg.cstr(st.Data), pg.cstr("y"), 1, 0))
	}
	return ops
}

// ifreqFlags is struct ifreq with the flags member.
type ifreqFlags struct {
	name  [unix.IFNAMSIZ]byte
	flags uint16
	_     [22]byte
}

// sigaction is the kernel's struct sigaction for rt_sigaction.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// describe turns a child's failure report into an error.
func (pg *program) describe(r childReport) error {
	errno := syscall.Errno(r.errno)
	switch {
	case r.index == failExec:
		return errno
	case r.index == failClone:
		return fmt.Errorf("%w: fork the command: %v", ErrSetup, errno)
	case r.index >= 0 && int(r.index) < len(pg.what):
		return fmt.Errorf("%w: %s: %v", ErrSetup, pg.what[r.index], errno)
	}
	return fmt.Errorf("%w: step %d: %v", ErrSetup, r.index, errno)
}
