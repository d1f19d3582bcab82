package server

// The memory tier of snapshots: the source's process trees dumped by criu
// next to its file layer, and restored into each replica
// (internal/checkpoint, ADR 0016).

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/tine-run/tine/internal/checkpoint"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/snapshot"
)

// memoryTier finds criu once, on the first memory snapshot or fork: its
// check runs `criu check`, which a daemon that never asks should not pay.
var memoryTier = sync.OnceValue(checkpoint.New)

// A live sandbox is what the memory tier dumps and restores into.
var _ checkpoint.Sandbox = (*sandbox.Sandbox)(nil)

// memoryDir is where a snapshot's criu images live, in its directory.
const memoryDir = "memory"

// checkpointable returns b's instance as the memory tier needs it, or why
// it cannot be dumped.
func (s *Server) checkpointable(b *box) (checkpoint.Sandbox, error) {
	if err := memoryTier().Usable(); err != nil {
		return nil, err
	}
	if n := b.waitACIClosed(aciCloseGrace); n > 0 {
		return nil, fmt.Errorf("%w: desktop %s has %d open ACI session(s) (or viewer pages): each is a connection from the daemon into its guest, which criu cannot carry into a replica; close them before a memory snapshot (the replicas' guests take new sessions at once), or take an fs snapshot", ErrConflictState, b.id, n)
	}
	if b.spec.UserNS {
		return nil, fmt.Errorf("%w: the memory tier does not restore sandboxes in a user namespace yet; take an fs snapshot", ErrNoSnapshots)
	}
	cs, ok := b.inst.(checkpoint.Sandbox)
	if !ok {
		return nil, fmt.Errorf("%w: this runtime's sandboxes cannot be checkpointed", ErrNoSnapshots)
	}
	return cs, nil
}

// aciCloseGrace is how long a memory snapshot waits for ACI sessions that
// are closing: a client's Close returns before the daemon's proxy has
// seen the end.
const aciCloseGrace = time.Second

// countACI counts an ACI session of b until the returned func is called.
func (b *box) countACI(n int) func() {
	b.mu.Lock()
	b.aci += n
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.aci -= n
		b.mu.Unlock()
	}
}

// waitACIClosed returns how many ACI sessions b still has after waiting
// up to grace for them to end.
func (b *box) waitACIClosed(grace time.Duration) int {
	deadline := time.Now().Add(grace)
	for {
		b.mu.Lock()
		n := b.aci
		b.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dumpMemory dumps cs's process trees into the draft; the trees run on.
func dumpMemory(cs checkpoint.Sandbox, draft *snapshot.Draft) (*checkpoint.Dumped, error) {
	return memoryTier().Dump(cs, filepath.Join(draft.Dir(), memoryDir))
}

// adoptDesktop makes b, a replica whose processes (the guest, its X server
// and apps) were just restored, the desktop rec describes: its guest
// already serves the ACI.
func (s *Server) adoptDesktop(b *box, rec *recipe, t0 time.Time) {
	d := &desktop{display: rec.Display, width: rec.Desktop.Width, height: rec.Desktop.Height, spec: rec.Desktop,
		readyMs: float64(time.Since(t0).Microseconds()) / 1000}
	b.mu.Lock()
	b.desktop = d
	b.mu.Unlock()
	s.log.Info("desktop restored", "id", b.id, "ms", d.readyMs)
}

// restoreMemory restores sn's process trees into b, a fresh replica made
// from sn's files.
func (s *Server) restoreMemory(c *snapshot.Catalog, sn *snapshot.Snapshot, b *box) error {
	cs, ok := b.inst.(checkpoint.Sandbox)
	if !ok {
		return fmt.Errorf("%w: this runtime's sandboxes cannot be restored", ErrNoSnapshots)
	}
	t0 := time.Now()
	r, err := memoryTier().Restore(cs, filepath.Join(c.Dir(sn.ID), memoryDir))
	if err != nil {
		return fmt.Errorf("restore the processes of snapshot %s: %w", sn.ID, err)
	}
	s.log.Debug("processes restored", "snapshot", sn.ID, "sandbox", b.id, "processes", r.Processes, "ms", float64(time.Since(t0).Microseconds())/1000)
	return nil
}
