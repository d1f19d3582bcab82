package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// FleetDedupTargets are the bars for the fleet frame cache (Shinken
// §10): at least Identical times fewer bytes per observe-all round on a
// fleet showing one screen, and, where every screen differs, no more than
// the cache's probes cost (off/on at least DistinctFloor: about 1×).
var FleetDedupTargets = struct{ Identical, DistinctFloor float64 }{10, 0.95}

// fleetSize is the N for the dedup measurement.
const fleetSize = 16

// fleetMode is one way of observing every replica once.
type fleetMode struct {
	name       string
	concurrent bool
	dedup      bool
}

var fleetModes = []fleetMode{
	{"sequential, dedup off", false, false},
	{"sequential, dedup on", false, true},
	{"concurrent, dedup off", true, false},
	{"concurrent, dedup on", true, true},
}

// forkFleetDedup measures the bytes per observe-all round (every replica's
// screenshot, PNG) of 16 forked desktops with the fleet's frame cache off
// (each session still sends its own last hash as if_none_match: the
// honest baseline) and on (client.FrameCache shared by the 16 sessions),
// the observations one after another and all at once. Each round first
// types the same key into every replica, so every screen has changed
// since that session's last look; the identical fleet then shows one
// screen, the distinct fleet (each replica first ran a command of its
// own) 16. Bytes are what the guests sent (client.ACI.Received).
func forkFleetDedup(ctx context.Context, c *client.Client, r *SeriesReport, rounds int) error {
	golden, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
	if err != nil {
		return fmt.Errorf("create the golden desktop: %w", err)
	}
	defer c.DeleteDesktop(ctx, golden.ID)
	if err := typeListing(ctx, c, golden.ID); err != nil {
		return err
	}
	if _, err := firstFrame(ctx, c, golden.ID); err != nil {
		return err
	}
	// The memory tier restores the golden's very screen; without criu the
	// file tier's replicas boot the same xterm afresh.
	tier := api.TierMemory
	sn, err := c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: tier})
	if client.ErrorCode(err) == api.CodeUnsupported {
		tier = api.TierFS
		sn, err = c.Snapshot(ctx, golden.ID, nil)
	}
	if err != nil {
		return fmt.Errorf("snapshot the golden desktop: %w", err)
	}
	defer c.DeleteSnapshot(ctx, sn.ID)
	res, err := c.Fork(ctx, sn.ID, &api.ForkRequest{Count: fleetSize})
	if err != nil {
		return fmt.Errorf("fork %d desktops: %w", fleetSize, err)
	}
	sessions := make([]*client.ACI, 0, fleetSize)
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
		for _, dt := range res.Desktops {
			c.DeleteDesktop(ctx, dt.ID)
		}
	}()
	for _, dt := range res.Desktops {
		s, err := c.DialACI(ctx, dt.ID)
		if err != nil {
			return err
		}
		sessions = append(sessions, s)
	}
	r.Figures["fleet dedup: tier of the 16 replicas"] = string(tier)
	if tier == api.TierFS {
		// Each booted its own xterm: let every screen settle first.
		if err := fleetDo(sessions, true, func(_ int, s *client.ACI) error { return settle(ctx, s) }); err != nil {
			return err
		}
	}

	identical, err := fleetRounds(ctx, r, sessions, "identical screens", rounds, 1)
	if err != nil {
		return err
	}
	// Each replica runs a command of its own: 16 screens.
	if err := fleetDo(sessions, true, func(i int, s *client.ACI) error {
		return s.Type(ctx, fmt.Sprintf("clear; echo replica-%02d; seq %d\n", i, 5+i))
	}); err != nil {
		return err
	}
	distinct, err := fleetRounds(ctx, r, sessions, "every screen differs", rounds, fleetSize)
	if err != nil {
		return err
	}
	for k, m := range fleetModes {
		if !m.dedup {
			continue
		}
		off := k - 1
		r.Checks = append(r.Checks,
			check(fmt.Sprintf("fleet dedup N=16, identical screens, %s: bytes per round off/on (at least)", modeWhen(m)), bytesRatio(identical[off], identical[k]), FleetDedupTargets.Identical, false),
			check(fmt.Sprintf("fleet dedup N=16, every screen differs, %s: bytes per round off/on (at least)", modeWhen(m)), bytesRatio(distinct[off], distinct[k]), FleetDedupTargets.DistinctFloor, false))
	}
	return nil
}

func modeWhen(m fleetMode) string {
	if m.concurrent {
		return "concurrent"
	}
	return "sequential"
}

// fleetRounds runs rounds of: the same key typed into every replica, the
// screens settled, then one observe-all per mode (in a rotating order),
// each timed and its bytes counted. It returns the mean bytes per round
// of each mode and records them, checking each round that the fleet shows
// screens distinct screens.
func fleetRounds(ctx context.Context, r *SeriesReport, sessions []*client.ACI, fleet string, rounds, screens int) ([]float64, error) {
	caches := make([]*client.FrameCache, len(fleetModes))
	last := make([][]string, len(fleetModes)) // dedup off: each session's last hash
	for k := range fleetModes {
		caches[k] = client.NewFrameCache(0)
		last[k] = make([]string, len(sessions))
	}
	bytes := make([]int64, len(fleetModes))
	walls := make([][]sample, len(fleetModes))
	held := 0
	for round := range rounds {
		if err := fleetDo(sessions, true, func(_ int, s *client.ACI) error {
			if err := s.Key(ctx, "x"); err != nil {
				return err
			}
			return settle(ctx, s)
		}); err != nil {
			return nil, err
		}
		for j := range fleetModes {
			k := (round + j) % len(fleetModes)
			m := fleetModes[k]
			hashes := make([]string, len(sessions))
			var rx int64
			for _, s := range sessions {
				rx -= s.Received()
			}
			t0 := time.Now()
			err := fleetDo(sessions, m.concurrent, func(i int, s *client.ACI) error {
				o := &api.ACIScreenshot{}
				if m.dedup {
					s.ShareFrames(caches[k])
					defer s.ShareFrames(nil)
				} else {
					o.IfNoneMatch = last[k][i]
				}
				rep, img, err := s.Screenshot(ctx, o)
				if err != nil {
					return err
				}
				if rep.NotModified || len(img) == 0 {
					return fmt.Errorf("replica %d: no image although its screen changed", i)
				}
				hashes[i], last[k][i] = rep.FrameHash, rep.FrameHash
				return nil
			})
			walls[k] = append(walls[k], sample{latency: time.Since(t0), err: err})
			if err != nil {
				return nil, err
			}
			for _, s := range sessions {
				rx += s.Received()
			}
			bytes[k] += rx
			if k == 0 && distinctCount(hashes) == screens {
				held++
			}
		}
	}
	mean := make([]float64, len(fleetModes))
	for k, m := range fleetModes {
		mean[k] = float64(bytes[k]) / float64(rounds)
		r.Series = append(r.Series, summarize(fmt.Sprintf("fleet observe-all N=16, %s, %s: round wall", fleet, m.name), walls[k]))
	}
	for k, m := range fleetModes {
		if m.dedup {
			r.Figures[fmt.Sprintf("fleet dedup N=16, %s, %s: bytes per observe-all round off / on (off/on)", fleet, modeWhen(m))] =
				fmt.Sprintf("%.0f / %.0f (%.1fx)", mean[k-1], mean[k], bytesRatio(mean[k-1], mean[k]))
		}
	}
	r.Figures[fmt.Sprintf("fleet dedup N=16, %s: rounds with %d distinct screens", fleet, screens)] = fmt.Sprintf("%d of %d", held, rounds)
	return mean, nil
}

// fleetDo calls fn for every session, all at once or one after another,
// and joins the errors.
func fleetDo(sessions []*client.ACI, concurrent bool, fn func(i int, s *client.ACI) error) error {
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		if concurrent {
			wg.Go(func() { errs[i] = fn(i, s) })
		} else {
			errs[i] = fn(i, s)
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settle waits until the session's screen has been still for 100 ms
// (observing no image).
func settle(ctx context.Context, s *client.ACI) error {
	_, _, err := s.Step(ctx, nil, &api.ACIObserve{Cursor: true, SettleMs: 100})
	return err
}

func distinctCount(hashes []string) int {
	seen := map[string]bool{}
	for _, h := range hashes {
		seen[h] = true
	}
	return len(seen)
}

// bytesRatio is off/on (0 when on is 0: nothing measured).
func bytesRatio(off, on float64) float64 {
	if on == 0 {
		return 0
	}
	return off / on
}
