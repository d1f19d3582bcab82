package sandbox

// Live sandboxes: the same isolation as a one-shot run, with no command.
// PID 1 only reaps; commands are exec'd into it by children that join its
// namespaces and cgroup and put up the same walls (compileJoin).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"golang.org/x/sys/unix"
)

// Sandbox is a live sandbox.
type Sandbox struct {
	h    *host
	init *Process // PID 1
	plan *Plan

	destroyOnce sync.Once
	destroyErr  error
	dead        chan struct{}

	// starting is held (read) while an exec or launch starts, and (write)
	// while Destroy closes the descriptors they use — PID 1's pidfd, its
	// cgroup, its launch socket — so none is closed, its number reused by
	// another sandbox's, and then used: an exec must never join the wrong
	// sandbox.
	starting  sync.RWMutex
	destroyed bool

	// touches counts what was let into the sandbox from outside (Touches).
	touches atomic.Uint64
}

// Touches counts the times something was let into the sandbox from
// outside its processes: a command launched or joined (Launch, Exec), its
// root handed out to the host's side (Root). While it and the processes
// inside stay as they were (Alone), nothing but those processes can have
// changed its files.
func (sb *Sandbox) Touches() uint64 { return sb.touches.Load() }

// use holds the sandbox's descriptors open while an exec or launch starts;
// ErrSandboxGone once it is destroyed.
func (sb *Sandbox) use() (release func(), err error) {
	sb.starting.RLock()
	if sb.destroyed {
		sb.starting.RUnlock()
		return nil, ErrSandboxGone
	}
	return sb.starting.RUnlock, nil
}

// ExecSpec is a command to run in a live sandbox.
type ExecSpec struct {
	Args []string
	// Env adds to (and overrides) the sandbox's environment.
	Env []string
	// Workdir defaults to the sandbox's.
	Workdir string
	TTY     bool
	// Cols and Rows size the terminal before the command starts (TTY).
	Cols, Rows uint16
	Stdio      [3]*os.File
	Timeout    time.Duration
	// CgroupProcs are open join files (cgroup.Group.JoinFiles)
	// the command joins before its execve (Launch only; at most 4).
	CgroupProcs []int
	// Last says the caller destroys the sandbox once this command ends
	// (Launch only; a pooled one-shot run): the sandbox's end kills
	// everything the command started, so no tracking group is made for
	// it (a mkdir and an open before the launch, a listing and an rmdir
	// between its exit and its outcome). A timeout or SIGKILL kills the
	// command's process group; what left it dies with the sandbox.
	Last bool
	// Forkable starts the interpreter of a forkable session (Exec only):
	// the command has every wall of an exec but two, so that a forked copy
	// of it can join a child sandbox (Spec.ForkOf) and wall itself in
	// there: no Landlock domain (a domain is for good, and its rules are
	// the inodes of this sandbox's root, so in a child's root nothing
	// would be writable) and seccomp's Session mode, which adds setns
	// with an explicit namespace type to Default. Only with Seccomp
	// Default: Strict and Unconfined sandboxes take no forkable session.
	Forkable bool
	// Detach makes the command outlive the caller (an OCI exec --detach):
	// its reaper, the process Exec returns, has no parent-death signal,
	// exits with the command's exit code (128+signal), and runs nothing
	// unless Process.Commit is called. Wait and Timeout do not apply.
	Detach bool
}

// Usage is a live sandbox's resource use now.
type Usage struct {
	MemoryBytes     int64   `json:"memory_bytes"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	Pids            int64   `json:"pids"`
	CPUTimeMs       float64 `json:"cpu_time_ms"`
}

// Create starts a live sandbox from s, which must have no Args. It returns
// once the sandbox is ready for Exec.
func Create(s *Spec) (*Sandbox, error) {
	if len(s.Args) > 0 {
		return nil, fmt.Errorf("%w: a live sandbox takes no command; exec commands into it", ErrInvalidSpec)
	}
	h, err := hostOnce()
	if err != nil {
		return nil, err
	}
	rootless := os.Geteuid() != 0
	group := h.beginGroup(s, rootless) // while the plan is made
	plan, err := NewPlan(s, rootless)
	if err != nil {
		discardGroup(group)
		return nil, err
	}
	pr, err := startPlan(h, plan, time.Now(), group)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{h: h, init: pr, plan: plan, dead: make(chan struct{})}
	go func() {
		// PID 1 only ends when killed: Destroy, or tine's death.
		<-pr.exited
		close(sb.dead)
	}()
	go pr.waitExit()
	return sb, nil
}

// Pid returns the host pid of the sandbox's PID 1.
func (sb *Sandbox) Pid() int { return sb.init.pid }

// Root returns a path to the sandbox's root filesystem as seen from the
// host (through its PID 1), for confined file access.
func (sb *Sandbox) Root() string {
	sb.touches.Add(1)
	return "/proc/" + strconv.Itoa(sb.init.pid) + "/root"
}

// OpenUpper opens the sandbox's writable layer (the overlay's upper
// directory: every file it created, changed or deleted, as whiteouts) for
// reading. Freeze the sandbox first for a consistent copy.
func (sb *Sandbox) OpenUpper() (*os.File, error) {
	release, err := sb.use()
	if err != nil {
		return nil, err
	}
	defer release()
	path := "/proc/" + strconv.Itoa(sb.init.pid) + "/fd/" + strconv.Itoa(slotUpper)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's writable layer: %w", err)
	}
	return f, nil
}

// Freeze stops every process of the sandbox (cgroup freezer) until Thaw.
func (sb *Sandbox) Freeze() error {
	if sb.init.group == nil {
		return fmt.Errorf("%w: this sandbox has no cgroup (rootless)", cgroup.ErrNoFreezer)
	}
	return sb.init.group.Freeze()
}

// Thaw resumes a frozen sandbox.
func (sb *Sandbox) Thaw() error {
	if sb.init.group == nil {
		return nil
	}
	return sb.init.group.Thaw()
}

// Adopt moves host process pid into the sandbox's cgroup: a restoring
// criu, whose children (the restored processes) are then born there.
func (sb *Sandbox) Adopt(pid int) error {
	if sb.init.group == nil {
		return fmt.Errorf("%w: this sandbox has no cgroup (rootless)", cgroup.ErrUnavailable)
	}
	return sb.init.group.Attach(pid)
}

// Spec returns the spec the sandbox was created from.
func (sb *Sandbox) Spec() *Spec { return sb.plan.Spec }

// Done is closed when the sandbox has died.
func (sb *Sandbox) Done() <-chan struct{} { return sb.dead }

// Spent is what a one-shot run's outcome reports of the sandbox's cgroup:
// its peak memory and CPU time (two reads, not Usage's six).
func (sb *Sandbox) Spent() Usage {
	if sb.init.group == nil {
		return Usage{}
	}
	g := sb.init.group
	return Usage{PeakMemoryBytes: g.PeakMemory(), CPUTimeMs: float64(g.CPUTime()) / 1e6}
}

// Usage reads the sandbox's cgroup.
func (sb *Sandbox) Usage() Usage {
	if sb.init.group == nil {
		return Usage{}
	}
	st := sb.init.group.Stats()
	return Usage{MemoryBytes: st.MemoryBytes, PeakMemoryBytes: st.PeakMemoryBytes, Pids: st.Pids, CPUTimeMs: float64(st.CPUTimeNs) / 1e6}
}

// Destroy kills every process in the sandbox, waits for its PID 1 and
// removes its cgroup. It is safe to call more than once.
func (sb *Sandbox) Destroy() error {
	sb.destroyOnce.Do(func() {
		// Kill first, without the lock: a start blocked on the dying PID 1
		// then fails and lets go.
		sb.init.kill()
		<-sb.dead
		sb.starting.Lock()
		defer sb.starting.Unlock()
		sb.destroyed = true
		if g := sb.init.group; g != nil {
			// Exec reapers live outside the pid namespace; they exit once
			// their command died with it, and Remove kills any that lag.
			sb.destroyErr = g.Remove()
		}
		sb.init.cleanup()
	})
	return sb.destroyErr
}

// Exec runs a command in the sandbox. It returns once the command was
// exec'd (ErrNotFound, ErrPermission otherwise); Wait for its outcome.
func (sb *Sandbox) Exec(e *ExecSpec) (*Process, error) {
	if len(e.Args) == 0 || e.Args[0] == "" {
		return nil, fmt.Errorf("%w: no command given", ErrInvalidSpec)
	}
	stdio, err := stdioFDs(e.Stdio)
	if err != nil {
		return nil, err
	}
	// Counted once it returns: a command started while a snapshot
	// was taken is then seen by the snapshot (Alone) or after it.
	defer sb.touches.Add(1)
	release, err := sb.use()
	if err != nil {
		return nil, err
	}
	defer release()
	t0 := time.Now()
	p, h := sb.plan, sb.h
	env := buildEnv(&Spec{Env: append(append([]string(nil), p.Spec.Env...), e.Env...), TTY: e.TTY}, p.Hostname)
	cmd := &command{argv: e.Args, env: env, candidates: candidates(e.Args[0], env), workdir: e.Workdir, tty: e.TTY,
		size: unix.Winsize{Col: e.Cols, Row: e.Rows}, detach: e.Detach, filter: p.Spec.CommandFilter, user: p.Spec.User}
	if cmd.workdir == "" {
		cmd.workdir = p.Workdir
	}
	if sb.init.pidfd < 0 {
		return nil, fmt.Errorf("%w: exec needs pidfd support (Linux 5.3 or later)", ErrSetup)
	}
	mode := p.Spec.Seccomp
	if e.Forkable {
		if err := sb.canForkFrom(); err != nil {
			return nil, err
		}
		mode = seccomp.Session
	}
	in, err := h.wallInputs(mode, p.UserNS)
	if err != nil {
		return nil, err
	}
	in.asRoot = p.UserNS && !p.Rootless
	in.narrowCaps(p.Spec.Capabilities)
	if in.ruleset >= 0 && e.Forkable {
		unix.Close(in.ruleset) // its copies restrict themselves (ForkWalls)
		in.ruleset = -1
	}
	if in.ruleset >= 0 {
		defer unix.Close(in.ruleset)
	}
	in.target = sb.init.pidfd
	ch, err := newChannels()
	if err != nil {
		return nil, err
	}
	defer ch.closeParentEnds()
	ch.wire(&in, stdio)
	pr := &Process{plan: p, pidfd: -1, launchFD: -1, commitFD: -1, done: make(chan struct{}), exited: make(chan struct{}), sandbox: sb}
	abort := func(err error) (*Process, error) {
		ch.closeChildEnds()
		ch.statusR.Close()
		if pr.track != nil {
			pr.track.Remove()
		}
		return nil, err
	}
	g := sb.init.group
	cgroupFD := -1
	if g != nil && g.FD() >= 0 {
		cgroupFD = g.FD()
	}
	if g != nil && !e.Detach { // (a detached one's is the sandbox's)
		pr.oomBefore = g.OOMKills()
		// Everything the command starts is tracked (see Launch).
		if pr.track, err = g.Track(fmt.Sprintf("exec-%d", execSeq.Add(1))); err != nil {
			return abort(fmt.Errorf("%w: %v", ErrSetup, err))
		}
		if pr.track.FD() >= 0 {
			cgroupFD = pr.track.FD()
		}
	}
	if g != nil && cgroupFD < 0 {
		// v1: the child joins the sandbox's group, then the tracking one
		// (in the pids hierarchy), first thing (see addJoinCgroup).
		for _, grp := range []*cgroup.Group{g, pr.track} {
			if grp == nil {
				continue
			}
			fds, err := grp.JoinFiles()
			if err != nil {
				closeAll(in.join)
				return abort(fmt.Errorf("%w: %v", ErrSetup, err))
			}
			in.join = append(in.join, fds...)
		}
		defer closeAll(in.join)
	}
	pg, err := compileJoin(p, cmd, in)
	if err != nil {
		return abort(err)
	}
	pr.phases.Plan = ms(time.Since(t0))
	t1 := time.Now()
	pid, pidfd, err := cloneOnParentThread(pg, 0, cgroupFD, -1)
	runtime.KeepAlive(e)
	if err != nil {
		return abort(fmt.Errorf("%w: clone: %v", ErrSetup, err))
	}
	ch.closeChildEnds()
	pr.pid, pr.pidfd, pr.statusR = pid, pidfd, ch.statusR
	fail := func(err error) (*Process, error) {
		if pr.tty != nil {
			pr.tty.Close()
		}
		pr.kill()
		pr.reapQuietly()
		pr.untrack(true)
		return nil, err
	}
	if err := ch.release(nil); err != nil {
		return fail(err)
	}
	if e.TTY {
		pr.tty = ch.receiveTTY()
	}
	if err := ch.awaitExec(pg, pr, e.Args); err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrPermission) {
			if pr.tty != nil {
				pr.tty.Close()
			}
			pr.untrack(true)
			return nil, err // awaitExec reaped the reaper
		}
		return fail(err)
	}
	if e.Detach {
		pr.commitFD, ch.releaseFD = ch.releaseFD, -1
		return pr, nil
	}
	pr.readCmdPid()
	pr.phases.Start = ms(time.Since(t1))
	pr.started = time.Now()
	if e.Timeout > 0 {
		go pr.enforceTimeout(e.Timeout)
	}
	return pr, nil
}

// Join returns a handle on the detached sandbox (Spec.Detach) made from s
// whose PID 1 is pid, for Exec into it: an OCI exec, from another process
// than the one that created it. Close releases the handle; the sandbox
// runs on.
func Join(s *Spec, pid int) (*Sandbox, error) {
	if !s.Detach {
		return nil, fmt.Errorf("%w: only a detached sandbox can be joined by pid", ErrInvalidSpec)
	}
	h, err := hostOnce()
	if err != nil {
		return nil, err
	}
	plan, err := NewPlan(s, os.Geteuid() != 0)
	if err != nil {
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSandboxGone, err)
	}
	init := &Process{plan: plan, pid: pid, pidfd: pidfd, launchFD: -1, commitFD: -1, done: make(chan struct{}), exited: make(chan struct{})}
	if s.CgroupPath != "" && h.cgroup.Version != cgroup.None {
		if init.group, err = h.cgroup.OpenAt(s.CgroupPath); err != nil {
			unix.Close(pidfd)
			return nil, err
		}
	}
	return &Sandbox{h: h, init: init, plan: plan, dead: make(chan struct{})}, nil
}

// Close releases a handle made by Join.
func (sb *Sandbox) Close() {
	sb.starting.Lock()
	defer sb.starting.Unlock()
	if !sb.destroyed {
		sb.destroyed = true
		unix.Close(sb.init.pidfd)
	}
}

// ErrSandboxGone means the sandbox died or was destroyed.
var ErrSandboxGone = errors.New("the sandbox is gone")

// ApplyLimits sets the limits s asks for, its defaults included where
// the sandbox has a cgroup (a pooled sandbox takes its run's limits).
func (sb *Sandbox) ApplyLimits(s *Spec) error {
	return sb.SetLimits(s.limits(sb.init.group != nil))
}

// SetLimits changes the sandbox's cgroup limits.
func (sb *Sandbox) SetLimits(lim cgroup.Limits) error {
	if sb.init.group == nil {
		if (lim != cgroup.Limits{}) {
			return fmt.Errorf("%w: this sandbox has no cgroup", cgroup.ErrUnavailable)
		}
		return nil
	}
	return sb.init.group.SetLimits(lim)
}

// Alone reports whether the sandbox runs nothing but its PID 1, p (a
// command of its Exec) and what p started: no other command, session or
// function request. False whenever it cannot tell. Frozen, the answer
// holds until the thaw; after it, Touches says whether anything else was
// let in since.
func (sb *Sandbox) Alone(p *Process) bool {
	g := sb.init.group
	if g == nil || p == nil || p.sandbox != sb || p.track == nil {
		return false
	}
	members, err := g.Members()
	if err != nil {
		return false
	}
	own, err := filepath.Rel(g.Dirs()["pids"], p.track.Dirs()["pids"])
	if err != nil || own == "." || strings.HasPrefix(own, "..") {
		return false
	}
	for dir, pids := range members {
		switch {
		case dir == own || strings.HasPrefix(dir, own+"/"):
		case dir == "" && len(pids) == 1 && pids[0] == sb.init.pid:
		default:
			return false
		}
	}
	return true
}
