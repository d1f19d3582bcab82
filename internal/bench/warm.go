package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
)

// WarmImports are the 16 stdlib modules of the warm-path benchmarks.
var WarmImports = []string{"json", "re", "ssl", "decimal", "datetime", "hashlib", "urllib.request", "base64",
	"collections", "itertools", "functools", "typing", "dataclasses", "pathlib", "uuid", "random"}

// warmHandler is the measured function: the 16 imports, a trivial handler.
func warmHandler() string {
	return "import " + strings.Join(WarmImports, ", ") + "\n\ndef handler(event):\n    return event\n"
}

// WarmTargets are the bars on the warm path.
var WarmTargets = struct {
	P50VsFloor, P99VsP50, P99VsFloorP99, SparseVsSteady, PoolExtraMs, SlopeBytes, Embed, LoadRPS, LoadVsFloor float64
}{
	P50VsFloor: 4, P99VsP50: 3, P99VsFloorP99: 2, SparseVsSteady: 1.3, PoolExtraMs: 0.5, SlopeBytes: 16 << 10, Embed: 20, LoadRPS: 1000, LoadVsFloor: 0.5,
}

// SparseGap is the spacing of the sparse calls: long enough for the
// kernel's cgroup lock to fall back to its reader-fast mode between two
// (an RCU grace period), which a steady stream never lets it do.
const SparseGap = 200 * time.Millisecond

// sparseLoop makes n calls one at a time, each starting gap after the one
// before it started (or when it ended, if it took longer), timed from its
// start.
func sparseLoop(ctx context.Context, n int, gap time.Duration, call func(i int) sample) []sample {
	out := make([]sample, 0, n)
	next := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		time.Sleep(time.Until(next))
		t0 := time.Now()
		next = t0.Add(gap)
		s := call(i)
		s.latency = time.Since(t0)
		out = append(out, s)
	}
	return out
}

// Check is one target judged: the figure, the bar and the outcome.
type Check struct {
	Text    string  `json:"text"`
	Value   float64 `json:"value"`
	Bar     float64 `json:"bar"`
	Outcome Outcome `json:"outcome"`
	Why     string  `json:"why,omitempty"`
}

func check(text string, value, bar float64, atMost bool) Check {
	c := Check{Text: text, Value: value, Bar: bar, Outcome: Met}
	if atMost && value > bar || !atMost && value < bar {
		c.Outcome = Missed
	}
	return c
}

// Series is one stream of timed requests.
type Series struct {
	Name    string           `json:"name"`
	Latency Stats            `json:"latency"`
	Phases  map[string]Stats `json:"phases,omitempty"`
	Errors  int              `json:"errors"`
	// FirstError is what the first failed request said.
	FirstError string `json:"first_error,omitempty"`
	// Throttled counts requests whose cgroup hit its CPU quota.
	Throttled int     `json:"throttled"`
	Samples   []int64 `json:"samples_ns"`
}

// SeriesReport is what a warm-path suite measured.
type SeriesReport struct {
	Suite       string         `json:"suite"`
	Fingerprint Fingerprint    `json:"fingerprint"`
	Verdict     Verdict        `json:"verdict"`
	Series      []Series       `json:"series"`
	Figures     map[string]any `json:"figures,omitempty"`
	Checks      []Check        `json:"checks"`
	// Errors lists every failed request of a suite that expects none
	// (soak), each with when and what; the table prints them all.
	Errors []string `json:"errors,omitempty"`
	// Raw holds a suite's datapoints that are not request latencies
	// (memory samples, descriptor counts), for the JSON and the charts.
	Raw any `json:"raw,omitempty"`
}

// ExitCode maps the report to `tine bench`'s exit status as Report.ExitCode
// does: 1 when a request failed (broken, whatever the host did), else 2
// when the host was disturbed, else 1 when a target was missed, else 0.
func (r *SeriesReport) ExitCode() int {
	failed := len(r.Errors) > 0
	for _, s := range r.Series {
		failed = failed || s.Errors > 0
	}
	switch {
	case failed:
		return 1
	case r.Verdict.Disturbed:
		return 2
	}
	for _, c := range r.Checks {
		if c.Outcome == Missed {
			return 1
		}
	}
	return 0
}

// WriteTable prints the report for people.
func (r *SeriesReport) WriteTable(w io.Writer) {
	p := &printer{w: w}
	p.printf("tine bench %s\n", r.Suite)
	for _, s := range r.Series {
		l := s.Latency
		p.printf("  %-28s n=%-5d p50 %s  p90 %s  p99 %s ms  errors %d", s.Name, l.N, millis(l.P50Ns), millis(l.P90Ns), millis(l.P99Ns), s.Errors)
		if s.Throttled > 0 {
			p.printf("  throttled %d", s.Throttled)
		}
		p.printf("\n")
		if s.FirstError != "" {
			p.printf("    first error: %s\n", s.FirstError)
		}
		if len(s.Phases) > 0 {
			names := make([]string, 0, len(s.Phases))
			for n := range s.Phases {
				names = append(names, n)
			}
			slices.SortFunc(names, func(a, b string) int { return phaseOrder(a) - phaseOrder(b) })
			p.printf("    phases p50/p99 ms:")
			for _, n := range names {
				p.printf(" %s %s/%s", n, millis(s.Phases[n].P50Ns), millis(s.Phases[n].P99Ns))
			}
			p.printf("\n")
		}
	}
	keys := make([]string, 0, len(r.Figures))
	for k := range r.Figures {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p.printf("  %s: %v\n", k, r.Figures[k])
	}
	for _, c := range r.Checks {
		switch c.Outcome {
		case NotMeasured:
			p.printf("  target %s: NOT MEASURED (%s)\n", c.Text, c.Why)
		default:
			p.printf("  target %s: %.3g (bar %.3g) %s\n", c.Text, c.Value, c.Bar, strings.ToUpper(string(c.Outcome)))
		}
	}
	if len(r.Errors) > 0 {
		p.printf("  %d errors:\n", len(r.Errors))
		for _, e := range r.Errors {
			p.printf("    %s\n", e)
		}
	}
	if r.Verdict.Disturbed {
		p.printf("  host disturbed: %s: figures NOT MEASURED\n", strings.Join(r.Verdict.Reasons, "; "))
	}
	writeFingerprint(p, r.Fingerprint)
}

var phaseNames = []string{"queue", "dispatch", "fork", "admit", "isolate", "run", "reply", "daemon total"}

func phaseOrder(n string) int {
	if i := slices.Index(phaseNames, n); i >= 0 {
		return i
	}
	return len(phaseNames)
}

// WriteJSON writes the report with its raw samples.
func (r *SeriesReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// sample is one request's outcome.
type sample struct {
	latency   time.Duration
	phases    map[string]float64
	err       error
	throttled bool
}

// openLoop sends n requests at rate per second, each at its scheduled time
// whether or not the earlier ones finished (a slow request delays none
// after it), and times each from when it was sent. The sender's lag behind
// its schedule is returned, to show whether the rate was held.
// call(i) makes request i.
func openLoop(ctx context.Context, n int, rate float64, call func(i int) sample) (out []sample, lag Stats) {
	out = make([]sample, n)
	lags := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		lags[i] = time.Since(at)
		wg.Go(func() {
			t0 := time.Now()
			s := call(i)
			s.latency = time.Since(t0)
			out[i] = s
		})
	}
	wg.Wait()
	return out, Summarize(lags, 0)
}

// invokeSample turns an invocation into a sample.
func invokeSample(inv *api.Invocation, err error) sample {
	if err == nil && inv.Status != api.StatusOK {
		msg := inv.Status
		if inv.Error != nil {
			msg += ": " + inv.Error.Message
		}
		err = fmt.Errorf("%s", msg)
	}
	if err != nil {
		return sample{err: err}
	}
	t := inv.Timings
	return sample{throttled: t.Throttled, phases: map[string]float64{
		"queue": t.Queue, "dispatch": t.Dispatch, "fork": t.Fork, "admit": t.Admit,
		"isolate": t.Isolate, "run": t.Run, "reply": t.Reply, "daemon total": t.Total,
	}}
}

// summarize turns samples into a Series.
func summarize(name string, ss []sample) Series {
	s := Series{Name: name}
	var lat []time.Duration
	phases := map[string][]time.Duration{}
	for _, x := range ss {
		if x.err != nil {
			if s.Errors == 0 {
				s.FirstError = x.err.Error()
			}
			s.Errors++
			continue
		}
		if x.throttled {
			s.Throttled++
		}
		lat = append(lat, x.latency)
		for k, v := range x.phases {
			phases[k] = append(phases[k], time.Duration(v*1e6))
		}
	}
	s.Latency = Summarize(lat, 0)
	s.Samples = nanoseconds(lat)
	if len(phases) > 0 {
		s.Phases = map[string]Stats{}
		for k, v := range phases {
			s.Phases[k] = Summarize(v, 0)
		}
	}
	return s
}

// forkFloor is a python3 outside any sandbox with the same imports as the
// measured function, timing fork()+_exit()+waitpid() once per line it
// reads: the host's fork floor for a process of that size.
type forkFloor struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

const forkFloorScript = `
import os, sys, time
for line in sys.stdin:
    t = time.perf_counter_ns()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print(time.perf_counter_ns() - t, flush=True)
`

func startForkFloor() (*forkFloor, error) {
	cmd := exec.Command("/usr/bin/python3", "-I", "-c", "import "+strings.Join(WarmImports, ", ")+"\n"+forkFloorScript)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the fork floor (python3): %w", err)
	}
	return &forkFloor{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

func (f *forkFloor) sample() (time.Duration, error) {
	if _, err := io.WriteString(f.in, "\n"); err != nil {
		return 0, err
	}
	if !f.out.Scan() {
		return 0, fmt.Errorf("the fork floor ended: %v", f.out.Err())
	}
	ns, err := strconv.ParseInt(f.out.Text(), 10, 64)
	return time.Duration(ns), err
}

func (f *forkFloor) close() { f.in.Close(); f.cmd.Wait() }

// forkFloorRateScript forks children of the 16-import python3 that exit at
// once, as fast as it can with argv[2] in flight, for argv[1] seconds, and
// prints how many it reaped per second.
const forkFloorRateScript = `
import os, sys, time
window, inflight = float(sys.argv[1]), int(sys.argv[2])
live = done = 0
start = time.monotonic()
end = start + window
while time.monotonic() < end or live:
    while live < inflight and time.monotonic() < end:
        if os.fork() == 0:
            os._exit(0)
        live += 1
    os.wait()
    live -= 1
    done += 1
print(done / (time.monotonic() - start))
`

// forkFloorRate is the host's fork-floor throughput: how many children of
// a python3 with the warm function's imports can be forked, exit and be
// reaped per second with inflight at a time. No request path can beat it.
func forkFloorRate(ctx context.Context, window time.Duration, inflight int) (float64, error) {
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-I", "-c", "import "+strings.Join(WarmImports, ", ")+"\n"+forkFloorRateScript,
		strconv.FormatFloat(window.Seconds(), 'f', 3, 64), strconv.Itoa(inflight))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("fork floor rate (python3): %w", err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

// WarmOptions size the warm-path suites.
type WarmOptions struct {
	Requests int
	Rate     float64
	// Sparse calls, one every SparseGap, after the steady stream (warm).
	Sparse  int
	Scripts int
	// PythonSDK is the directory of the Python SDK (sdk/python), for the
	// desktop suite's Python round trips; empty skips them.
	PythonSDK string
	// OSWorldServer is a checkout of OSWorld whose guest server the
	// osworld suite runs on the measured desktop as the same-guest peer;
	// empty leaves the peer out.
	OSWorldServer string
	Progress      io.Writer
	// FleetOnly runs only the fork suite's fleet frame dedup part.
	FleetOnly bool
}

// putWarmFunction registers the 16-import function on d. Its entry lives
// in the daemon's directory, which Stop removes: the function needs it for
// as long as the daemon runs.
func putWarmFunction(ctx context.Context, d *Daemon, name string, concurrency int) error {
	dir, err := os.MkdirTemp(d.dir, "fn-")
	if err != nil {
		return err
	}
	entry := filepath.Join(dir, "handler.py")
	if err := os.WriteFile(entry, []byte(warmHandler()), 0o644); err != nil {
		return err
	}
	_, err = d.Client.PutFunction(ctx, &api.FunctionSpec{Name: name, Entry: entry, Concurrency: concurrency})
	return err
}

func newSeriesReport(suite string, g *Guard) (*SeriesReport, HostState) {
	r := &SeriesReport{Suite: suite, Fingerprint: TakeFingerprint(), Figures: map[string]any{}}
	return r, g.ReadBusy()
}

func (r *SeriesReport) finish(g *Guard, before HostState, ownLoad bool) {
	// The end is judged as the start is, by what the CPUs do over a
	// second now: the 1-minute load average still carries the suite's own
	// minute (its fan-outs and teardowns), so it would blame the host for
	// the suite, or for the suite before it.
	after := g.ReadBusy()
	r.Fingerprint.Before, r.Fingerprint.After = before, after
	judged := after
	if ownLoad {
		// The suite itself loads the host to the end: it is judged at the
		// start only (throttling and steal over the whole run).
		judged.Load1, judged.LoadError = 0, ""
		judged.BusyCores, judged.BusyWindowMs = 0, 0
	}
	r.Verdict = Judge(runtime.NumCPU(), before, judged)
	if r.Verdict.Disturbed {
		for i := range r.Checks {
			r.Checks[i].Outcome, r.Checks[i].Why = NotMeasured, "host disturbed"
		}
	}
}

// Warm measures the warm path: opts.Requests calls at opts.Rate per second
// to the 16-import function, next to the fork floor sampled in the same
// run (one floor sample per four requests, interleaved).
func Warm(ctx context.Context, d *Daemon, opts WarmOptions) (*SeriesReport, error) {
	if err := putWarmFunction(ctx, d, "bench-warm", 4); err != nil {
		return nil, err
	}
	floor, err := startForkFloor()
	if err != nil {
		return nil, err
	}
	defer floor.close()
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("warm", g)
	payload := json.RawMessage(`{"n": 1}`)
	for range 50 { // warm-up: caches, the request-cgroup pool
		d.Client.Invoke(ctx, "bench-warm", payload)
		floor.sample()
	}
	var floorSamples []time.Duration
	var floorMu sync.Mutex
	ss, lag := openLoop(ctx, opts.Requests, opts.Rate, func(i int) sample {
		if i%4 == 0 {
			go func() {
				floorMu.Lock()
				defer floorMu.Unlock()
				if s, err := floor.sample(); err == nil {
					floorSamples = append(floorSamples, s)
				}
			}()
		}
		return invokeSample(d.Client.Invoke(ctx, "bench-warm", payload))
	})
	r.Figures["sender lag behind schedule p50/p99 (ms)"] = millis(lag.P50Ns) + "/" + millis(lag.P99Ns)
	floorMu.Lock()
	fl := Summarize(floorSamples, 0)
	floorMu.Unlock()
	warm := summarize("warm function (16 imports)", ss)
	r.Series = append(r.Series, warm, Series{Name: "fork()+wait() floor", Latency: fl, Samples: nanoseconds(floorSamples)})
	r.Checks = append(r.Checks, check("warm p50 / fork floor p50 (at most)", ratioOf(warm.Latency.P50Ns, fl.P50Ns), WarmTargets.P50VsFloor, true))
	p99 := check("warm p99 / warm p50 (at most)", ratioOf(warm.Latency.P99Ns, warm.Latency.P50Ns), WarmTargets.P99VsP50, true)
	if warm.Throttled > 0 {
		p99.Outcome, p99.Why = NotMeasured, fmt.Sprintf("%d requests hit their CPU quota", warm.Throttled)
	}
	r.Checks = append(r.Checks, p99, check("warm p99 / fork floor p99 (at most)", ratioOf(warm.Latency.P99Ns, fl.P99Ns), WarmTargets.P99VsFloorP99, true))
	if opts.Sparse > 0 {
		sparse := summarize(fmt.Sprintf("warm function, one call every %s", SparseGap), sparseLoop(ctx, opts.Sparse, SparseGap, func(int) sample {
			return invokeSample(d.Client.Invoke(ctx, "bench-warm", payload))
		}))
		r.Series = append(r.Series, sparse)
		r.Checks = append(r.Checks, check(fmt.Sprintf("warm p50 one call every %s / warm p50 at %g/s (at most)", SparseGap, opts.Rate),
			ratioOf(sparse.Latency.P50Ns, warm.Latency.P50Ns), WarmTargets.SparseVsSteady, true))
	}
	r.finish(g, before, false)
	return r, nil
}

func ratioOf(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
