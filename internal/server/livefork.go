package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
	"github.com/tine-run/tine/internal/snapshot"
)

// The live fork of a session (ADR 0013): POST …/sessions/{sid}/fork makes
// count child sandboxes from a file-tier snapshot of the parent, each in
// a user namespace owned by root and a pid namespace nested in the
// parent's (sandbox.Spec.ForkOf), and the session's interpreter forks a
// copy into each. The checks come in this order: the session (404), the
// count (400), not forkable (409), a running cell (409 at once: a fork is
// not queued), what the interpreter holds (409 naming it), 16 forks of it
// already (409), the budget for count sandboxes less the session's spares
// it uses (429, before anything is made), a sandbox that cannot hold a
// forkable session (409). Spares (livefork_spares.go) are completed over
// the fork's snapshot instead of making their children.
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) error {
	var req api.ForkSessionRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	t0 := time.Now()
	b, sess, done, err := s.useSession(r)
	if err != nil {
		return err
	}
	defer done()
	if req.Count < 1 || req.Count > maxForks {
		return fmt.Errorf("%w: count %d: want 1 to %d", ErrInvalidArgument, req.Count, maxForks)
	}
	var boxes []*box
	var c *snapshot.Catalog
	var sn *snapshot.Snapshot
	var snap string
	var ph forkPhases
	var parent liveInstance
	var fresh *keptSnapshot  // this fork's snapshot, kept for the next if it succeeds
	var spares []*spareChild // claimed, until Early or Make takes them
	var use []*spareChild    // taken by Early, until Make completes them
	var gen int
	defer func() {
		s.returnSpares(b, sess.ID(), gen, spares)
		for _, sc := range use { // Early ran, Make did not: the fork failed
			s.discardSpare(sc)
		}
	}()
	copies, err := sess.Fork(session.ForkRequest{
		Count: req.Count,
		Check: func() (err error) {
			// The spares it uses hold their capacity shares already.
			spares, gen = s.claimSpares(b, sess.ID(), req.Count)
			parent, err = s.checkForkChildren(b, req.Count-len(spares))
			// A spare being made holds its share already: over the budget
			// because of it, wait for it rather than refuse.
			if errors.Is(err, ErrCapacity) && len(spares) < req.Count && s.awaitRefill(b, sess.ID(), time.Second) {
				more, _ := s.claimSpares(b, sess.ID(), req.Count-len(spares))
				spares = append(spares, more...)
				parent, err = s.checkForkChildren(b, req.Count-len(spares))
			}
			return err
		},
		ParentScope: forkParentScope(b),
		// The snapshot comes before the interpreter forks: freezing the
		// sandbox waits for a fork in progress (the freezer stops a task
		// only outside its syscall), and the interpreter, idle and holding
		// the session's turn, changes nothing between the two.
		Prepare: func() (err error) {
			ph.asked = time.Now()
			c, sn, fresh, ph.reused, err = s.liveForkSnapshot(b, sess)
			if err == nil {
				snap = sn.ID
			}
			ph.snapshot = time.Now()
			return err
		},
		Ahead: func() { ph.ahead = true },
		// The spares' early targets: the first copies join them while
		// Make completes the spares. From here the spares are the fork's.
		Early: func() []*sandbox.ForkTarget {
			use, spares = spares, nil
			var early []*sandbox.ForkTarget
			for _, sc := range use {
				t, err := sc.sp.EarlyForkTarget()
				if err != nil {
					break // this one and the rest are joined whole
				}
				sc.early = t
				early = append(early, t)
			}
			ph.early = len(early)
			return early
		},
		Make: func() ([]session.ForkInto, error) {
			ph.forked = time.Now() // asked to fork; it does while the children are made
			var into []session.ForkInto
			var err error
			if use == nil {
				use, spares = spares, nil
			}
			made := use
			use = nil
			boxes, into, err = s.makeForkChildren(b, parent, c, sn, req.Count, made, &ph)
			ph.children = time.Now()
			return into, err
		},
	})
	if err != nil {
		for _, child := range boxes {
			s.destroy(child, "its live fork failed")
		}
		if snap != "" && !ph.reused {
			c.Delete(snap) // nothing of a failed fork is left
		}
		return err
	}
	if fresh != nil {
		b.mu.Lock()
		b.keptFork = fresh
		b.mu.Unlock()
	}
	out := api.ForkSessionResult{Snapshot: snap}
	for i, c := range boxes {
		if err := c.sessionsOf().Adopt(copies[i]); err != nil {
			return err
		}
		out.Sandboxes = append(out.Sandboxes, c.info())
		out.Sessions = append(out.Sessions, copies[i].Info())
	}
	if err := s.abandoned(r, boxes...); err != nil {
		return err
	}
	out.ForkMs = float64(time.Since(t0).Microseconds()) / 1000
	s.log.Info("session forked", "sandbox", b.id, "session", sess.ID(), "count", req.Count, "from_spares", ph.spares, "ahead", ph.ahead, "snapshot_reused", ph.reused, "early_joins", ph.early, "paused_ms", sn.PausedMs, "fork_ms", out.ForkMs,
		"checks_ms", ms(ph.asked.Sub(t0)), "snapshot_ms", ms(ph.snapshot.Sub(ph.asked)), "interpreter_ms", ms(ph.forked.Sub(ph.snapshot)), "children_ms", ms(ph.children.Sub(ph.forked)), "copies_ms", ms(time.Since(ph.children)))
	writeJSON(w, http.StatusCreated, out)
	if sess.ForksLeft() == 0 {
		s.dropSpares(b, sess.ID())
	} else {
		s.refillAfterFirstCell(b, sess, boxes)
	}
	return nil
}

// forkPhases are when a live fork's phases ended, for its log line: the
// checks (the interpreter's and the daemon's), the snapshot, the
// interpreter asked to fork (it forks meanwhile), the children; how
// many children were spares, and whether a copy was forked ahead.
type forkPhases struct {
	asked, snapshot, forked, children time.Time
	spares                            int
	ahead                             bool // the first copy was forked ahead
	early                             int  // copies that joined spares early
	reused                            bool // the snapshot was an earlier fork's (keptSnapshot)
}

// keptSnapshot is a live fork's snapshot kept for the next live fork of
// the same session from the same state (ADR 0013, session 9): its copy,
// freeze and commit (1.5-2 ms of the fork's path) are left out when the
// sandbox's files cannot have changed since. They cannot when the
// session ran no cell since (its mark), nothing ran in the sandbox but
// its PID 1 and the session's interpreter when it was taken (Alone, while
// frozen), and nothing was let in since (Touches: an exec, another
// session, a file written by the API).
type keptSnapshot struct {
	session string
	mark    session.Mark
	touches uint64
	id      string
}

// liveForkSnapshot is the file-tier snapshot a live fork of sess starts
// its children from: the one kept from its last fork when it still
// holds (reused), else a new one, with what to keep of it when it may be
// kept.
func (s *Server) liveForkSnapshot(b *box, sess *session.Session) (c *snapshot.Catalog, sn *snapshot.Snapshot, kept *keptSnapshot, reused bool, err error) {
	req := api.SnapshotRequest{Name: "live fork of session " + sess.ID()}
	li, live := b.inst.(liveInstance)
	if !live { // nothing to keep it by: snapshotBox says whether it can be taken
		c, sn, err = s.snapshotBox(b, req, snapshotHow{unsynced: true})
		return c, sn, nil, false, err
	}
	now := keptSnapshot{session: sess.ID(), mark: sess.Mark(), touches: li.Touches()}
	b.mu.Lock()
	k := b.keptFork
	b.mu.Unlock()
	if k != nil && k.session == now.session && k.mark == now.mark && k.touches == now.touches {
		if c, err = s.snapshots(); err == nil {
			if sn, err = c.Get(k.id); err == nil {
				return c, sn, nil, true, nil
			}
		}
		// Deleted meanwhile (DELETE /v1/snapshots): a new one.
	}
	proc, _ := sess.Process().(*sandbox.Process)
	alone := false
	how := snapshotHow{unsynced: true, frozen: func() { alone = li.Alone(proc) }}
	c, sn, err = s.snapshotBox(b, req, how)
	if err != nil || !alone {
		return c, sn, nil, false, err
	}
	now.id = sn.ID
	return c, sn, &now, false, nil
}

// forkParentScope is the layer b's forkable interpreter puts up after a
// fork (nil when b cannot hold one: Check refuses the fork then).
func forkParentScope(b *box) []byte {
	if p, ok := b.inst.(liveInstance); ok {
		return p.ForkParentScope()
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// checkForkChildren refuses a live fork of b into n children before
// anything is made: the budget (429; fork reserves it again, all or none),
// a sandbox that cannot hold a forkable session.
func (s *Server) checkForkChildren(b *box, n int) (liveInstance, error) {
	shares, err := s.capacity.admitN(b.spec.Limits.MemoryBytes, n)
	if err != nil {
		return liveInstance{}, err
	}
	for _, give := range shares {
		give()
	}
	parent, ok := b.inst.(liveInstance)
	if !ok {
		return liveInstance{}, fmt.Errorf("%w: this runtime's sandboxes cannot be forked live", ErrNoLiveFork)
	}
	if err := parent.CanForkFrom(); err != nil {
		return liveInstance{}, fmt.Errorf("%w: %w", ErrConflictState, err)
	}
	return parent, nil
}

// makeForkChildren makes the children of a live fork of b over its
// snapshot sn, all or none, and what each copy needs to join one: spares
// completed (all of them, used or discarded), the rest made.
func (s *Server) makeForkChildren(b *box, parent liveInstance, c *snapshot.Catalog, sn *snapshot.Snapshot, n int, spares []*spareChild, ph *forkPhases) ([]*box, []session.ForkInto, error) {
	ph.spares = len(spares)
	completed := make([]*box, len(spares))
	errs := make([]error, len(spares)+1)
	var wg sync.WaitGroup
	for i, sc := range spares {
		wg.Go(func() { completed[i], errs[i] = s.completeSpare(c, sn, sc) })
	}
	var made []*box
	if n > len(spares) {
		made, errs[len(spares)] = s.fork(c, sn, &api.ForkRequest{Count: n - len(spares)}, func(sp *sandbox.Spec) { sp.ForkOf = parent.Sandbox })
	}
	wg.Wait()
	boxes := slices.DeleteFunc(append(completed, made...), func(c *box) bool { return c == nil })
	if err := errors.Join(errs...); err != nil {
		return boxes, nil, err // the caller destroys the boxes, then the snapshot
	}
	into := make([]session.ForkInto, 0, n)
	fail := func(err error) ([]*box, []session.ForkInto, error) {
		for _, t := range into {
			t.Target.Discard()
		}
		return boxes, nil, err
	}
	for i, child := range boxes {
		child.mu.Lock()
		child.forkOf = b.id
		child.mu.Unlock()
		sb := child.inst.(liveInstance)
		var t *sandbox.ForkTarget
		var err error
		if i < len(spares) && spares[i].early != nil {
			// Joined early by its copy (session.ForkRequest.Early); the fork
			// discards it on error.
			t = spares[i].early
			err = t.Late(sb.Sandbox)
		} else {
			t, err = sb.ForkTarget()
		}
		if err != nil {
			return fail(err)
		}
		walls := t.Walls // a spare's, made while it idled
		if walls == nil {
			if walls, err = sb.ForkWalls(); err != nil {
				t.Discard()
				return fail(err)
			}
		}
		into = append(into, session.ForkInto{SandboxID: child.id, Target: t, Walls: walls, Launcher: child.launcher()})
	}
	return boxes, into, nil
}

// refuseWhileForked refuses to delete a sandbox while live forks of its
// sessions run: their pid namespaces are nested in its own, so they would
// die with it.
func (s *Server) refuseWhileForked(b *box) error {
	s.mu.Lock()
	var kids []string
	for _, c := range s.boxes {
		c.mu.Lock()
		if c.forkOf == b.id && c.state == api.StateRunning {
			kids = append(kids, c.id)
		}
		c.mu.Unlock()
	}
	s.mu.Unlock()
	if len(kids) == 0 {
		return nil
	}
	slices.Sort(kids)
	return fmt.Errorf("%w: sandbox %s has live forks of its sessions (%v), whose pid namespaces are nested in its own and would die with it; delete them first", ErrConflictState, b.id, kids)
}
