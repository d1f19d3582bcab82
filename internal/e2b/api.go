package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// maxBody bounds a control-plane request body.
const maxBody = 1 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Code, e)
}

// decode reads an optional JSON body into v.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if len(b) > maxBody {
		return errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxBody)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(http.StatusBadRequest, "body: %v", err)
	}
	return nil
}

// handler adapts a handler that returns an error to an http.Handler.
type handler func(w http.ResponseWriter, r *http.Request) error

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		writeError(w, errorFrom(err))
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range map[string]handler{
		"GET /health":                     func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(http.StatusOK); return nil },
		"POST /sandboxes":                 s.handleCreate(false),
		"POST /v2/sandboxes":              s.handleCreate(true),
		"GET /sandboxes":                  s.handleListV1,
		"GET /v2/sandboxes":               s.handleListV2,
		"GET /sandboxes/{id}":             s.handleGet,
		"DELETE /sandboxes/{id}":          s.handleKill,
		"POST /sandboxes/{id}/timeout":    s.handleTimeout,
		"POST /sandboxes/{id}/refreshes":  s.handleRefresh,
		"POST /sandboxes/{id}/pause":      s.handlePause,
		"PUT /sandboxes/{id}/network":     s.handleNetwork,
		"POST /sandboxes/{id}/resume":     s.handleConnect(true),
		"POST /sandboxes/{id}/connect":    s.handleConnect(false),
		"POST /v2/sandboxes/{id}/connect": s.handleConnect(false),
		"GET /sandboxes/{id}/metrics":     s.handleMetrics,
		"POST /sandboxes/{id}/fork":       s.handleFork,
		"POST /sandboxes/{id}/snapshots":  s.handleSnapshot,
		"GET /snapshots":                  s.handleListSnapshots,
		"DELETE /templates/{id}":          s.handleDeleteSnapshot,
	} {
		mux.Handle(pattern, h)
	}
	if s.cfg.MCP != nil {
		mux.Handle("/v1/mcp", s.cfg.MCP)
	}
	mux.Handle("/", handler(func(w http.ResponseWriter, r *http.Request) error {
		return errorf(http.StatusNotFound, "%s %s: no such route in tine's E2B API (docs/e2b.md lists what it serves)", r.Method, r.URL.Path)
	}))
	return mux
}

func (s *Server) handleCreate(v2 bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		var req newSandbox
		if err := decode(r, &req); err != nil {
			return err
		}
		b, err := s.create(r.Context(), &req, v2)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, s.answer(b))
		return nil
	}
}

func (s *Server) handleListV1(w http.ResponseWriter, r *http.Request) error {
	out := []listedSandbox{}
	for _, b := range s.sorted() {
		if l := s.listed(b); l.State == stateRunning {
			out = append(out, l)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleListV2 filters by state, metadata and template, sorts by start
// time, and pages with X-Next-Token.
func (s *Server) handleListV2(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	states := []string{stateRunning, statePaused}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
		for _, st := range states {
			if st != stateRunning && st != statePaused {
				return errorf(http.StatusBadRequest, "state %q: want running or paused", st)
			}
		}
	}
	var meta url.Values
	if v := q.Get("metadata"); v != "" {
		var err error
		if meta, err = url.ParseQuery(v); err != nil {
			return errorf(http.StatusBadRequest, "metadata %q: want url-encoded key=value pairs: %v", v, err)
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return errorf(http.StatusBadRequest, "limit %q: want a positive whole number", v)
		}
		limit = n
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return errorf(http.StatusBadRequest, "startedAfter %q: want an RFC 3339 time", v)
		}
		after = t
	}
	all := s.sorted()
	if q.Get("order") == "desc" {
		slices.Reverse(all)
	}
	var match []listedSandbox
	var tokens []string
	running := 0
	for _, b := range all {
		l := s.listed(b)
		if l.State == stateRunning {
			running++
		}
		if !slices.Contains(states, l.State) || (!after.IsZero() && !l.StartedAt.After(after)) {
			continue
		}
		if t := q.Get("template"); t != "" && l.TemplateID != t {
			continue
		}
		ok := true
		for k, vs := range meta {
			if l.Metadata[k] != vs[0] {
				ok = false
			}
		}
		if ok {
			match = append(match, l)
			tokens = append(tokens, pageToken(b))
		}
	}
	start := 0
	if tok := q.Get("nextToken"); tok != "" {
		i := slices.Index(tokens, tok)
		if i < 0 {
			return errorf(http.StatusBadRequest, "nextToken %q does not name a position in this listing (the sandbox it named is gone); list again from the start", tok)
		}
		start = i + 1
	}
	end := min(start+limit, len(match))
	if end < len(match) {
		w.Header().Set("X-Next-Token", tokens[end-1])
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	page := match[start:end]
	if page == nil {
		page = []listedSandbox{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.detail(b))
	return nil
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.kill(r.Context(), b); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleTimeout(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req timeoutBody
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Timeout < 0 {
		return errorf(http.StatusBadRequest, "timeout %d: want seconds, 0 or more", req.Timeout)
	}
	b.mu.Lock()
	b.endAt = time.Now().Add(time.Duration(req.Timeout) * time.Second)
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleRefresh(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req struct {
		Duration int64 `json:"duration"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	b.mu.Lock()
	if end := time.Now().Add(time.Duration(req.Duration) * time.Second); end.After(b.endAt) {
		b.endAt = end
	}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req pauseBody
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := s.pause(r.Context(), b, req.Memory != nil && *req.Memory); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleConnect answers 200 for a running sandbox (its timeout extended
// to at least the one asked) and 201 for one it resumed. The deprecated
// resume answers 409 for a sandbox that is not paused.
func (s *Server) handleConnect(strictResume bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		b, err := s.lookup(r.PathValue("id"))
		if err != nil {
			return err
		}
		var req connectBody
		if err := decode(r, &req); err != nil {
			return err
		}
		timeout, err := timeoutOf(req.Timeout, 300)
		if err != nil {
			return err
		}
		if strictResume {
			b.mu.Lock()
			st := b.state
			b.mu.Unlock()
			if st != statePaused {
				return errorf(http.StatusConflict, "sandbox %q is not paused", b.id)
			}
		}
		resumed, err := s.resume(r.Context(), b, timeout)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if resumed {
			status = http.StatusCreated
		}
		writeJSON(w, status, s.answer(b))
		return nil
	}
}

// handleMetrics reads the sandbox's cgroup through tine (memory, CPU time
// since the previous call) and its disk from envd; one sample, now.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	b.mu.Lock()
	id := b.tineID
	b.mu.Unlock()
	if id == "" {
		writeJSON(w, http.StatusOK, []sandboxMetric{})
		return nil
	}
	sb, err := s.cfg.Client.Get(r.Context(), id)
	if err != nil {
		return err
	}
	l := s.listed(b)
	now := time.Now()
	m := sandboxMetric{Timestamp: now.UTC(), TimestampUnix: now.Unix(), CPUCount: l.CPUCount, MemUsed: sb.Usage.MemoryBytes, MemTotal: l.MemoryMB << 20}
	b.mu.Lock()
	prevCPU, prevAt := b.lastCPU, b.lastAt
	if prevAt.IsZero() {
		prevCPU, prevAt = 0, sb.CreatedAt
	}
	if wall := now.Sub(prevAt).Seconds() * 1000; wall > 0 {
		m.CPUUsedPct = 100 * (sb.Usage.CPUTimeMs - prevCPU) / wall / float64(l.CPUCount)
	}
	b.lastCPU, b.lastAt = sb.Usage.CPUTimeMs, now
	b.mu.Unlock()
	if disk, err := s.envdDisk(r.Context(), b); err == nil {
		m.DiskUsed, m.DiskTotal = disk.Used, disk.Total
	} else {
		s.log.Debug("e2b: disk metrics", "sandbox", b.id, "err", err)
	}
	writeJSON(w, http.StatusOK, []sandboxMetric{m})
	return nil
}

// handleFork snapshots the sandbox's files and forks count replicas
// (tine's fs tier: files carry over, processes start fresh).
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) error {
	src, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req forkBody
	if err := decode(r, &req); err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > 100 {
		return errorf(http.StatusBadRequest, "count %d: want 1 to 100", count)
	}
	timeout, err := timeoutOf(req.Timeout, 300)
	if err != nil {
		return err
	}
	src.mu.Lock()
	tid := src.tineID
	src.mu.Unlock()
	if tid == "" {
		return errorf(http.StatusConflict, "sandbox %q is paused; connect to it before forking", src.id)
	}
	res, err := s.cfg.Client.ForkSandbox(r.Context(), tid, &api.ForkRequest{Count: count, Tier: api.TierFS})
	if err != nil {
		return err
	}
	out := make([]forkResult, 0, len(res.Sandboxes))
	for _, sb := range res.Sandboxes {
		if err := s.boot(r.Context(), &sb); err != nil {
			out = append(out, forkResult{Error: errorFrom(err)})
			continue
		}
		now := time.Now()
		b := &box{
			id: sb.ID, template: src.template, token: newToken(), metadata: src.metadata, env: src.env,
			internet: src.internet, onPause: src.onPause, resume: src.resume,
			started: now, state: stateRunning, tineID: sb.ID, pid: sb.Pid, spec: sb.Spec, endAt: now.Add(timeout),
		}
		s.mu.Lock()
		s.boxes[b.id] = b
		s.mu.Unlock()
		out = append(out, forkResult{Sandbox: s.answer(b)})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req snapshotBody
	if err := decode(r, &req); err != nil {
		return err
	}
	b.mu.Lock()
	tid := b.tineID
	b.mu.Unlock()
	if tid == "" {
		return errorf(http.StatusConflict, "sandbox %q is paused; connect to it before taking a snapshot", b.id)
	}
	snap, err := s.cfg.Client.Snapshot(r.Context(), tid, &api.SnapshotRequest{Tier: api.TierFS, Name: req.Name})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotOf(snap))
	return nil
}

func snapshotOf(sn *api.Snapshot) snapshotInfo {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotInfo{SnapshotID: sn.ID, Names: names}
}

// handleListSnapshots lists tine's sandbox snapshots (not the pause
// snapshots this package keeps for itself), optionally those taken of
// one E2B sandbox.
func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	snaps, err := s.cfg.Client.Snapshots(r.Context())
	if err != nil {
		return err
	}
	sources := map[string]bool{}
	if id := q.Get("sandboxID"); id != "" {
		b, err := s.lookup(id)
		if err != nil {
			return err
		}
		b.mu.Lock()
		sources[b.tineID] = true
		b.mu.Unlock()
	}
	out := []snapshotInfo{}
	for _, sn := range snaps {
		if sn.Kind != "sandbox" || strings.HasPrefix(sn.Name, "e2b-pause-") {
			continue
		}
		if len(sources) > 0 && !sources[sn.Source] {
			continue
		}
		if name := q.Get("name"); name != "" && sn.Name != name {
			continue
		}
		out = append(out, snapshotOf(&sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	err := s.cfg.Client.DeleteSnapshot(r.Context(), r.PathValue("id"))
	if client.ErrorCode(err) == api.CodeNotFound {
		return errorf(http.StatusNotFound, "snapshot %q not found", r.PathValue("id"))
	}
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == api.CodeConflict {
			return errorf(http.StatusConflict, "snapshot %q: %s", r.PathValue("id"), ce.Message)
		}
		return fmt.Errorf("delete snapshot: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
