package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/internal/zygote"
)

// Pool measures the runtime pool: opts.Scripts distinct scripts registered
// and each called once; the pool's PSS at an eighth of them and at all of
// them (the slope per script); then requests to random scripts interleaved
// with requests to the warm function, for the pool's extra cost per call.
func Pool(ctx context.Context, d *Daemon, opts WarmOptions) (*SeriesReport, error) {
	if err := putWarmFunction(ctx, d, "bench-warm", 4); err != nil {
		return nil, err
	}
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("pool", g)
	digests := make([]string, opts.Scripts)
	for i := range digests {
		src := fmt.Sprintf("import json\n\nSCRIPT = %d\n\ndef handler(event):\n    return {\"script\": SCRIPT, \"event\": event}\n", i)
		s, err := d.Client.PutScript(ctx, []byte(src))
		if err != nil {
			return nil, fmt.Errorf("register script %d: %w", i, err)
		}
		digests[i] = s.Digest
	}
	call := func(i int) error {
		inv, err := d.Client.InvokeScript(ctx, digests[i], json.RawMessage(`1`))
		if err == nil && inv.Status != "ok" {
			err = fmt.Errorf("script %d: %s %+v", i, inv.Status, inv.Error)
		}
		return err
	}
	eighth := max(opts.Scripts/8, 1)
	var pss1, pss2 int64
	for i := range digests {
		if err := call(i); err != nil {
			return nil, err
		}
		if i+1 == eighth {
			pss1 = poolPSS(ctx, d)
		}
	}
	pss2 = poolPSS(ctx, d)
	slope := float64(pss2-pss1) / float64(opts.Scripts-eighth)
	r.Figures[fmt.Sprintf("pool PSS after %d scripts (bytes)", eighth)] = pss1
	r.Figures[fmt.Sprintf("pool PSS after %d scripts (bytes)", opts.Scripts)] = pss2
	r.Figures["pool PSS slope (bytes per script)"] = int64(slope)
	// Even requests go to the warm function, odd ones to a random script.
	ss, lag := openLoop(ctx, opts.Requests, opts.Rate, func(i int) sample {
		if i%2 == 0 {
			return invokeSample(d.Client.Invoke(ctx, "bench-warm", json.RawMessage(`1`)))
		}
		return invokeSample(d.Client.InvokeScript(ctx, digests[rand.IntN(len(digests))], json.RawMessage(`1`)))
	})
	r.Figures["sender lag behind schedule p50/p99 (ms)"] = millis(lag.P50Ns) + "/" + millis(lag.P99Ns)
	var warm, pool []sample
	for i, s := range ss {
		if i%2 == 0 {
			warm = append(warm, s)
		} else {
			pool = append(pool, s)
		}
	}
	ws, ps := summarize("warm function (16 imports)", warm), summarize("pool, a random script of "+strconv.Itoa(opts.Scripts), pool)
	r.Series = append(r.Series, ws, ps)
	r.Checks = append(r.Checks,
		check("pool p50 - warm p50, ms (at most)", float64(ps.Latency.P50Ns-ws.Latency.P50Ns)/1e6, WarmTargets.PoolExtraMs, true),
		check("pool PSS slope, bytes per script (at most)", slope, WarmTargets.SlopeBytes, true))
	r.finish(g, before, false)
	return r, nil
}

// poolPSS sums the proportional set size of every process of the runtime
// pool's sandbox (its PID 1 and the zygote; requests have exited).
func poolPSS(ctx context.Context, d *Daemon) int64 {
	f, err := d.Client.Function(ctx, zygote.PoolName)
	if err != nil || f.Pid == 0 {
		return 0
	}
	return treePSS(f.Pid)
}

// Load finds the highest sustained request rate through one function with
// no failed request: closed loops of 1, 2, 4, ... clients, each for window,
// until the rate stops growing or a request fails.
func Load(ctx context.Context, d *Daemon, window time.Duration) (*SeriesReport, error) {
	const concurrency = 32
	if err := putWarmFunction(ctx, d, "bench-load", concurrency); err != nil {
		return nil, err
	}
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("load", g)
	best := 0.0
	for clients := 1; clients <= concurrency; clients *= 2 {
		var ok, failed atomic.Int64
		var firstErr atomic.Value
		deadline := time.Now().Add(window)
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for time.Now().Before(deadline) && ctx.Err() == nil {
					s := invokeSample(d.Client.Invoke(ctx, "bench-load", json.RawMessage(`1`)))
					if s.err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, s.err.Error())
						continue
					}
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		rps := float64(ok.Load()) / time.Since(start).Seconds()
		key := fmt.Sprintf("%2d clients", clients)
		r.Figures[key] = fmt.Sprintf("%.0f requests/s, %d failed", rps, failed.Load())
		if failed.Load() > 0 {
			r.Figures[key] = fmt.Sprintf("%.0f requests/s, %d failed (first: %v)", rps, failed.Load(), firstErr.Load())
			break
		}
		if rps < best*1.02 {
			break
		}
		best = rps
	}
	r.Figures["highest sustained rate with no failure (requests/s)"] = int64(best)
	// The ceiling of any fork-per-request design on this host, same run:
	// bare forks of the same interpreter, one per CPU in flight.
	if floor, err := forkFloorRate(ctx, window, runtime.NumCPU()); err == nil {
		r.Figures["fork floor rate: python3 with the same imports, fork+exit+wait, one per CPU in flight (per s)"] = int64(floor)
		r.Figures["sustained rate / fork floor rate"] = fmt.Sprintf("%.2f", best/floor)
		r.Checks = append(r.Checks, check("sustained rate / same-run fork floor rate (at least)", best/floor, WarmTargets.LoadVsFloor, false))
	} else {
		r.Figures["fork floor rate"] = "NOT MEASURED: " + err.Error()
	}
	r.Checks = append(r.Checks, check("sustained requests/s (at least)", best, WarmTargets.LoadRPS, false))
	r.finish(g, before, true)
	return r, nil
}

// EmbedGroups is the embedder's comparison as an interleaved group: the
// 16-import script as a warm function, as tine run python3 script.py and
// under bwrap + python3.
func EmbedGroups(ctx context.Context, d *Daemon, tinePath string) ([]Group, func(), error) {
	if err := putWarmFunction(ctx, d, "bench-embed", 4); err != nil {
		return nil, nil, err
	}
	// Not under /tmp: a sandbox has its own.
	dir, err := os.MkdirTemp("/var/tmp", "tine-bench-embed-")
	if err != nil {
		return nil, nil, err
	}
	script := filepath.Join(dir, "script.py")
	src := warmHandler() + "\nimport json, sys\nprint(json.dumps(handler({\"n\": 1})))\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	warm := Variant{Name: "warm function", Func: func(ctx context.Context) error {
		s := invokeSample(d.Client.Invoke(ctx, "bench-embed", json.RawMessage(`{"n": 1}`)))
		return s.err
	}}
	// The same call after SparseGap of quiet: an embedder's calls come one
	// at a time, and the kernel's cgroup lock goes quiet between them.
	sparse := Variant{Name: "warm function, after " + SparseGap.String() + " idle", Func: warm.Func,
		Before: func(ctx context.Context) error {
			select {
			case <-time.After(SparseGap):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	// The os host view (the default) shows none of /var/tmp: the script's
	// directory is bound in.
	oneShot := Variant{Name: "tine run", Argv: []string{tinePath, "run", "--in-process", "-v", dir + ":/tine-embed:ro", "/usr/bin/python3", "/tine-embed/script.py"}}
	bwrap := Variant{Name: "bwrap", Argv: []string{"bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/usr/bin/python3", script}}
	target := Target{Variant: warm.Name, MaxRatio: 1 / WarmTargets.Embed, Text: "warm function p50 at most 1/20 of tine run's (embed ratio at least 20x)"}
	sparseTarget := Target{Variant: sparse.Name, MaxRatio: 1 / WarmTargets.Embed, Text: "warm function after " + SparseGap.String() + " idle: p50 at most 1/20 of tine run's"}
	return []Group{{
		Name: "16-import script", Reference: oneShot.Name, Subject: warm.Name,
		Variants: []Variant{warm, sparse, oneShot, bwrap}, Targets: []Target{target, sparseTarget},
	}}, func() { os.RemoveAll(dir) }, nil
}
