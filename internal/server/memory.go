package server

// The memory tier of snapshots: the source's process trees dumped by criu
// next to its file layer, and restored into each replica
// (internal/checkpoint, ADR 0013).

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
	if b.desktopNow() != nil {
		return nil, fmt.Errorf("%w: the memory tier of desktops is not built yet (their X server's shared memory is System V IPC, ADR 0013); take an fs snapshot", ErrNoSnapshots)
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

// dumpMemory dumps cs's process trees into the draft; the trees run on.
func dumpMemory(cs checkpoint.Sandbox, draft *snapshot.Draft) (*checkpoint.Dumped, error) {
	return memoryTier().Dump(cs, filepath.Join(draft.Dir(), memoryDir))
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
