package server

import (
	"fmt"
	"math"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
)

// box is one sandbox of the table.
type box struct {
	id      string
	spec    api.SandboxSpec
	inst    Instance
	created time.Time
	ttl     time.Duration
	idle    time.Duration
	release func() // gives its share of the budget back

	destroyOnce sync.Once
	// snapMu is held by a snapshot for writing, and by a file request for
	// reading: snapshots of one sandbox never overlap (one would thaw the
	// other's freeze, two criu would seize one tree), and the daemon
	// writes no file into a sandbox while criu starts in it (its loader
	// must find no /etc/ld.so.preload; checkpoint.Tier freezes only the
	// sandbox's own processes).
	snapMu sync.RWMutex

	mu         sync.Mutex
	state      api.State
	lastActive time.Time
	busy       int          // exec and file requests in flight
	execs      int          // commands running
	desktop    *desktop     // set once a desktop's guest is ready
	aci        int          // ACI sessions proxied to its guest now
	sessions   *session.Set // its code-interpreter sessions, made on first use

	forkedFrom string        // the snapshot it was forked from
	keptFork   *keptSnapshot // its last live fork's snapshot, for the next
	forkOf     string        // the sandbox whose session it is a live fork of
	lease      *image.Lease  // the image it runs from, kept from removal

	net *boxNet // its network (nil: loopback without published ports)

	spares forkSpares // children made ahead for its forkable sessions
	// afterCell runs once its next cell is answered (a live fork's child:
	// its parent's spares refilled, refillAfterFirstCell).
	afterCell func()
}

// cellAnswered runs what waits for b's next cell to be answered.
func (b *box) cellAnswered() {
	b.mu.Lock()
	f := b.afterCell
	b.afterCell = nil
	b.mu.Unlock()
	if f != nil {
		f()
	}
}

// info describes b for the API.
func (b *box) info() api.Sandbox {
	b.mu.Lock()
	a := api.Sandbox{
		ID: b.id, State: b.state, Pid: b.inst.Pid(), CreatedAt: b.created,
		LastActiveAt: b.lastActive, Execs: b.execs, Spec: redacted(b.spec), ForkedFrom: b.forkedFrom,
		Network: b.net.info(),
	}
	if b.ttl > 0 {
		t := b.created.Add(b.ttl)
		a.ExpiresAt = &t
	}
	if b.idle > 0 && b.busy == 0 {
		t := b.lastActive.Add(b.idle)
		a.IdleExpiresAt = &t
	}
	running := b.state == api.StateRunning
	b.mu.Unlock()
	if running {
		u := b.inst.Usage()
		a.Usage = api.Usage{MemoryBytes: u.MemoryBytes, PeakMemoryBytes: u.PeakMemoryBytes, Pids: u.Pids, CPUTimeMs: u.CPUTimeMs}
	}
	return a
}

// expire says whether b is due to be destroyed at now, and why; a due box
// is marked stopping, so that it is claimed once.
func (b *box) expire(now time.Time) (why string, due bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == api.StateStopping:
		return "", false
	case b.ttl > 0 && !now.Before(b.created.Add(b.ttl)):
		why = "ttl"
	case b.idle > 0 && b.busy == 0 && !now.Before(b.lastActive.Add(b.idle)):
		why = "idle"
	default:
		return "", false
	}
	b.state = api.StateStopping
	return why, true
}

// durationField is n units of a request's field as a duration: a value
// that is negative or does not fit a time.Duration is ErrInvalidArgument
// naming the field.
func durationField(field string, n int64, unit time.Duration) (time.Duration, error) {
	if most := int64(math.MaxInt64 / unit); n < 0 || n > most {
		return 0, fmt.Errorf("%w: %s %d: want 0 (none) to %d", ErrInvalidArgument, field, n, most)
	}
	return time.Duration(n) * unit, nil
}

// specFromAPI checks a create request and turns it into a sandbox spec.
// A one-shot run's request goes through it too (specFromRun), so that both
// routes refuse the same specs.
func specFromAPI(a *api.SandboxSpec) (*sandbox.Spec, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	if _, _, _, err := checkNetwork(a); err != nil {
		return nil, err
	}
	switch {
	case a.DiskBytes < 0:
		return nil, bad("disk_bytes %d: want a positive size in bytes, or 0 for the default", a.DiskBytes)
	case a.Limits.MemoryBytes < 0 || a.Limits.Pids < 0:
		return nil, bad("limits must be positive, or 0 for none")
	case !(a.Limits.CPUs >= 0 && a.Limits.CPUs <= cgroup.MaxCPUs):
		return nil, bad("limits.cpus %v: want 0 (none) to %d cores", a.Limits.CPUs, cgroup.MaxCPUs)
	case a.TTLSeconds < 0 || a.IdleTimeoutSeconds < 0:
		return nil, bad("ttl_seconds and idle_timeout_seconds must be positive, or 0 for none")
	case a.Workdir != "" && !path.IsAbs(a.Workdir):
		return nil, bad("workdir %q must be an absolute path", a.Workdir)
	case a.RootFS != "" && !path.IsAbs(a.RootFS):
		// Relative to what? Not to the daemon's own working directory.
		return nil, bad("rootfs %q must be an absolute path", a.RootFS)
	}
	if _, err := durationField("ttl_seconds", a.TTLSeconds, time.Second); err != nil {
		return nil, err
	}
	if _, err := durationField("idle_timeout_seconds", a.IdleTimeoutSeconds, time.Second); err != nil {
		return nil, err
	}
	s := &sandbox.Spec{
		Env: a.Env, Workdir: a.Workdir, Hostname: a.Hostname, RootFS: a.RootFS, DiskBytes: a.DiskBytes,
		Limits:  cgroup.Limits{MemoryBytes: a.Limits.MemoryBytes, CPUs: a.Limits.CPUs, Pids: a.Limits.Pids},
		Seccomp: seccomp.Default, UserNS: a.UserNS,
	}
	if s.DiskBytes == 0 {
		s.DiskBytes = sandbox.DefaultDisk
	}
	switch a.HostView {
	case "", string(sandbox.HostViewOS), string(sandbox.HostViewFull):
		s.HostView = sandbox.HostView(a.HostView)
	default:
		return nil, bad("host_view %q: want \"os\" (the operating system only, the default) or \"full\" (the whole host root)", a.HostView)
	}
	if a.Seccomp != "" {
		m, err := seccomp.ParseMode(a.Seccomp)
		if err != nil {
			return nil, bad("seccomp: %v", err)
		}
		s.Seccomp = m
	}
	for _, b := range a.Binds {
		if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) {
			return nil, bad("bind %q -> %q: source and target must be absolute paths", b.Source, b.Target)
		}
		s.Binds = append(s.Binds, sandbox.Bind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// setDefaultLimits gives spec the daemon's limits for those it does not
// ask for (applied where cgroups are driven, see sandbox.Spec).
func (s *Server) setDefaultLimits(spec *sandbox.Spec) {
	spec.DefaultLimits = cgroup.Limits{MemoryBytes: s.cfg.DefaultMemoryBytes, Pids: s.cfg.DefaultPids}
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.SandboxSpec
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	spec, err := specFromAPI(&req)
	if err != nil {
		return err
	}
	lease, digest, err := s.useImage(r.Context(), req.Image, spec, image.ApplyOptions{WorkdirSet: req.Workdir != ""})
	if err != nil {
		return err
	}
	if digest != "" {
		req.Image = digest
	}
	b, err := s.startBox(req, spec)
	if err != nil {
		lease.Release()
		return err
	}
	b.mu.Lock()
	b.lease = lease
	b.mu.Unlock()
	if err := s.abandoned(r, b); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b.info())
	return nil
}

// abandoned destroys b when the client that asked for it has gone: nobody
// received its id, so nobody would ever delete it, and it would hold its
// share of the budget until a TTL it may not have.
func (s *Server) abandoned(r *http.Request, boxes ...*box) error {
	if r.Context().Err() == nil {
		return nil
	}
	for _, b := range boxes {
		s.destroy(b, "its client went away before the answer")
	}
	return fmt.Errorf("the client went away: %w", r.Context().Err())
}

// startBox admits a sandbox within the budget, creates it and adds it to
// the table.
func (s *Server) startBox(req api.SandboxSpec, spec *sandbox.Spec) (*box, error) {
	if s.isClosing() {
		return nil, ErrShuttingDown
	}
	release, err := s.capacity.admit(req.Limits.MemoryBytes)
	if err != nil {
		return nil, err
	}
	return s.startAdmitted(req, spec, release, "")
}

// startAdmitted creates a sandbox whose share of the budget is reserved
// (release gives it back) and adds it to the table; forkedFrom names the
// snapshot it is a fork of.
func (s *Server) startAdmitted(req api.SandboxSpec, spec *sandbox.Spec, release func(), forkedFrom string) (*box, error) {
	s.setDefaultLimits(spec)
	bn, err := s.prepareNetwork(&req, spec)
	if err != nil {
		release()
		return nil, err
	}
	inst, err := s.rt.Create(spec)
	return s.admitInstance(req, inst, err, bn, release, forkedFrom)
}

// admitInstance lists inst, a sandbox made (or not: err) from req with
// network bn, holding release; startAdmitted's and a spare's second half.
func (s *Server) admitInstance(req api.SandboxSpec, inst Instance, err error, bn *boxNet, release func(), forkedFrom string) (*box, error) {
	if err == nil {
		if err = bn.started(inst); err != nil {
			inst.Destroy()
		}
	}
	if err != nil {
		bn.close()
		release()
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	now := time.Now()
	b := &box{
		id: newID(), spec: req, inst: inst, created: now, lastActive: now,
		ttl:     time.Duration(req.TTLSeconds) * time.Second,
		idle:    time.Duration(req.IdleTimeoutSeconds) * time.Second,
		release: release, state: api.StateRunning, forkedFrom: forkedFrom, net: bn,
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		inst.Destroy()
		bn.close()
		release()
		return nil, ErrShuttingDown
	}
	s.boxes[b.id] = b
	s.mu.Unlock()
	go s.watch(b)
	s.log.Info("sandbox created", "id", b.id, "pid", inst.Pid(), "memory_limit", req.Limits.MemoryBytes, "ttl_s", req.TTLSeconds, "idle_s", req.IdleTimeoutSeconds)
	return b, nil
}

// watch notices a sandbox that died on its own: it frees what the sandbox
// held and keeps it listed as exited until it is deleted or expires.
func (s *Server) watch(b *box) {
	<-b.inst.Done()
	b.mu.Lock()
	running := b.state == api.StateRunning
	b.mu.Unlock()
	if !running {
		return // being destroyed
	}
	s.log.Warn("sandbox died on its own", "id", b.id, "pid", b.inst.Pid())
	b.closeSessions()
	if err := b.inst.Destroy(); err != nil {
		s.log.Error("clean up dead sandbox", "id", b.id, "err", err)
	}
	if err := b.net.close(); err != nil {
		s.log.Error("clean up dead sandbox's network", "id", b.id, "err", err)
	}
	// Its budget is free before anyone can see it exited.
	b.release()
	b.mu.Lock()
	if b.state == api.StateRunning {
		b.state = api.StateExited
	}
	b.mu.Unlock()
}

// destroy kills b, frees what it held and removes it from the table. Calls
// after the first wait for it to finish.
func (s *Server) destroy(b *box, why string) {
	b.destroyOnce.Do(func() {
		b.mu.Lock()
		b.state = api.StateStopping
		b.mu.Unlock()
		s.dropSpares(b, "")
		b.closeSessions()
		if err := b.inst.Destroy(); err != nil {
			s.log.Error("destroy sandbox", "id", b.id, "err", err)
		}
		if err := b.net.close(); err != nil {
			s.log.Error("remove sandbox's network", "id", b.id, "err", err)
		}
		b.release()
		b.mu.Lock()
		b.lease.Release()
		b.mu.Unlock()
		s.mu.Lock()
		delete(s.boxes, b.id)
		s.mu.Unlock()
		s.log.Info("sandbox destroyed", "id", b.id, "why", why)
	})
}

// lookup finds the sandbox a request names.
func (s *Server) lookup(r *http.Request) (*box, error) {
	id := r.PathValue("id")
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("%w %q (list them with GET /v1/sandboxes)", ErrNoSandbox, id)
	}
	return b, nil
}

// use finds a running sandbox for an exec or file request and marks it
// busy until done is called; both count as activity for the idle timeout.
func (s *Server) use(r *http.Request) (b *box, done func(), err error) {
	if b, err = s.lookup(r); err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != api.StateRunning {
		return nil, nil, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, b.id, b.state)
	}
	b.busy++
	b.lastActive = time.Now()
	return b, func() {
		b.mu.Lock()
		b.busy--
		b.lastActive = time.Now()
		b.mu.Unlock()
	}, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	slices.SortFunc(boxes, func(x, y *box) int {
		if c := x.created.Compare(y.created); c != 0 {
			return c
		}
		return strings.Compare(x.id, y.id)
	})
	list := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(boxes))}
	for _, b := range boxes {
		list.Sandboxes = append(list.Sandboxes, b.info())
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.info())
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	if err := s.refuseWhileForked(b); err != nil {
		return err
	}
	s.destroy(b, "deleted")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// expireLoop destroys sandboxes whose TTL or idle timeout ran out.
func (s *Server) expireLoop() {
	t := time.NewTicker(s.cfg.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			var due []*box
			var whys []string
			for _, b := range s.boxes {
				if why, ok := b.expire(now); ok {
					due, whys = append(due, b), append(whys, why)
				}
			}
			s.mu.Unlock()
			for i, b := range due {
				s.metrics.expired.WithLabelValues(whys[i]).Inc()
				go s.destroy(b, "expired: "+whys[i])
			}
		}
	}
}

// countStates counts the sandboxes in each state, for metrics.
func (s *Server) countStates() map[api.State]int {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	counts := map[api.State]int{}
	for _, b := range boxes {
		b.mu.Lock()
		counts[b.state]++
		b.mu.Unlock()
	}
	return counts
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}
