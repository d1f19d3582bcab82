package sandbox

// Spare fork children (ADR 0013, "Amended, session 4 (later)"): a live
// fork's child made ahead of the fork, while the session idles, with
// everything that does not depend on the fork's snapshot (plan, cgroup,
// the two clones, its namespaces, id maps) and its root left for
// Complete: a daemon thread joins the spare's mount namespace and mounts
// the root overlay over the layers it is given there, with the host's
// root's credentials (overlayfs clones its upper and work as private
// mounts of the mounter's own namespace, so a detached fsmount made
// outside cannot be moved in). PID 1 waits on its release until then.

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
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
	pid    int           // PID 1's host pid, once ready
	sb     *Sandbox
	err    error
}

// lateRoot is a spare's root overlay, mounted at Complete: its lowers
// known ahead (the parent's layers, the os view, the base), the stage
// with its upper and work, where and how it is mounted.
type lateRoot struct {
	lowers      []string
	stage, root string
	flags       uintptr
}

// CreateSpare makes a live fork's child (s.ForkOf set; s.Layers the
// layers known ahead, under the fork's own) up to its root. It holds a
// goroutine and its start's descriptors until Complete or Discard.
func CreateSpare(s *Spec) (*Spare, error) {
	if s.ForkOf == nil {
		return nil, fmt.Errorf("%w: a spare is a live fork's child (Spec.ForkOf)", ErrInvalidSpec)
	}
	one := *s
	sp := &spare{ready: make(chan struct{}), layers: make(chan []string, 1), done: make(chan struct{})}
	one.spare = sp
	go func() {
		defer close(sp.done)
		sp.sb, sp.err = Create(&one)
	}()
	select {
	case <-sp.ready:
		return &Spare{sp: sp}, nil
	case <-sp.done:
		if sp.err == nil { // cannot happen: a fork child always waits
			sp.sb.Destroy()
			sp.err = fmt.Errorf("%w: the spare did not wait for its root", ErrSetup)
		}
		return nil, sp.err
	}
}

// Pid returns the host pid of the spare's PID 1.
func (s *Spare) Pid() int { return s.sp.pid }

// Complete mounts the spare's root over top (the fork's layers, topmost
// first) stacked on the layers it was made with, and lets PID 1 finish:
// the sandbox is then like one Create made. A spare completes once.
func (s *Spare) Complete(top []string) (*Sandbox, error) {
	sent := false
	s.once.Do(func() {
		s.sp.layers <- append([]string(nil), top...)
		sent = true
	})
	if !sent {
		return nil, fmt.Errorf("%w: the spare was completed or discarded already", ErrInvalidSpec)
	}
	<-s.sp.done
	return s.sp.sb, s.sp.err
}

// Discard kills the spare and frees what it holds (its start's undo:
// PID 1 killed, its cgroup removed). Idempotent; after Complete it
// leaves the sandbox alone.
func (s *Spare) Discard() {
	s.once.Do(func() { close(s.sp.layers) })
	<-s.sp.done
}

// await is the start's wait, PID 1 (host pid) made and blocked on its
// release: it returns once the root is mounted, or an error (the start
// then undoes all).
func (sp *spare) await(s *Spec, pid, pidfd int, lr *lateRoot) error {
	sp.pid = pid
	died, stop, err := watchExit(pidfd)
	if err != nil {
		return err
	}
	defer stop()
	close(sp.ready)
	var top []string
	var ok bool
	select {
	case <-died:
		// Killed, as when the parent's PID 1 dies: that PID 1 does not
		// finish exiting until this one (a child of the daemon, outside
		// its pid namespace) is reaped, which the start's undo does.
		return fmt.Errorf("%w: the spare's PID 1 died", ErrSandboxGone)
	case top, ok = <-sp.layers:
		if !ok {
			return ErrSpareDiscarded
		}
	case <-s.ForkOf.dead:
		// Its pid namespace is gone with the parent's PID 1; the parent's
		// Destroy waits for this start to let go of it.
		return fmt.Errorf("%w: the spare's parent sandbox died", ErrSandboxGone)
	}
	lowers := slices.Concat(top, lr.lowers)
	opts, err := overlayOptions(lowers, lr.stage, false)
	if err != nil {
		return err
	}
	if err := mountIn(pid, lr.root, lr.flags, opts); err != nil {
		return err
	}
	s.Layers = slices.Concat(top, s.Layers)
	return nil
}

// mountIn mounts the root overlay at root in pid's mount namespace from a
// thread of its own that joined it (and dies after: it never unlocks).
func mountIn(pid int, root string, flags uintptr, opts string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("%w: unshare the thread's filesystem context: %v", ErrSetup, err)
			return
		}
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("%w: open the spare's mount namespace: %v", ErrSetup, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("%w: join the spare's mount namespace: %v", ErrSetup, err)
			return
		}
		if err := unix.Mount("overlay", root, "overlay", flags, opts); err != nil {
			errc <- fmt.Errorf("%w: mount the spare's root overlay: %v", ErrSetup, err)
			return
		}
		errc <- nil
	}()
	return <-errc
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
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			}
			break
		}
		if fds[0].Revents != 0 {
			close(died)
		}
		close(quit)
	}()
	return died, func() { unix.Close(p[1]); <-quit }, nil
}
