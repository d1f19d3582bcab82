package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// SoakTargets define "flat" for the soak: after the warm-up, the daemon's
// RSS grows by less than 1 MiB a minute, and its open descriptors and
// goroutines beyond one per connection the suite keeps open to it by less
// than one a minute (at 20 ops/s, one leaked per 1200 operations would
// show).
var SoakTargets = struct{ RSSBytesPerMin, FDsPerMin, GoroutinesPerMin, RateShare float64 }{1 << 20, 1, 1, 0.95}

// SoakOptions size the soak.
type SoakOptions struct {
	Duration time.Duration
	// Rate is operations per second, open loop, over every kind in turn.
	Rate float64
	// Warmup is left out of the slopes and the latencies (not of the error
	// count).
	Warmup time.Duration
	// SampleEvery is how often the daemon's RSS, descriptors and goroutines
	// are read.
	SampleEvery time.Duration
	Progress    io.Writer
}

// SoakSample is the daemon read at one time of the soak.
type SoakSample struct {
	Seconds    float64 `json:"seconds"`
	RSSBytes   int64   `json:"rss_bytes"`
	FDs        int     `json:"fds"`
	Goroutines float64 `json:"goroutines"`
	Threads    int64   `json:"threads"`
	// ClientConns counts the suite's own sockets, its connections to the
	// daemon: the Go client keeps up to 64 idle after a burst, and each
	// holds a descriptor and a goroutine in the daemon without being a
	// leak. The Beyond figures take them off.
	ClientConns           int     `json:"client_conns"`
	FDsBeyondConns        int     `json:"fds_beyond_conns"`
	GoroutinesBeyondConns float64 `json:"goroutines_beyond_conns"`
}

// SoakRaw is the soak's daemon readings and the slopes per minute fitted
// to those after the warm-up, in its JSON as raw.
type SoakRaw struct {
	Samples       []SoakSample    `json:"daemon_samples"`
	WarmupSeconds float64         `json:"warmup_seconds"`
	Slopes        map[string]Line `json:"slopes_per_minute"`
}

// soakOp is one kind of operation of the mix.
type soakOp struct {
	name string
	do   func(ctx context.Context, i int) error
}

// Soak runs a mixed load at a steady rate against one daemon for
// opts.Duration: exec round trips, file put and get, warm function calls,
// and click, key and screenshot over a desktop's ACI, in turn, and reads
// the daemon's RSS, descriptors and goroutines every opts.SampleEvery.
// It reports every error, latencies per kind, the achieved rate, and the
// least-squares slopes after the warm-up, judged flat by SoakTargets.
func Soak(ctx context.Context, d *Daemon, opts SoakOptions) (*SeriesReport, error) {
	if opts.Duration <= 0 || opts.Rate <= 0 || opts.SampleEvery <= 0 || opts.Warmup < 0 {
		return nil, fmt.Errorf("soak needs a positive duration, rate and sample interval")
	}
	if opts.Warmup > opts.Duration/2 {
		opts.Warmup = opts.Duration / 5 // a short check run still fits its slopes
	}
	ops, cleanup, err := soakOps(ctx, d.Client)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("soak", g)
	n := int(opts.Duration.Seconds() * opts.Rate)
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "soak: %d operations at %g/s over %s (%d kinds in turn), warm-up %s, daemon read every %s\n",
			n, opts.Rate, opts.Duration, len(ops), opts.Warmup, opts.SampleEvery)
	}

	start := time.Now()
	var samples []SoakSample
	var sampleErrs []string
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(opts.SampleEvery)
		defer t.Stop()
		for {
			s, err := readSoakSample(ctx, d, time.Since(start))
			if err != nil {
				sampleErrs = append(sampleErrs, fmt.Sprintf("t+%.1fs reading the daemon: %v", s.Seconds, err))
			} else {
				samples = append(samples, s)
			}
			select {
			case <-t.C:
			case <-stopSampling:
				return
			}
		}
	}()
	ss, lag := openLoop(ctx, n, opts.Rate, func(i int) sample {
		return sample{err: ops[i%len(ops)].do(ctx, i)}
	})
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// One last reading after the load, for the end of the slope.
	if s, err := readSoakSample(ctx, d, time.Since(start)); err == nil {
		samples = append(samples, s)
	}

	// Errors count from the first operation; latencies after the warm-up.
	warmOps := int(opts.Warmup.Seconds() * opts.Rate)
	perOp := make([][]sample, len(ops))
	for i, s := range ss {
		at := float64(i) / opts.Rate
		if s.err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("t+%.1fs %s #%d: %v", at, ops[i%len(ops)].name, i, s.err))
		}
		if s.err != nil || i >= warmOps {
			perOp[i%len(ops)] = append(perOp[i%len(ops)], s)
		}
	}
	r.Errors = append(r.Errors, sampleErrs...)
	for k, op := range ops {
		r.Series = append(r.Series, summarize(op.name, perOp[k]))
	}

	done := 0
	for _, s := range ss {
		if s.err == nil {
			done++
		}
	}
	achieved := float64(done) / elapsed.Seconds()
	r.Figures["operations, errors"] = fmt.Sprintf("%d, %d", len(ss), len(r.Errors)-len(sampleErrs))
	r.Figures["achieved rate (ops/s), asked"] = fmt.Sprintf("%.2f, %g", achieved, opts.Rate)
	r.Figures["sender lag behind schedule p50/p99 (ms)"] = millis(lag.P50Ns) + "/" + millis(lag.P99Ns)
	r.Figures["warm-up left out of slopes and latencies"] = opts.Warmup.String()

	var xs, rss, fds, gor, rawFDs, rawGor, thr []float64
	for _, s := range samples {
		if s.Seconds < opts.Warmup.Seconds() {
			continue
		}
		xs = append(xs, s.Seconds/60)
		rss, fds = append(rss, float64(s.RSSBytes)), append(fds, float64(s.FDsBeyondConns))
		gor, thr = append(gor, s.GoroutinesBeyondConns), append(thr, float64(s.Threads))
		rawFDs, rawGor = append(rawFDs, float64(s.FDs)), append(rawGor, s.Goroutines)
	}
	if len(samples) > 0 {
		first, last := samples[0], samples[len(samples)-1]
		r.Figures["daemon at start → end: RSS MiB, fds, goroutines, threads; the suite's connections"] = fmt.Sprintf("%.1f → %.1f, %d → %d, %.0f → %.0f, %d → %d; %d → %d",
			mib(first.RSSBytes), mib(last.RSSBytes), first.FDs, last.FDs, first.Goroutines, last.Goroutines, first.Threads, last.Threads, first.ClientConns, last.ClientConns)
	}
	slopes := map[string]Line{}
	slopeCheck := func(key, text string, ys []float64, scale, bar float64) {
		l, err := FitLine(xs, ys)
		if err != nil {
			r.Checks = append(r.Checks, Check{Text: text, Bar: bar, Outcome: NotMeasured, Why: fmt.Sprintf("%d samples after the warm-up: %v", len(xs), err)})
			return
		}
		slopes[key] = l
		r.Checks = append(r.Checks, check(text, l.Slope/scale, bar/scale, true))
	}
	slopeCheck("rss_bytes_per_min", "daemon RSS slope after the warm-up, MiB/min (at most)", rss, 1<<20, SoakTargets.RSSBytesPerMin)
	slopeCheck("fds_per_min", "daemon open descriptors beyond the suite's connections, slope per min (at most)", fds, 1, SoakTargets.FDsPerMin)
	slopeCheck("goroutines_per_min", "daemon goroutines beyond the suite's connections, slope per min (at most)", gor, 1, SoakTargets.GoroutinesPerMin)
	for _, f := range []struct {
		key, text string
		ys        []float64
	}{
		{"threads_per_min", "daemon threads slope, per min", thr},
		{"raw_fds_per_min", "daemon open descriptors slope, connections included, per min", rawFDs},
		{"raw_goroutines_per_min", "daemon goroutines slope, connections included, per min", rawGor},
	} {
		if l, err := FitLine(xs, f.ys); err == nil {
			slopes[f.key] = l
			r.Figures[f.text] = fmt.Sprintf("%.2f", l.Slope)
		}
	}
	// Errors are not a check: they fail the run (exit 1) on any host.
	r.Checks = append(r.Checks, check("achieved rate / asked rate (at least)", achieved/opts.Rate, SoakTargets.RateShare, false))
	r.Raw = SoakRaw{Samples: samples, WarmupSeconds: opts.Warmup.Seconds(), Slopes: slopes}
	r.finish(g, before, false)
	return r, nil
}

// soakOps sets up what the operations act on (a sandbox with a file to
// read, a warm function, a desktop and its ACI session) and returns the
// operations and what undoes the setup.
func soakOps(ctx context.Context, c *client.Client) ([]soakOp, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) ([]soakOp, func(), error) { cleanup(); return nil, nil, err }
	bg := context.Background() // cleanup runs after an interrupt too

	sb, err := c.Create(ctx, &api.SandboxSpec{})
	if err != nil {
		return fail(fmt.Errorf("create the soak's sandbox: %w", err))
	}
	undo = append(undo, func() { c.Delete(bg, sb.ID) })
	content := bytes.Repeat([]byte("tine soak\n"), 64<<10/10)
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/soak-get.bin", bytes.NewReader(content), nil); err != nil {
		return fail(fmt.Errorf("write the file the soak reads: %w", err))
	}

	dir, err := os.MkdirTemp("", "tine-bench-soak-")
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	entry := filepath.Join(dir, "handler.py")
	if err := os.WriteFile(entry, []byte("def handler(event):\n    return event\n"), 0o644); err != nil {
		return fail(err)
	}
	const fn = "bench-soak"
	if _, err := c.PutFunction(ctx, &api.FunctionSpec{Name: fn, Entry: entry, Concurrency: 4}); err != nil {
		return fail(fmt.Errorf("put the soak's function: %w", err))
	}
	undo = append(undo, func() { c.DeleteFunction(bg, fn) })

	dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
	if err != nil {
		return fail(fmt.Errorf("create the soak's desktop: %w", err))
	}
	undo = append(undo, func() { c.DeleteDesktop(bg, dt.ID) })
	aci, err := c.DialACI(ctx, dt.ID)
	if err != nil {
		return fail(fmt.Errorf("open the soak's ACI session: %w", err))
	}
	undo = append(undo, func() { aci.Close() })

	x, y := 640, 400
	var putMu sync.Mutex // puts to one path, one at a time: a get races no put
	return []soakOp{
		{"exec /bin/true", func(ctx context.Context, _ int) error {
			res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true"}})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit code %d: %s", res.ExitCode, res.Stderr)
			}
			return err
		}},
		{"file put 64 KiB", func(ctx context.Context, _ int) error {
			putMu.Lock()
			defer putMu.Unlock()
			_, err := c.WriteFile(ctx, sb.ID, "/tmp/soak-put.bin", bytes.NewReader(content), nil)
			return err
		}},
		{"file get 64 KiB", func(ctx context.Context, _ int) error {
			rc, err := c.ReadFile(ctx, sb.ID, "/tmp/soak-get.bin")
			if err != nil {
				return err
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err == nil && !bytes.Equal(got, content) {
				err = fmt.Errorf("read %d bytes that differ from the %d written", len(got), len(content))
			}
			return err
		}},
		{"warm function call", func(ctx context.Context, i int) error {
			payload := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			inv, err := c.Invoke(ctx, fn, payload)
			if s := invokeSample(inv, err); s.err != nil {
				return s.err
			}
			var back struct{ I int }
			if err := json.Unmarshal(inv.Result, &back); err != nil || back.I != i {
				return fmt.Errorf("result %s, want the payload %s back", inv.Result, payload)
			}
			return nil
		}},
		{"desktop click", func(ctx context.Context, _ int) error {
			_, _, err := aci.Do(ctx, &api.ACIRequest{Op: "click", X: &x, Y: &y})
			return err
		}},
		{"desktop key", func(ctx context.Context, _ int) error { return aci.Key(ctx, "shift") }},
		{"desktop screenshot PNG", func(ctx context.Context, _ int) error {
			_, img, err := aci.Screenshot(ctx, &api.ACIScreenshot{Format: "png"})
			if err == nil && len(img) == 0 {
				err = fmt.Errorf("an empty image")
			}
			return err
		}},
	}, cleanup, nil
}

// readSoakSample reads the daemon's RSS, descriptors, threads and
// goroutines at. The counts are the least of three reads 50 ms apart:
// operations in flight raise some reads, a leak raises them all. The
// sample's time is set even on error.
func readSoakSample(ctx context.Context, d *Daemon, at time.Duration) (SoakSample, error) {
	var s SoakSample
	for i := range 3 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		r, err := readDaemonOnce(ctx, d)
		if err != nil {
			return SoakSample{Seconds: at.Seconds()}, err
		}
		if i == 0 {
			s = r
			continue
		}
		s.RSSBytes, s.FDs = min(s.RSSBytes, r.RSSBytes), min(s.FDs, r.FDs)
		s.Goroutines, s.Threads = min(s.Goroutines, r.Goroutines), min(s.Threads, r.Threads)
		s.ClientConns = min(s.ClientConns, r.ClientConns)
		s.FDsBeyondConns = min(s.FDsBeyondConns, r.FDsBeyondConns)
		s.GoroutinesBeyondConns = min(s.GoroutinesBeyondConns, r.GoroutinesBeyondConns)
	}
	s.Seconds = at.Seconds()
	return s, nil
}

func readDaemonOnce(ctx context.Context, d *Daemon) (SoakSample, error) {
	var s SoakSample
	status, err := processStatus(d.Pid())
	if err != nil {
		return s, err
	}
	if s.RSSBytes, err = parseKBField(status, "VmRSS:"); err != nil {
		return s, err
	}
	if s.Threads, err = parseIntField(status, "Threads:"); err != nil {
		return s, err
	}
	if s.FDs, err = openFDs(d.Pid()); err != nil {
		return s, err
	}
	if s.Goroutines, err = d.Metric(ctx, "go_goroutines"); err != nil {
		return s, err
	}
	// After the metrics request, whose connection then idles in the pool.
	if s.ClientConns, err = openSockets(os.Getpid()); err != nil {
		return s, err
	}
	s.FDsBeyondConns = s.FDs - s.ClientConns
	s.GoroutinesBeyondConns = s.Goroutines - float64(s.ClientConns)
	return s, nil
}
