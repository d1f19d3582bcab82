package session

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/sandbox"
)

// ErrNotForkable: the session was not created forkable.
var ErrNotForkable = errors.New("the session is not forkable")

// MaxForks is how often one interpreter can fork live: after each fork
// it puts up a Landlock layer its copies are outside of (so it cannot
// reach them), and a copy adds one for its own walls; Landlock stacks at
// most 16 (ADR 0013). A restart starts over.
const MaxForks = 16

// ForksLeft is how many more live forks the session's interpreter can
// make (0 when it is not forkable).
func (s *Session) ForksLeft() int {
	if !s.opts.Spec.Forkable {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	return max(MaxForks-s.forks, 0)
}

// forkTimeout bounds a live fork, from the first descriptor sent to the
// last copy ready.
const forkTimeout = 60 * time.Second

// ForkInto is one child sandbox (made with sandbox.Spec.ForkOf) that a
// live fork puts a copy of the session in.
type ForkInto struct {
	// SandboxID names the child.
	SandboxID string
	// Target are the child's descriptors for the copy; Fork closes them,
	// and discards the target if the copy does not become ready.
	Target *sandbox.ForkTarget
	// Walls are those of an exec in the child (Sandbox.ForkWalls).
	Walls *sandbox.RequestWalls
	// Launcher starts interpreters in the child (a restart of the copy).
	Launcher Launcher
}

// ForkRequest is a live fork of a session into Count child sandboxes.
type ForkRequest struct {
	Count int
	// ParentScope is the Landlock layer the parent interpreter puts up
	// once its copies are forked (Sandbox.ForkParentScope); nil for none.
	ParentScope []byte
	// Check refuses the fork before anything is made (the daemon's
	// capacity, the sandbox), after the session's own checks.
	Check func() error
	// Prepare, when not nil, runs after Check and before the interpreter
	// forks, with the interpreter idle (the daemon's snapshot: a freeze
	// would wait for a fork in progress); on error the caller removes what
	// it made.
	Prepare func() error
	// Make makes the children while the interpreter's copies, forked
	// already, wait for them; on error the caller removes what it made.
	Make func() ([]ForkInto, error)
	// Ahead, when not nil, is called when the fork uses a copy forked
	// ahead (ForkAhead) for its first child.
	Ahead func()
	// Early, when not nil, runs before Make: targets made before their
	// children are (sandbox.Spare.EarlyForkTarget), which the first copies
	// join while Make completes them; Make returns them, completed
	// (ForkTarget.Late), first and in this order. From then on the fork
	// owns them.
	Early func() []*sandbox.ForkTarget
}

// Fork copies the session, live, into new child sandboxes: between cells
// (ErrBusy while one runs: a fork is not queued) and when the interpreter
// holds nothing a copy cannot carry (ErrHeld naming it), the interpreter
// forks once per child at once, and the copies wait while r.Make makes the
// children (the fork's two halves overlap); then each copy joins its
// child, walls itself in and becomes a session there with the parent's
// state (globals, imports, the working directory, open files re-opened by
// path), reseeded. The parent goes on. The session's turn is held
// throughout, so no cell changes the state between the check, the fork and
// the children's files. On error no copy is left running (the caller
// removes the children Make made).
func (s *Session) Fork(r ForkRequest) ([]*Session, error) {
	if !s.opts.Spec.Forkable {
		return nil, fmt.Errorf("%w: create it with \"forkable\": true (tine session create --forkable) to fork it live; POST /v1/sandboxes/%s/fork copies the sandbox's files, without its sessions", ErrNotForkable, s.sandbox)
	}
	if !s.tryTake() {
		return nil, fmt.Errorf("%w: fork it when the cell has ended (or interrupt it)", ErrBusy)
	}
	defer s.give()
	s.mu.Lock()
	a, why, count, forks := s.agent, s.dead, s.count, s.forks
	now := Mark{a, s.count, s.interrupts}
	checked := s.carried == now
	s.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("%w: %s (restart it)", ErrDead, why)
	}
	if forks >= MaxForks {
		return nil, fmt.Errorf("%w: it has forked %d times, the most one interpreter can (each fork walls it off from its copies with a Landlock layer, and Landlock stacks 16); fork a new forkable session, or restart this one (its state is lost)", ErrHeld, forks)
	}
	// A copy forked ahead is the state now (no cell ran since), and the
	// interpreter held nothing a fork cannot carry then: only a cell
	// could have changed either.
	ahead := s.claimAhead(a)
	if ahead == nil && !checked {
		held, err := a.held()
		if err != nil {
			return nil, err
		}
		if err := held.Err(); err != nil {
			return nil, err
		}
		s.markCarried(now)
	}
	// Given back to the interpreter if the fork is refused before it
	// forks; else it is one of the fork's copies.
	claimed := false
	defer func() {
		if ahead != nil && !claimed {
			s.mu.Lock()
			if s.ahead == nil && s.agent == a && s.count == count {
				s.ahead, s.aheadOf, s.aheadCount = ahead, a, count
				ahead = nil
			}
			s.mu.Unlock()
			if ahead != nil {
				ahead.kill()
				ahead.closeFDs()
			}
		}
	}()
	if r.Check != nil {
		if err := r.Check(); err != nil {
			return nil, err
		}
	}
	if r.Prepare != nil {
		if err := r.Prepare(); err != nil {
			return nil, err
		}
	}
	// Counted whether or not it succeeds: the interpreter may have put up
	// its layer before a copy failed.
	s.mu.Lock()
	s.forks++
	s.mu.Unlock()
	claimed = true
	if ahead != nil && r.Ahead != nil {
		r.Ahead()
	}
	into, copies, err := a.fork(r, ahead)
	if err != nil {
		return nil, err
	}
	s.markCarried(now)
	out := make([]*Session, len(copies))
	for i, c := range copies {
		opts := s.opts
		opts.Spec.Forkable = false // forks of forks are not built (ADR 0013)
		out[i] = &Session{id: newID(), sandbox: into[i].SandboxID, opts: opts, launch: into[i].Launcher,
			created: time.Now(), turn: make(chan struct{}, 1), agent: c, count: count}
	}
	return out, nil
}

// markCarried records that the interpreter held nothing a fork refuses
// in state st (ADR 0013, session 8: a fork that follows a fork without a
// cell between skips the check's round trip, 1.2-2.9 ms). As with a copy
// forked ahead, what a signal handler or timer of the user's does
// between cells is not seen.
func (s *Session) markCarried(st Mark) {
	s.mu.Lock()
	s.carried = st
	s.mu.Unlock()
}

// tryTake takes the session's turn for a fork without queueing behind a
// cell; a fork ahead under way is waited for.
func (s *Session) tryTake() bool {
	for {
		select {
		case s.turn <- struct{}{}:
			return true
		default:
		}
		if !s.waitAhead() {
			return false
		}
	}
}

// fork runs the fork protocol (agent/python.py) and returns the children
// and the copies, ready; ahead, when not nil, is a copy forked ahead and
// parked, the first of them.
func (a *agent) fork(r ForkRequest, ahead *agent) (into []ForkInto, copies []*agent, err error) {
	deadline := time.Now().Add(forkTimeout)
	defer func() {
		for _, t := range into {
			if err != nil {
				t.Target.Discard()
			} else {
				t.Target.Close()
			}
		}
		if err != nil {
			for _, c := range copies {
				if c.proc != nil {
					c.kill()
					c.close()
				} else {
					c.kill()     // one forked ahead, through its pidfd
					c.closeFDs() // a copy still waiting exits at the end of its socket
				}
			}
			copies = nil
		}
	}()
	n := r.Count
	if ahead != nil {
		copies = append(copies, ahead)
		n--
	}
	for range n {
		c, ends, err := newAgent()
		if err != nil {
			return nil, copies, err
		}
		copies = append(copies, c)
		err = a.sendFDs(map[string]any{"op": "fork_target", "nfds": 3}, []int{int(ends[0].Fd()), int(ends[1].Fd()), int(ends[2].Fd())})
		ends.close()
		if err != nil {
			return nil, copies, fmt.Errorf("%w: %s", ErrDead, a.exitReason())
		}
	}
	types := setnsTypes(sandbox.ForkNamespaces)
	if err := a.send(map[string]any{"op": "fork", "ahead": ahead != nil, "nns": len(types), "types": types, "parent_scope": r.ParentScope, "syscalls": sandbox.ForkSyscalls}); err != nil {
		return nil, copies, fmt.Errorf("%w: %s", ErrDead, a.exitReason())
	}
	// The children are made while the interpreter forks: its answer is
	// read after. The first copies join the children made ahead as far
	// as they can meanwhile (their namespaces but the mount and cgroup
	// ones, their pid namespace's hop, their group).
	var early []*sandbox.ForkTarget
	if r.Early != nil {
		early = r.Early()
	}
	defer func() {
		if err != nil {
			for _, t := range early {
				t.Discard()
			}
		}
	}()
	earlyTypes := setnsTypes(sandbox.EarlyForkNamespaces)
	for i, t := range early {
		if i >= len(copies) {
			break
		}
		msg := map[string]any{"op": "join_early", "nfds": len(t.FDs), "types": earlyTypes, "syscalls": sandbox.ForkSyscalls}
		if t.Walls != nil {
			msg["walls"] = t.Walls // readied while the child completes
		}
		if err := copies[i].sendFDs(msg, t.FDs); err != nil {
			return nil, copies, fmt.Errorf("%w: a copy: %v", ErrStart, err)
		}
	}
	into, err = r.Make()
	keep, restore := a.keepOutput()
	defer restore()
	for {
		f, ferr := a.next(deadline, keep)
		if ferr != nil {
			return into, copies, fmt.Errorf("fork the interpreter: %w", ferr)
		}
		if f.Type == "forked" {
			if f.Value != "" {
				return into, copies, fmt.Errorf("%w: %s", ErrStart, f.Value)
			}
			break
		}
	}
	if err != nil {
		return into, copies, err
	}
	if len(into) != len(copies) {
		return into, copies, fmt.Errorf("%w: %d children made for %d copies", ErrStart, len(into), len(copies))
	}
	lateTypes := setnsTypes(sandbox.LateForkNamespaces)
	for i, c := range copies {
		t := into[i]
		join := map[string]any{"op": "join", "nfds": len(t.Target.FDs), "walls": t.Walls}
		fds := t.Target.FDs
		if t.Target.Early() {
			if i >= len(early) || early[i] != t.Target {
				return into, copies, fmt.Errorf("%w: the child %s was made ahead for another copy", ErrStart, t.SandboxID)
			}
			join["nfds"], join["types"], fds = len(t.Target.LateFDs), lateTypes, t.Target.LateFDs
			if t.Target.Walls != nil {
				delete(join, "walls") // the copy has them from its early join
			}
		}
		if err := c.sendFDs(join, fds); err != nil {
			return into, copies, fmt.Errorf("%w: the copy for sandbox %s: %v", ErrStart, t.SandboxID, err)
		}
	}
	for i, c := range copies {
		if err := c.awaitReadyFrom(deadline); err != nil {
			return into, copies, fmt.Errorf("the copy for sandbox %s: %w", into[i].SandboxID, err)
		}
		proc, err := into[i].Target.Adopt()
		if err != nil {
			return into, copies, err
		}
		c.watch(proc)
	}
	return into, copies, nil
}

// awaitReadyFrom waits for a copy's ready frame; with no process to watch
// yet, its death is the end of its control socket.
func (c *agent) awaitReadyFrom(deadline time.Time) error {
	for {
		f, err := c.next(deadline, func(int, []byte) {})
		if err != nil {
			if errors.Is(err, errExited) {
				return fmt.Errorf("%w: it exited before it was ready", ErrStart)
			}
			return fmt.Errorf("%w: %v", ErrStart, err)
		}
		switch f.Type {
		case "ready":
			c.pid = f.Pid
			return nil
		case "error":
			return fmt.Errorf("%w: %s: %s", ErrStart, f.Name, f.Value)
		}
	}
}

// sendFDs writes one frame with fds attached to its first byte.
func (a *agent) sendFDs(v any, fds []int) error {
	b, _ := json.Marshal(v)
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	msg = append(msg, b...)
	rights := unix.UnixRights(fds...)
	for {
		n, err := unix.SendmsgN(a.ctl, msg, rights, nil, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			pfd := []unix.PollFd{{Fd: int32(a.ctl), Events: unix.POLLOUT}, {Fd: int32(a.wake), Events: unix.POLLIN}}
			unix.Poll(pfd, -1)
			if pfd[1].Revents != 0 {
				return errExited
			}
			continue
		}
		if err != nil {
			return err
		}
		if n < len(msg) {
			return a.sendRaw(msg[n:])
		}
		return nil
	}
}

// setnsTypes are namespaces as the agent's join takes them: [name, type]
// pairs, in order.
func setnsTypes(list []sandbox.ForkNamespace) [][2]any {
	types := make([][2]any, len(list))
	for i, ns := range list {
		types[i] = [2]any{ns.Name, ns.Type}
	}
	return types
}
