package server

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
	"github.com/tine-run/tine/internal/snapshot"
)

// Spares of live-fork children (ADR 0013, "Amended, session 5"): while a
// forkable session idles, the daemon makes Config.ForkSpares children of
// its sandbox ahead (sandbox.CreateSpare: everything but the root), after
// each of its cells and forks, off the request path; a fork completes a
// spare over its snapshot's layers instead of making a child. A spare is
// not listed; it holds a share of the capacity (a fork's 429 counts the
// spares it will use as admitted already, and a create can be refused
// because of spares), its image lease, and no snapshot. Spares go with
// their session (delete, restart, its last fork), with their sandbox
// (delete, death: a spare's pid namespace is nested in its parent's), and
// at shutdown.

// spareChild is one spare, with what it holds.
type spareChild struct {
	sp      *sandbox.Spare
	req     api.SandboxSpec // what the child will be listed with
	bn      *boxNet
	lease   *image.Lease
	release func() // its capacity share
	// early is the target a fork's copy joined before the spare was
	// complete (session.ForkRequest.Early), nil for none.
	early *sandbox.ForkTarget
}

// forkSpares are a box's spares, by session.
type forkSpares struct {
	mu      sync.Mutex
	ready   map[string][]*spareChild
	filling map[string]chan struct{} // closed when the refill ends
	gen     map[string]int           // bumped when a session's spares are dropped
	closed  bool                     // the box is going: no more spares
}

// spareCount is how many spares a forkable session keeps.
func (s *Server) spareCount() int {
	switch n := s.cfg.ForkSpares; {
	case n < 0:
		return 0
	case n == 0:
		return 1
	default:
		return n
	}
}

// refillSpares makes spares for sess of b in the background, up to the
// count (or the forks it has left), unless that is under way already; it
// returns what is closed when the refill under way ends (nil: none).
func (s *Server) refillSpares(b *box, sess *session.Session) <-chan struct{} {
	want := min(s.spareCount(), sess.ForksLeft())
	if want == 0 {
		return nil
	}
	if _, ok := b.inst.(liveInstance); !ok {
		return nil
	}
	sid, fs := sess.ID(), &b.spares
	fs.mu.Lock()
	if fs.closed || fs.filling[sid] != nil || len(fs.ready[sid]) >= want {
		under := fs.filling[sid]
		fs.mu.Unlock()
		return under
	}
	if fs.filling == nil {
		fs.filling, fs.ready, fs.gen = map[string]chan struct{}{}, map[string][]*spareChild{}, map[string]int{}
	}
	done := make(chan struct{})
	fs.filling[sid] = done
	gen := fs.gen[sid]
	fs.mu.Unlock()
	go func() {
		defer func() {
			fs.mu.Lock()
			delete(fs.filling, sid)
			fs.mu.Unlock()
			close(done)
		}()
		for {
			fs.mu.Lock()
			enough := len(fs.ready[sid]) >= want
			fs.mu.Unlock()
			if enough {
				return
			}
			sc, err := s.makeSpare(b)
			if err != nil {
				s.log.Debug("no spare fork child", "sandbox", b.id, "session", sid, "err", err)
				return
			}
			fs.mu.Lock()
			if fs.closed || fs.gen[sid] != gen {
				fs.mu.Unlock()
				s.discardSpare(sc)
				return
			}
			fs.ready[sid] = append(fs.ready[sid], sc)
			fs.mu.Unlock()
			go s.watchSpare(b, sid, sc)
		}
	}()
	return done
}

// makeSpare makes one spare child of b, with the spec a live fork of its
// sessions gives a child (the snapshot's recipe is b's spec).
func (s *Server) makeSpare(b *box) (*spareChild, error) {
	parent, ok := b.inst.(liveInstance)
	if !ok {
		return nil, fmt.Errorf("%w: this runtime's sandboxes cannot be forked live", ErrNoLiveFork)
	}
	if err := parent.CanForkFrom(); err != nil {
		return nil, err
	}
	if b.desktopNow() != nil {
		return nil, fmt.Errorf("%w: a desktop's fork boots its own desktop; no spares", ErrConflictState)
	}
	if s.isClosing() {
		return nil, ErrShuttingDown
	}
	rec := recipe{Sandbox: b.spec}
	rec.Sandbox.Inject = nil // as snapshotBox's recipe
	sbReq := rec.Sandbox
	release, err := s.capacity.admit(sbReq.Limits.MemoryBytes) // first: a full budget is the usual refusal
	if err != nil {
		return nil, err
	}
	// The layer store before the spare: its mount namespace is a copy of
	// the daemon's when it is made, and the fork's layer must be there
	// (the store is a loop mount, made when the catalog opens).
	c, err := s.snapshots()
	if err != nil {
		release()
		return nil, err
	}
	spec, imgs, img, err := s.replicaSpec(&rec, sbReq, nil, func(sp *sandbox.Spec) { sp.ForkOf = parent.Sandbox })
	if err != nil {
		release()
		return nil, err
	}
	sc := &spareChild{req: sbReq, release: release}
	if img != nil {
		if sc.lease, err = imgs.Use(img); err != nil {
			release()
			return nil, err
		}
	}
	s.setDefaultLimits(spec)
	if sc.bn, err = s.prepareNetwork(&sc.req, spec); err != nil {
		sc.lease.Release()
		release()
		return nil, err
	}
	if sc.sp, err = sandbox.CreateSpare(spec, c.Layers.Root()); err != nil {
		sc.bn.close()
		sc.lease.Release()
		release()
		return nil, err
	}
	return sc, nil
}

// watchSpare frees a spare that died before it was used (its parent's
// PID 1, or its own, killed).
func (s *Server) watchSpare(b *box, sid string, sc *spareChild) {
	<-sc.sp.Done()
	fs := &b.spares
	fs.mu.Lock()
	i := slices.Index(fs.ready[sid], sc)
	if i >= 0 {
		fs.ready[sid] = slices.Delete(fs.ready[sid], i, i+1)
	}
	fs.mu.Unlock()
	if i >= 0 {
		s.discardSpare(sc)
	}
}

// discardSpare kills a spare and frees what it holds.
func (s *Server) discardSpare(sc *spareChild) {
	sc.sp.Discard()
	sc.bn.close()
	sc.lease.Release()
	sc.release()
}

// claimSpares takes up to n of sid's spares for a fork, and the
// generation of sid's spares they belong to (returnSpares).
func (s *Server) claimSpares(b *box, sid string, n int) ([]*spareChild, int) {
	fs := &b.spares
	fs.mu.Lock()
	defer fs.mu.Unlock()
	k := min(n, len(fs.ready[sid]))
	out := slices.Clone(fs.ready[sid][:k])
	if k > 0 {
		fs.ready[sid] = slices.Delete(fs.ready[sid], 0, k)
	}
	return out, fs.gen[sid]
}

// awaitRefill waits (at most d) for a refill of sid's spares under way,
// whose spare holds a capacity share already; false if there was none.
func (s *Server) awaitRefill(b *box, sid string, d time.Duration) bool {
	fs := &b.spares
	fs.mu.Lock()
	done := fs.filling[sid]
	fs.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
	case <-time.After(d):
	}
	return true
}

// returnSpares gives back spares claimed by a fork that did not use them
// (refused before anything was made); they are discarded if their
// session's spares were dropped meanwhile.
func (s *Server) returnSpares(b *box, sid string, gen int, list []*spareChild) {
	if len(list) == 0 {
		return
	}
	fs := &b.spares
	fs.mu.Lock()
	var drop []*spareChild
	for _, sc := range list {
		select {
		case <-sc.sp.Done(): // died meanwhile: its watcher found it claimed
			drop = append(drop, sc)
			continue
		default:
		}
		if fs.closed || fs.ready == nil || fs.gen[sid] != gen {
			drop = append(drop, sc)
			continue
		}
		fs.ready[sid] = append(fs.ready[sid], sc)
	}
	fs.mu.Unlock()
	for _, sc := range drop {
		s.discardSpare(sc)
	}
}

// dropSpares discards sid's spares of b, or all of them and no more for
// b when sid is "" (b is going).
func (s *Server) dropSpares(b *box, sid string) {
	fs := &b.spares
	fs.mu.Lock()
	var drop []*spareChild
	if sid == "" {
		fs.closed = true
		for _, list := range fs.ready {
			drop = append(drop, list...)
		}
		clear(fs.ready)
	} else if fs.gen != nil {
		fs.gen[sid]++
		drop = fs.ready[sid]
		delete(fs.ready, sid)
	}
	fs.mu.Unlock()
	var wg sync.WaitGroup
	for _, sc := range drop {
		wg.Go(func() { s.discardSpare(sc) })
	}
	wg.Wait()
}

// completeSpare makes a live fork's child of sc over sn's layers: the
// box it is listed as holds a use of sn, as a child fork makes.
func (s *Server) completeSpare(c *snapshot.Catalog, sn *snapshot.Snapshot, sc *spareChild) (*box, error) {
	use, err := c.Use(sn.ID)
	if err != nil {
		s.discardSpare(sc)
		return nil, err
	}
	sb, err := sc.sp.Complete(layerPaths(c, sn))
	var inst Instance
	if err == nil {
		inst = liveInstance{sb}
	}
	b, err := s.admitInstance(sc.req, inst, err, sc.bn, func() { sc.release(); use() }, sn.ID)
	if err != nil {
		sc.lease.Release()
		return nil, err
	}
	b.mu.Lock()
	b.lease = sc.lease
	b.mu.Unlock()
	return b, nil
}

// DefaultForkAheadDelay is how long a forkable session idles after a
// cell, or after a fork's spare is made again, before its interpreter
// forks a copy ahead (Config.ForkAheadDelay): a client sending cells back
// to back does not wait for the interpreter's fork (it holds the
// session's turn, milliseconds). It also bounds how long a fork's spare
// refill waits for a child's first cell (refillAfterFirstCell).
const DefaultForkAheadDelay = 20 * time.Millisecond

// refillAfterFirstCell refills sess's spares after a live fork into
// children once one of them has answered its first cell, or once the
// fork-ahead delay has passed: a spare's start (a sandbox's, milliseconds
// of CPU) would otherwise compete with that cell, which a client sends at
// once (ADR 0013, session 7: the child's first cell 4.2–6.3 → 2.2–2.4 ms).
// The interpreter forks ahead once the spare is made, so the two do not
// compete either, nor with the child's next cells (forking ahead with the
// refill took its second cell from 1.5 to 6.7 ms: ADR 0013, session 8).
func (s *Server) refillAfterFirstCell(b *box, sess *session.Session, children []*box) {
	refill := sync.OnceFunc(func() {
		done := s.refillSpares(b, sess)
		go func() {
			if done != nil {
				<-done
			}
			s.forkAhead(b, sess)
		}()
	})
	for _, c := range children {
		c.mu.Lock()
		c.afterCell = refill
		c.mu.Unlock()
	}
	time.AfterFunc(s.forkAheadDelay(), refill)
}

// forkAheadDelay is Config.ForkAheadDelay with its default (at least 0).
func (s *Server) forkAheadDelay() time.Duration {
	if s.cfg.ForkAheadDelay == 0 {
		return DefaultForkAheadDelay
	}
	return max(s.cfg.ForkAheadDelay, 0)
}

// forkAhead has sess's interpreter fork a copy of itself ahead of its
// next live fork once it has idled Config.ForkAheadDelay (session.ForkAhead),
// when the sandbox gets spares: the copy is a fork child's session but
// for its walls, as a spare is a fork child but for its root.
func (s *Server) forkAhead(b *box, sess *session.Session) {
	if s.cfg.NoForkAhead || s.spareCount() == 0 || sess.ForksLeft() == 0 {
		return
	}
	if _, ok := b.inst.(liveInstance); !ok || b.desktopNow() != nil {
		return
	}
	time.AfterFunc(s.forkAheadDelay(), func() {
		b.spares.mu.Lock()
		closed := b.spares.closed
		b.spares.mu.Unlock()
		if closed || s.isClosing() {
			return
		}
		if err := sess.ForkAhead(); err != nil {
			s.log.Debug("no copy forked ahead", "sandbox", b.id, "session", sess.ID(), "err", err)
		}
	})
}
