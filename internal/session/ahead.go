package session

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/sandbox"
)

// A copy forked ahead (ADR 0013, "Amended, session 6"): while a forkable
// session idles, its interpreter forks one copy of itself for the next
// live fork, so the interpreter's own fork (the page tables of the whole
// process) is off the fork's path. The state cannot change without a
// cell, so the copy is the session as of the fork as long as none ran:
// the copy is SIGKILLed (through a pidfd of its own) before a cell, a
// restart, an interrupt or the session's end, and the interpreter reaps
// it before the cell runs, so the cell's writes copy no pages for it.
// The copy parks on its own control socket, undumpable (a process of the
// parent could otherwise ptrace it, and keep it across the walls), dead
// with its parent; what a fork does per child happens when a fork claims
// it: the parent's scope layer, the copy's walls, the reseed.

// errDeclined: the interpreter forks no copy ahead (it holds what a fork
// cannot carry).
var errDeclined = errors.New("the interpreter forks no copy ahead")

// aheadTimeout bounds a fork ahead, from the request to the copy parked.
const aheadTimeout = 10 * time.Second

// ForkAhead forks a copy of the interpreter ahead of the next live fork
// and parks it, unless the session is busy (a cell runs or waits: it
// forks ahead after), not forkable, dead, out of forks or has a copy
// parked already. It holds the session's turn meanwhile; a Fork asked
// for meanwhile waits for it instead of refusing.
func (s *Session) ForkAhead() error {
	if !s.opts.Spec.Forkable {
		return nil
	}
	// Marked under way before the turn is taken and until it is given
	// back, so a fork that finds the turn taken knows to wait.
	done := make(chan struct{})
	s.mu.Lock()
	if s.aheadBusy != nil {
		s.mu.Unlock()
		return nil
	}
	s.aheadBusy = done
	s.mu.Unlock()
	took := false
	defer func() {
		if took {
			s.give()
		}
		s.mu.Lock()
		s.aheadBusy = nil
		s.mu.Unlock()
		close(done)
	}()
	select {
	case s.turn <- struct{}{}:
		took = true
	default:
		return nil
	}
	s.mu.Lock()
	a, count, interrupts := s.agent, s.count, s.interrupts
	if a == nil || s.closed || s.ahead != nil || s.forks >= MaxForks || s.queued > 0 {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	c, err := a.forkAhead()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent != a || s.closed || s.count != count || s.interrupts != interrupts {
		c.kill()
		c.closeFDs()
		return nil
	}
	s.ahead, s.aheadOf, s.aheadCount = c, a, count
	s.carried = Mark{a, count, interrupts} // the agent checked before it forked
	return nil
}

// dropAhead kills the copy forked ahead, if any (the interpreter reaps it
// at its next request).
func (s *Session) dropAhead() {
	s.mu.Lock()
	c := s.ahead
	s.ahead, s.aheadOf = nil, nil
	s.mu.Unlock()
	if c != nil {
		c.kill()
		c.closeFDs()
	}
}

// claimAhead takes the copy forked ahead of a for a fork, when it is a
// copy of a's state now (no cell since) and alive; else it is dropped.
// The caller holds the turn.
func (s *Session) claimAhead(a *agent) *agent {
	s.mu.Lock()
	c, of, count := s.ahead, s.aheadOf, s.aheadCount
	s.ahead, s.aheadOf = nil, nil
	now := s.count
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	if of != a || count != now || !alive(c.pidfd) {
		c.kill()
		c.closeFDs()
		return nil
	}
	return c
}

// waitAhead waits for a fork ahead under way (it holds the turn for the
// interpreter's fork, milliseconds); true if there was one.
func (s *Session) waitAhead() bool {
	s.mu.Lock()
	done := s.aheadBusy
	s.mu.Unlock()
	if done == nil {
		return false
	}
	<-done
	return true
}

// alive says whether the process of pidfd has not exited (a pidfd polls
// readable once it has).
func alive(pidfd int) bool {
	if pidfd < 0 {
		return false
	}
	p := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 0
}

// forkAhead asks the interpreter to fork a copy ahead and waits until it
// is parked; errDeclined when the interpreter declines (it holds what a
// fork cannot carry).
func (a *agent) forkAhead() (_ *agent, err error) {
	deadline := time.Now().Add(aheadTimeout)
	c, ends, err := newAgent()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.kill()
			c.closeFDs()
		}
	}()
	types := setnsTypes(sandbox.ForkNamespaces)
	err = a.sendFDs(map[string]any{"op": "fork_ahead", "nfds": 3, "nns": len(types), "types": types},
		[]int{int(ends[0].Fd()), int(ends[1].Fd()), int(ends[2].Fd())})
	ends.close()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrDead, a.exitReason())
	}
	keep, restore := a.keepOutput()
	defer restore()
	for {
		f, err := a.next(deadline, keep)
		if err != nil {
			return nil, fmt.Errorf("fork ahead: %w", err)
		}
		if f.Type != "ahead" {
			continue
		}
		if f.Pid == 0 {
			return nil, fmt.Errorf("%w: %s", errDeclined, f.Value)
		}
		c.pid = f.Pid
		break
	}
	if err := c.awaitParked(deadline); err != nil {
		return nil, fmt.Errorf("fork ahead: %w", err)
	}
	return c, nil
}

// awaitParked reads a copy forked ahead's parked frame and the pidfd
// that comes with it, and checks that the pidfd names a process of the
// parent's sandbox with the pid the interpreter gave (the agent can be
// rewritten by a cell: a pidfd of another process, in a fork child say,
// would have the daemon kill it).
func (c *agent) awaitParked(deadline time.Time) error {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		f, err := c.parse()
		if err != nil {
			return err
		}
		if f != nil {
			if f.Type == "error" {
				return fmt.Errorf("%w: the copy forked ahead: %s: %s", ErrStart, f.Name, f.Value)
			}
			if f.Type != "parked" {
				return fmt.Errorf("%w: the copy forked ahead said %q, want parked", ErrStart, f.Type)
			}
			if c.pidfd < 0 {
				return fmt.Errorf("%w: the copy forked ahead sent no pidfd", ErrStart)
			}
			return checkParked(c.pidfd, c.pid)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return errTimeout
		}
		p := []unix.PollFd{{Fd: int32(c.ctl), Events: unix.POLLIN}}
		if _, err := unix.Poll(p, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			return err
		}
		n, oobn, _, _, err := unix.Recvmsg(c.ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, fd := range fds {
					if c.pidfd < 0 {
						c.pidfd = fd
					} else {
						unix.Close(fd)
					}
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("%w: the copy forked ahead exited before it parked", ErrStart)
		}
		c.inbuf = append(c.inbuf, buf[:n]...)
	}
}

// checkParked checks that pidfd is a live process one pid namespace below
// the daemon's (the parent sandbox's: a fork child's processes are two
// below) whose pid there is pid.
func checkParked(pidfd, pid int) error {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "NSpid:" {
			continue
		}
		if len(f) != 3 || f[2] != strconv.Itoa(pid) {
			return fmt.Errorf("%w: the copy forked ahead sent a pidfd of %v, not of its pid %d in its sandbox", ErrStart, f[1:], pid)
		}
		if !alive(pidfd) {
			return fmt.Errorf("%w: the copy forked ahead exited", ErrStart)
		}
		return nil
	}
	return errors.New("the pidfd's fdinfo has no NSpid")
}
