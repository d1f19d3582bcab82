package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/checkpoint"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/snapshot"
	"github.com/tine-run/tine/internal/store"
)

// maxForks bounds one fork request; the capacity budget bounds them all.
const maxForks = 256

// snapshotter is what an Instance offers for the file tier
// (*sandbox.Sandbox does).
type snapshotter interface {
	Freeze() error
	Thaw() error
	OpenUpper() (*os.File, error)
}

// recipe is what a snapshot keeps of its source's spec: enough to make a
// fork of the same kind with the same settings.
type recipe struct {
	Sandbox api.SandboxSpec  `json:"sandbox"`
	Desktop *api.DesktopSpec `json:"desktop,omitempty"`
	// Display is a desktop's X display, which a memory fork's restored
	// guest serves.
	Display string `json:"display,omitempty"`
}

// snapshots opens the catalog under the state directory on first use (it
// may mount the layer store's filesystem, which a daemon that never
// snapshots should not pay for).
func (s *Server) snapshots() (*snapshot.Catalog, error) {
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	if s.catalog != nil {
		return s.catalog, nil
	}
	if s.cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: snapshots need a state directory (tine serve --state-dir)", ErrNoSnapshots)
	}
	c, err := snapshot.Open(s.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot catalog in %s: %w", s.cfg.StateDir, err)
	}
	s.catalog = c
	return c, nil
}

func (s *Server) snapshotInfo(c *snapshot.Catalog, sn *snapshot.Snapshot) api.Snapshot {
	info := api.Snapshot{
		ID: sn.ID, Name: sn.Name, Tier: sn.Tier, Kind: sn.Kind, Source: sn.Source, Parent: sn.Parent,
		CreatedAt: sn.CreatedAt, Depth: len(sn.Layers), Bytes: sn.Bytes, PausedMs: sn.PausedMs, Forks: c.Users(sn.ID),
	}
	if sn.Memory != nil {
		info.Processes = sn.Memory.Processes
	}
	return info
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var req api.SnapshotRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	c, sn, err := s.takeSnapshot(b, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.snapshotInfo(c, sn))
	return nil
}

// maxDepth bounds how many layers a fork stacks: overlayfs takes its
// lower directories in one mount option string of at most a page. A
// chain deeper than snapshot.FlattenDepth is merged into one layer when
// it is snapshotted, so only a parent's stack of more than maxDepth-1
// layers (made by a tine that did not flatten) can still reach it.
const maxDepth = 24

// takeSnapshot captures b: frozen, its writable layer committed to the
// store, thawed.
func (s *Server) takeSnapshot(b *box, req api.SnapshotRequest) (*snapshot.Catalog, *snapshot.Snapshot, error) {
	return s.snapshotBox(b, req, snapshotHow{})
}

// snapshotHow is how a live fork's snapshot differs from takeSnapshot's.
type snapshotHow struct {
	// unsynced commits without waiting for the disk (snapshot.Draft.
	// Unsynced: good until the host goes down, as a live fork's children
	// are).
	unsynced bool
	// frozen, when not nil, runs while the sandbox is frozen, before its
	// files are copied.
	frozen func()
}

// snapshotBox is takeSnapshot, as how says.
func (s *Server) snapshotBox(b *box, req api.SnapshotRequest, how snapshotHow) (*snapshot.Catalog, *snapshot.Snapshot, error) {
	tier := snapshot.TierFS
	switch req.Tier {
	case "", api.TierFS:
	case api.TierMemory:
		tier = snapshot.TierMemory
	default:
		return nil, nil, fmt.Errorf("%w: tier %q: want \"fs\" or \"memory\"", ErrInvalidArgument, req.Tier)
	}
	if len(req.Name) > 256 {
		return nil, nil, fmt.Errorf("%w: name is %d bytes: at most 256", ErrInvalidArgument, len(req.Name))
	}
	snap, ok := b.inst.(snapshotter)
	if !ok {
		return nil, nil, fmt.Errorf("%w: this runtime's sandboxes cannot be snapshotted", ErrNoSnapshots)
	}
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	var mem checkpoint.Sandbox
	if tier == snapshot.TierMemory {
		var err error
		if mem, err = s.checkpointable(b); err != nil {
			return nil, nil, err
		}
	}
	c, err := s.snapshots()
	if err != nil {
		return nil, nil, err
	}
	var parentLayers []store.Digest
	if b.forkedFrom != "" {
		p, err := c.Get(b.forkedFrom)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox %s: the snapshot it was forked from: %w", b.id, err)
		}
		parentLayers = p.Layers
	}
	if len(parentLayers)+1 > maxDepth {
		return nil, nil, fmt.Errorf("%w: sandbox %s is %d forks deep; a snapshot of it would stack %d layers, at most %d", ErrConflictState, b.id, len(parentLayers), len(parentLayers)+1, maxDepth)
	}
	rec := recipe{Sandbox: b.spec}
	rec.Sandbox.Inject = nil // secrets never reach the disk; forks go without them
	if d := b.desktopNow(); d != nil {
		rec.Desktop, rec.Display = d.spec, d.display
	}
	spec, _ := json.Marshal(rec)

	draft, err := c.Begin(snapshot.NewID())
	if err != nil {
		return nil, nil, err
	}
	if how.unsynced {
		draft.Unsynced()
	}
	committed := false
	defer func() {
		if !committed {
			draft.Abort()
		}
	}()
	// The processes first (criu leaves each tree stopped), then the files,
	// then everything runs on: files and memory are of one instant.
	t0 := time.Now()
	var dumped *checkpoint.Dumped
	if mem != nil {
		if dumped, err = dumpMemory(mem, draft); err != nil {
			return nil, nil, fmt.Errorf("snapshot sandbox %s: %w", b.id, err)
		}
		defer dumped.Resume()
	}
	if err := snap.Freeze(); err != nil {
		return nil, nil, fmt.Errorf("freeze sandbox %s: %w", b.id, err)
	}
	if how.frozen != nil {
		how.frozen()
	}
	var paused time.Duration
	thaw := func() {
		if paused == 0 {
			snap.Thaw()
			dumped.Resume()
			paused = time.Since(t0)
		}
	}
	layer, err := func() (store.Layer, error) {
		defer thaw()
		upper, err := snap.OpenUpper()
		if err != nil {
			return store.Layer{}, err
		}
		defer upper.Close()
		// The sandbox runs again once its files are copied; the sync to
		// disk happens while it runs.
		return draft.CommitLayer(upper, 0, thaw)
	}()
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot sandbox %s: %w", b.id, err)
	}
	layers, bytes := append([]store.Digest{layer.Digest}, parentLayers...), layer.Bytes
	if len(layers) > snapshot.FlattenDepth {
		// A fork of a fork of ...: the chain becomes one layer, so forks
		// of it stack one again (the golden runs on meanwhile).
		t := time.Now()
		below := []string{"/"} // the host's root, which the host view only hides parts of
		if rec.Sandbox.Image != "" {
			if _, img, err := s.resolveImage(context.Background(), rec.Sandbox.Image); err == nil {
				below = img.Paths
			} else {
				below = nil // keep every whiteout
			}
		}
		merged, err := draft.MergeLayers(layers, below)
		if err != nil {
			return nil, nil, fmt.Errorf("snapshot sandbox %s: flatten its %d layers: %w", b.id, len(layers), err)
		}
		s.log.Info("fork chain flattened", "sandbox", b.id, "layers", len(layers), "bytes", merged.Bytes, "ms", time.Since(t).Milliseconds())
		layers, bytes = []store.Digest{merged.Digest}, merged.Bytes
	}
	kind := "sandbox"
	if rec.Desktop != nil {
		kind = "desktop"
	}
	sn := &snapshot.Snapshot{
		Name: req.Name, Tier: tier, Kind: kind, Source: b.id, Parent: b.forkedFrom,
		CreatedAt: time.Now(), Layers: layers,
		Bytes: bytes, Spec: spec,
	}
	if dumped != nil {
		sn.Bytes += dumped.Bytes
		sn.Memory = &snapshot.Memory{Bytes: dumped.Bytes, Processes: dumped.Processes}
	}
	sn.PausedMs = float64(paused.Microseconds()) / 1000
	if err := draft.Commit(sn); err != nil {
		return nil, nil, err
	}
	committed = true
	if err := s.holdImage(rec.Sandbox.Image, sn.ID); err != nil {
		c.Delete(sn.ID)
		return nil, nil, fmt.Errorf("snapshot sandbox %s: keep its image: %w", b.id, err)
	}
	s.log.Info("snapshot taken", "id", sn.ID, "sandbox", b.id, "tier", sn.Tier, "bytes", sn.Bytes, "paused_ms", sn.PausedMs)
	return c, sn, nil
}

// lookupSnapshot finds the snapshot a request names.
func (s *Server) lookupSnapshot(r *http.Request) (*snapshot.Catalog, *snapshot.Snapshot, error) {
	c, err := s.snapshots()
	if err != nil {
		return nil, nil, err
	}
	id := r.PathValue("sid")
	sn, err := c.Get(id)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %q (list them with GET /v1/snapshots)", ErrNoSnapshot, id)
	}
	return c, sn, nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	c, err := s.snapshots()
	if err != nil {
		return err
	}
	list := api.SnapshotList{Snapshots: []api.Snapshot{}}
	for _, sn := range c.List() {
		list.Snapshots = append(list.Snapshots, s.snapshotInfo(c, sn))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	c, sn, err := s.lookupSnapshot(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.snapshotInfo(c, sn))
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	c, sn, err := s.lookupSnapshot(r)
	if err != nil {
		return err
	}
	if err := c.Delete(sn.ID); err != nil {
		return err
	}
	var rec recipe
	if json.Unmarshal(sn.Spec, &rec) == nil {
		s.unholdImage(rec.Sandbox.Image, sn.ID)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) forkSnapshot(w http.ResponseWriter, r *http.Request) error {
	var req api.ForkRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	t0 := time.Now()
	c, sn, err := s.lookupSnapshot(r)
	if err != nil {
		return err
	}
	return s.answerFork(w, r, c, sn, &req, t0)
}

// forkSandbox is snapshot and fork in one call.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.ForkRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := forkCount(&req); err != nil {
		return err // before the snapshot is taken
	}
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	c, sn, err := s.takeSnapshot(b, api.SnapshotRequest{Tier: req.Tier})
	done()
	if err != nil {
		return err
	}
	return s.answerFork(w, r, c, sn, &req, t0)
}

func forkCount(req *api.ForkRequest) (int, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 1 || n > maxForks {
		return 0, fmt.Errorf("%w: count %d: want 1 to %d", ErrInvalidArgument, req.Count, maxForks)
	}
	return n, nil
}

func (s *Server) answerFork(w http.ResponseWriter, r *http.Request, c *snapshot.Catalog, sn *snapshot.Snapshot, req *api.ForkRequest, t0 time.Time) error {
	boxes, err := s.fork(c, sn, req, nil)
	if err != nil {
		return err
	}
	if err := s.abandoned(r, boxes...); err != nil {
		return err
	}
	out := api.ForkResult{Snapshot: s.snapshotInfo(c, sn), ForkMs: float64(time.Since(t0).Microseconds()) / 1000}
	for _, b := range boxes {
		if b.desktopNow() != nil {
			out.Desktops = append(out.Desktops, s.desktopInfo(b))
		} else {
			out.Sandboxes = append(out.Sandboxes, b.info())
		}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// replicaSpec is the spec of a replica of a sandbox of rec made from
// sbReq, over layers (topmost first), adjusted by adjust when not nil,
// with the source's image (by digest) as the base under the layers.
func (s *Server) replicaSpec(rec *recipe, sbReq api.SandboxSpec, layers []string, adjust func(*sandbox.Spec)) (*sandbox.Spec, *image.Store, *image.Image, error) {
	spec, err := specFromAPI(&sbReq)
	if err != nil {
		return nil, nil, nil, err
	}
	spec.Layers = append(spec.Layers, layers...)
	if rec.Desktop != nil {
		spec.Setuid = sessionSetuid(rec.Desktop)
	}
	if adjust != nil {
		adjust(spec)
	}
	var imgs *image.Store
	var img *image.Image
	if sbReq.Image != "" {
		if imgs, img, err = s.resolveImage(context.Background(), sbReq.Image); err != nil {
			return nil, nil, nil, err
		}
		if err := img.Apply(spec, image.ApplyOptions{WorkdirSet: sbReq.Workdir != ""}); err != nil {
			return nil, nil, nil, err
		}
	}
	return spec, imgs, img, nil
}

// layerPaths are the paths of sn's layers, topmost first.
func layerPaths(c *snapshot.Catalog, sn *snapshot.Snapshot) []string {
	out := make([]string, 0, len(sn.Layers))
	for _, d := range sn.Layers {
		out = append(out, c.Layers.Path(d))
	}
	return out
}

// fork makes count replicas of sn, all or none: the budget is reserved for
// all of them before the first is made, and a replica that fails takes
// the others down with it.
// adjust, when not nil, changes the replicas' spec (a live fork's
// children: sandbox.Spec.ForkOf).
func (s *Server) fork(c *snapshot.Catalog, sn *snapshot.Snapshot, req *api.ForkRequest, adjust func(*sandbox.Spec)) ([]*box, error) {
	n, err := forkCount(req)
	if err != nil {
		return nil, err
	}
	var rec recipe
	if err := json.Unmarshal(sn.Spec, &rec); err != nil {
		return nil, fmt.Errorf("snapshot %s: its spec: %w", sn.ID, err)
	}
	sbReq := rec.Sandbox
	if req.Limits != nil {
		sbReq.Limits = *req.Limits
	}
	if req.TTLSeconds != nil {
		sbReq.TTLSeconds = *req.TTLSeconds
	}
	if req.IdleTimeoutSeconds != nil {
		sbReq.IdleTimeoutSeconds = *req.IdleTimeoutSeconds
	}
	sbReq.Env = append(append([]string(nil), sbReq.Env...), req.Env...)
	if req.Hostname != "" {
		sbReq.Hostname = req.Hostname
	}
	spec, imgs, img, err := s.replicaSpec(&rec, sbReq, layerPaths(c, sn), adjust)
	if err != nil {
		return nil, err
	}
	if s.isClosing() {
		return nil, ErrShuttingDown
	}
	shares, err := s.capacity.admitN(sbReq.Limits.MemoryBytes, n)
	if err != nil {
		return nil, err
	}
	boxes := make([]*box, n)
	errs := make([]error, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			use, err := c.Use(sn.ID)
			if err != nil {
				shares[i]()
				errs[i] = err
				return
			}
			var lease *image.Lease
			if img != nil {
				if lease, err = imgs.Use(img); err != nil {
					shares[i]()
					use()
					errs[i] = err
					return
				}
			}
			release := func() { shares[i](); use() }
			one := *spec
			b, err := s.startAdmitted(sbReq, &one, release, sn.ID)
			if err != nil {
				lease.Release()
				errs[i] = err
				return
			}
			b.mu.Lock()
			b.lease = lease
			b.mu.Unlock()
			boxes[i] = b
			if sn.Tier == snapshot.TierMemory {
				if errs[i] = s.restoreMemory(c, sn, b); errs[i] != nil {
					s.destroy(b, "its processes were not restored")
				} else if rec.Desktop != nil {
					s.adoptDesktop(b, &rec, t0)
				}
				return
			}
			if rec.Desktop != nil {
				if errs[i] = s.bootDesktop(b, rec.Desktop, t0); errs[i] != nil {
					s.destroy(b, "its desktop did not start")
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, b := range boxes {
			if b != nil && errs[i] == nil {
				s.destroy(b, "another replica of its fork failed")
			}
		}
		return nil, fmt.Errorf("fork snapshot %s: %w", sn.ID, err)
	}
	s.log.Info("snapshot forked", "id", sn.ID, "count", n)
	return boxes, nil
}
