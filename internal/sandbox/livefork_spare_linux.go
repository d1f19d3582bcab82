package sandbox

// Spare fork children (ADR 0013, "Amended, session 5"): a live fork's
// child made ahead of the fork, while the session idles, with everything
// that does not depend on the fork's snapshot — plan, cgroup, the two
// clones, its namespaces, id maps — and its root overlay left for
// Complete, the only part that needs the fork's layer.
//
// Where the root comes from, and why so: overlayfs clones its layers as
// private mounts of the mounter's own mount namespace, and refuses a
// lower with locked children ("failed to clone lowerpath"), which the
// base "/" has in the child's namespace (owned by its user namespace).
// So the stage tmpfs is mounted by a daemon thread in a private mount
// namespace of the spare's own (owned by the host's: nothing locked),
// the first process joins it and makes the rest of the stage there (the
// os view's entries), and at Complete a daemon thread in that namespace
// makes the overlay detached (fsopen, fsconfig, fsmount) and moves it onto
// the root in PID 1's namespace (move_mount from a thread that joined
// it). Nothing is mounted in the daemon's own namespace: a SIGKILLed
// daemon leaves no stage behind (the namespace goes with its last
// descriptor and process).

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/osthread"
)

// ErrSpareDiscarded: a spare was discarded before it was completed.
var ErrSpareDiscarded = errors.New("the spare fork child was discarded")

// Spare is a fork child waiting for its root (CreateSpare).
type Spare struct {
	sp   *spare
	once sync.Once
}

// spare is the rendezvous between the start blocked before PID 1's
// release (startPlan, through await) and Complete or Discard.
type spare struct {
	ready  chan struct{} // closed when PID 1 waits for its root
	layers chan []string // the fork's layers (topmost first); closed to discard
	done   chan struct{} // closed when the start returned
	keep   []string      // host paths whose mounts its namespace keeps (CreateSpare)
	pid    int           // PID 1's host pid, once ready
	group  *cgroup.Group // its cgroup, once ready (nil without one)
	walls  *RequestWalls // its ForkWalls, once ready (nil if they failed)
	sb     *Sandbox
	err    error
	// prepared is the early target made while the spare idles, until
	// EarlyForkTarget hands it out or the start drops it.
	mu       sync.Mutex
	prepared *ForkTarget
}

// lateRoot is a spare's stage and root overlay (Plan.lateRoot).
type lateRoot struct {
	stageData   string
	stageFlags  uintptr
	stage, root string
	// under are the lowers below the fork's layers (the os view, the
	// base); setuid mounts the root without nosuid (Spec.Setuid).
	under  []string
	setuid bool
	// keep are host paths whose mounts stay in the spare's namespace
	// (mountStage detaches the others).
	keep []string
	// ns is the spare's own mount namespace, where the stage is mounted
	// (mountStage); -1 once closed.
	ns int
}

// CreateSpare makes a live fork's child (s.ForkOf set; s.Layers those
// under the fork's, an image's) up to its root, and returns once its
// PID 1 waits for it. keep are host directories the layers given to
// Complete will lie under (the layer store): of the host's mounts, its
// mount namespace keeps those and what the spec names (the others are
// detached there, so an idle spare holds no filesystem of the host's
// busy). It holds a goroutine and its start's descriptors until Complete
// or Discard.
func CreateSpare(s *Spec, keep ...string) (*Spare, error) {
	if s.ForkOf == nil {
		return nil, fmt.Errorf("%w: a spare is a live fork's child (Spec.ForkOf)", ErrInvalidSpec)
	}
	one := *s
	sp := &spare{ready: make(chan struct{}), layers: make(chan []string, 1), done: make(chan struct{}), keep: keep}
	one.spare = sp
	go func() {
		defer close(sp.done)
		sp.sb, sp.err = Create(&one)
	}()
	select {
	case <-sp.ready:
		return &Spare{sp: sp}, nil
	case <-sp.done:
		if sp.err == nil { // cannot happen: a spare's start always waits
			sp.sb.Destroy()
			sp.err = fmt.Errorf("%w: the spare did not wait for its root", ErrSetup)
		}
		return nil, sp.err
	}
}

// EarlyForkTarget opens, for a copy that joins the spare while it
// completes, the namespaces of its PID 1 that are its for good
// (EarlyForkNamespaces) and makes the copy's tracking group in its cgroup;
// Late adds the rest once it is complete. The first call hands out the
// one made while the spare idled. The caller discards it if the spare is
// not completed.
func (s *Spare) EarlyForkTarget() (t *ForkTarget, err error) {
	select {
	case <-s.sp.done:
		return nil, fmt.Errorf("%w: the spare is gone", ErrSandboxGone)
	default:
	}
	s.sp.mu.Lock()
	t, s.sp.prepared = s.sp.prepared, nil
	s.sp.mu.Unlock()
	if t != nil {
		return t, nil
	}
	if s.sp.group == nil {
		return nil, fmt.Errorf("%w: the spare has no cgroup", ErrSetup)
	}
	if t, err = openForkTarget(s.sp.pid, EarlyForkNamespaces, "the spare's", s.sp.group); err != nil {
		return nil, err
	}
	t.early, t.Walls = true, s.sp.walls
	return t, nil
}

// Late completes an early target with sb, the spare completed: the
// descriptors of its late namespaces (LateForkNamespaces).
func (t *ForkTarget) Late(sb *Sandbox) error {
	if !t.early || t.sb != nil {
		return fmt.Errorf("%w: not an early fork target", ErrInvalidSpec)
	}
	release, err := sb.use()
	if err != nil {
		return err
	}
	defer release()
	t.sb = sb
	t.LateFDs, err = openNamespaces(sb.init.pid, LateForkNamespaces, "the child's")
	return err
}

// Pid returns the host pid of the spare's PID 1.
func (s *Spare) Pid() int { return s.sp.pid }

// Done is closed once the spare is completed, discarded or dead.
func (s *Spare) Done() <-chan struct{} { return s.sp.done }

// Complete gives the spare its root over layers (the fork's, topmost
// first; the spec's layers, the os view and the base go under them) and
// lets PID 1 finish: the sandbox is then like one Create made with
// layers in front of Spec.Layers. A
// spare completes once; one that died meanwhile returns ErrSandboxGone.
func (s *Spare) Complete(layers []string) (*Sandbox, error) {
	sent := false
	s.once.Do(func() {
		s.sp.layers <- slices.Clone(layers)
		sent = true
	})
	if !sent {
		return nil, fmt.Errorf("%w: the spare was completed or discarded already", ErrInvalidSpec)
	}
	<-s.sp.done
	return s.sp.sb, s.sp.err
}

// Discard kills the spare and frees what it holds (its start's undo:
// PID 1 killed and reaped, its cgroup removed, its mount namespace
// closed). Idempotent; after Complete it leaves the sandbox alone.
func (s *Spare) Discard() {
	s.once.Do(func() { close(s.sp.layers) })
	<-s.sp.done
}

// await is the start's wait, PID 1 (host pid) made and blocked on its
// release: it returns once the root is attached, or an error (the start
// then undoes all).
func (sp *spare) await(s *Spec, pr *Process, lr *lateRoot) error {
	pid := pr.pid
	sp.pid, sp.group = pid, pr.group
	if h, err := hostOnce(); err == nil {
		sp.walls, _ = forkWalls(pr.plan, h) // nil: the copy gets them with its join
	}
	// The first copy's early target is made now, off the fork's path
	// (0.4-1.8 ms there); one not handed out goes before the start
	// returns, before its undo removes the cgroup its tracking group is in.
	if sp.group != nil {
		if t, err := openForkTarget(pid, EarlyForkNamespaces, "the spare's", sp.group); err == nil {
			t.early, t.Walls = true, sp.walls
			sp.prepared = t
			defer sp.dropPrepared()
		}
	}
	died, stop, err := watchExit(pr.pidfd)
	if err != nil {
		return err
	}
	defer stop()
	parked := lr.park(pid)
	defer parked.release()
	close(sp.ready)
	var layers []string
	var ok bool
	select {
	case <-died:
		// Killed, as when the parent's PID 1 dies: that PID 1 does not
		// finish exiting until this one (a child of the daemon, outside
		// its pid namespace) is reaped, which the start's undo does.
		return fmt.Errorf("%w: the spare's PID 1 died", ErrSandboxGone)
	case layers, ok = <-sp.layers:
		if !ok {
			return ErrSpareDiscarded
		}
	case <-s.ForkOf.dead:
		// Its pid namespace is gone with the parent's PID 1; the parent's
		// Destroy waits for this start to let go of it.
		return fmt.Errorf("%w: the spare's parent sandbox died", ErrSandboxGone)
	}
	if err := parked.attach(layers); err != nil {
		return err
	}
	s.Layers = slices.Concat(layers, s.Layers)
	return nil
}

// parkedAttach is a thread parked in a spare's stage namespace with its
// root overlay's filesystem context open (lateRoot.park), waiting for the
// fork's layers: the thread's start, its joins and the context's opening
// are off the fork's path (ADR 0013, session 9).
type parkedAttach struct {
	layers chan []string // closed to let the thread go
	done   chan error    // the thread's answer, once it has ended
	once   sync.Once
}

// park starts the thread that attaches the root of the spare whose PID 1
// is pid.
func (lr *lateRoot) park(pid int) *parkedAttach {
	p := &parkedAttach{layers: make(chan []string), done: make(chan error, 1)}
	go osthread.Throwaway(func() { p.done <- lr.attachWhenGiven(pid, p.layers) })
	return p
}

// attach has the parked thread attach the root over layers.
func (p *parkedAttach) attach(layers []string) error {
	err := ErrSpareDiscarded
	p.once.Do(func() {
		p.layers <- layers
		err = <-p.done
	})
	return err
}

// release lets the thread go unless attach used it, and waits for its end:
// it holds the stage namespace, which the start's undo tears down.
func (p *parkedAttach) release() {
	p.once.Do(func() {
		close(p.layers)
		<-p.done
	})
}

// dropPrepared discards the early target made ahead, unless handed out.
func (sp *spare) dropPrepared() {
	sp.mu.Lock()
	t := sp.prepared
	sp.prepared = nil
	sp.mu.Unlock()
	if t != nil {
		t.Discard()
	}
}

// mountStage makes the spare's mount namespace, a private copy of the
// daemon's, with the stage tmpfs mounted at the stage directory.
func (lr *lateRoot) mountStage() error {
	var err error
	osthread.Throwaway(func() { // the thread goes; its namespace stays, by lr.ns
		err = func() error {
			if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("%w: a mount namespace for the spare: %v", ErrSetup, err)
			}
			if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("%w: make the spare's mounts private: %v", ErrSetup, err)
			}
			if err := detachUnkept(lr.keep); err != nil {
				return err
			}
			if err := unix.Mount("tmpfs", lr.stage, "tmpfs", lr.stageFlags, lr.stageData); err != nil {
				return fmt.Errorf("%w: mount the spare's stage: %v", ErrSetup, err)
			}
			fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%w: open the spare's mount namespace: %v", ErrSetup, err)
			}
			lr.ns = fd
			return nil
		}()
	})
	return err
}

// detachUnkept detaches, in the calling thread's mount namespace, every
// mount but "/", those at or above a path of keep, and the kernel's own
// trees (/dev, /proc, /sys): the spare's namespace lives as long as the
// spare, and would otherwise keep every filesystem the host had mounted
// then (a loop device another tine unmounted since, say) busy.
func detachUnkept(keep []string) error {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return fmt.Errorf("%w: the spare's mounts: %v", ErrSetup, err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, unescapeMountinfo(f[4]))
		}
	}
	kept := func(mp string) bool {
		if mp == "/" {
			return true
		}
		for _, k := range []string{"/dev", "/proc", "/sys"} {
			if mp == k || strings.HasPrefix(mp, k+"/") {
				return true
			}
		}
		return slices.ContainsFunc(keep, func(k string) bool { return k == mp || strings.HasPrefix(k, mp+"/") })
	}
	// Deepest first, so a mount goes before the one it sits on.
	slices.SortStableFunc(points, func(a, b string) int { return depth(b) - depth(a) })
	for _, mp := range points { // twice for two mounts stacked on one point
		if kept(mp) {
			continue
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("%w: detach %s from the spare's namespace: %v", ErrSetup, mp, err)
		}
	}
	return nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// close closes the spare's mount namespace (what is mounted there lives
// on in PID 1's copy, and the overlay, as long as they do). It is the
// namespace's last reference: its teardown waits for an RCU grace period
// (0.4-0.9 ms here), which the start lets overlap PID 1's steps after
// its release.
func (lr *lateRoot) close() {
	if lr.ns >= 0 {
		unix.Close(lr.ns)
		lr.ns = -1
	}
}

// attachWhenGiven, on a thread of its own (osthread.Throwaway), joins the
// spare's stage namespace and readies the root overlay's filesystem
// context, waits for the fork's layers, then mounts the overlay over them
// and attaches it to the spare's root, in its PID 1's mount namespace
// (pid). It returns ErrSpareDiscarded once layers is closed instead.
func (lr *lateRoot) attachWhenGiven(pid int, layers <-chan []string) error {
	fs, target := -1, -1
	defer func() {
		for _, fd := range []int{fs, target} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	ready := func() (err error) {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("%w: unshare the thread's filesystem context: %v", ErrSetup, err)
		}
		if err := unix.Setns(lr.ns, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("%w: join the spare's mount namespace: %v", ErrSetup, err)
		}
		if fs, err = unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC); err != nil {
			return fmt.Errorf("%w: fsopen overlay: %v", ErrSetup, err)
		}
		for key, dir := range map[string]string{"upperdir": lr.stage + "/upper", "workdir": lr.stage + "/work"} {
			if err := unix.FsconfigSetString(fs, key, dir); err != nil {
				return fmt.Errorf("%w: the root overlay's %s: %v", ErrSetup, key, err)
			}
		}
		if target, err = unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("%w: open the spare's PID 1's mount namespace: %v", ErrSetup, err)
		}
		return nil
	}
	readied := ready()
	given, ok := <-layers
	switch {
	case !ok:
		return ErrSpareDiscarded
	case readied != nil:
		return readied
	}
	// One layer a call ("lowerdir+", Linux 6.8): no escaping, and no page
	// limit on the options.
	for _, l := range slices.Concat(given, lr.under) {
		if err := unix.FsconfigSetString(fs, "lowerdir+", l); err != nil {
			return fmt.Errorf("%w: the root overlay's layer %s: %v", ErrSetup, l, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("%w: make the root overlay: %v", ErrSetup, err)
	}
	attr := unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if lr.setuid {
		attr = unix.MOUNT_ATTR_NODEV // as NewPlan's root (Spec.Setuid)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return fmt.Errorf("%w: fsmount the root overlay: %v", ErrSetup, err)
	}
	defer unix.Close(m)
	if err := unix.Setns(target, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: join the spare's PID 1's mount namespace: %v", ErrSetup, err)
	}
	if err := unix.MoveMount(m, "", unix.AT_FDCWD, lr.root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: attach the root overlay: %v", ErrSetup, err)
	}
	return nil
}

// watchExit closes died when the process of pidfd exits, until stop.
func watchExit(pidfd int) (died chan struct{}, stop func(), err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("%w: a pipe to watch the spare: %v", ErrSetup, err)
	}
	died, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer unix.Close(p[0])
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(p[0]), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		if fds[0].Revents != 0 {
			close(died)
		}
		close(quit)
	}()
	return died, func() { unix.Close(p[1]); <-quit }, nil
}
