package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// DesktopTargets are the bars for desktops on this 2-core machine.
// ScaledRatio is issue 13's: a screenshot at a 1024 long edge costs at
// most this much of the native one (p50 over p50, same format, same run).
var DesktopTargets = struct{ ReadyMs, ActionMs, PNGMs, JPEGMs, PSSMiB, ScaledRatio float64 }{400, 0.5, 8, 5, 40, 0.8}

// textApps fill a desktop with text, the hard case for encoders.
var textApps = [][]string{
	{"xterm", "-geometry", "100x50+0+0", "-e", "sh", "-c", "ls -la /usr/bin /usr/lib | head -400; exec cat"},
	{"xterm", "-geometry", "80x50+640+0", "-e", "sh", "-c", "cat /etc/services; exec cat"},
}

// Desktop measures desktops through the daemon and the Go client:
// create→ready, action round trips, screenshots, step against sequential
// calls, and memory per added desktop.
func Desktop(ctx context.Context, d *Daemon, opts WarmOptions) (*SeriesReport, error) {
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("desktop", g)
	c := d.Client
	n := max(opts.Requests/10, 50)

	// create→ready, p50 of 10 (one xterm each).
	var creates []sample
	for range 10 {
		t0 := time.Now()
		dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
		s := sample{latency: time.Since(t0), err: err}
		creates = append(creates, s)
		if err == nil {
			c.DeleteDesktop(ctx, dt.ID)
		}
	}
	create := summarize("create→ready (1280x800, openbox, xterm)", creates)
	r.Series = append(r.Series, create)

	dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1280, Height: 800, Apps: textApps})
	if err != nil {
		return nil, fmt.Errorf("create the measured desktop: %w", err)
	}
	defer c.DeleteDesktop(ctx, dt.ID)
	a, err := c.DialACI(ctx, dt.ID)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	time.Sleep(500 * time.Millisecond) // let the xterms draw their text

	x, y := 1200, 700
	actions := []struct {
		name string
		req  api.ACIRequest
	}{
		{"click", api.ACIRequest{Op: "click", X: &x, Y: &y}},
		{"key", api.ACIRequest{Op: "key", Keys: "shift"}},
		{"type 1 char", api.ACIRequest{Op: "type", Text: "a"}},
	}
	var actionP50 []float64
	for _, act := range actions {
		ss := timed(n, func() error { req := act.req; _, _, err := a.Do(ctx, &req); return err })
		s := summarize("action round trip: "+act.name+" (Go client)", ss)
		actionP50 = append(actionP50, float64(s.Latency.P50Ns)/1e6)
		r.Series = append(r.Series, s)
	}
	a.Key(ctx, "BackSpace") // the typed characters went to the focused xterm's cat
	if opts.PythonSDK != "" {
		for _, act := range []string{"click", "key", "type 1 char"} {
			ss, err := pythonRoundTrips(opts.PythonSDK, d.Socket, dt.ID, act, n)
			name := "action round trip: " + act + " (Python SDK)"
			if err != nil {
				r.Series = append(r.Series, Series{Name: name, Errors: 1, FirstError: err.Error()})
				continue
			}
			r.Series = append(r.Series, summarize(name, ss))
		}
		a.Key(ctx, "BackSpace")
	}

	shots := []struct {
		name string
		o    api.ACIScreenshot
	}{
		{"screenshot PNG 1280x800", api.ACIScreenshot{Format: "png"}},
		{"screenshot JPEG q80 1280x800", api.ACIScreenshot{Format: "jpeg", Quality: 80}},
		{"screenshot PNG 1024 long edge", api.ACIScreenshot{Format: "png", MaxLongEdge: 1024}},
		{"screenshot JPEG q80 1024 long edge", api.ACIScreenshot{Format: "jpeg", Quality: 80, MaxLongEdge: 1024}},
	}
	// Interleaved, in balanced order (Rotation), so that a scaled shot and
	// its native peer see the same host: their ratio is the figure that
	// counts.
	shotSamples := make([][]sample, len(shots))
	for round := range n / 2 {
		for _, i := range Rotation(len(shots), round) {
			o := shots[i].o
			t0 := time.Now()
			_, _, err := a.Screenshot(ctx, &o)
			shotSamples[i] = append(shotSamples[i], sample{latency: time.Since(t0), err: err})
		}
	}
	p50 := make([]int64, len(shots))
	for i, sh := range shots {
		s := summarize(sh.name, shotSamples[i])
		r.Series = append(r.Series, s)
		p50[i] = s.Latency.P50Ns
	}
	pngMs, jpegMs := float64(p50[0])/1e6, float64(p50[1])/1e6
	pngRatio, jpegRatio := ratioOf(p50[2], p50[0]), ratioOf(p50[3], p50[1])
	r.Figures["screenshot PNG: 1024 long edge p50 / 1280x800 p50"] = fmt.Sprintf("%.2f", pngRatio)
	r.Figures["screenshot JPEG q80: 1024 long edge p50 / 1280x800 p50"] = fmt.Sprintf("%.2f", jpegRatio)
	r.Figures["guest's JPEG encoder and capture"] = a.Welcome.JPEG + ", " + a.Welcome.Capture

	for _, k := range []int{3, 5, 8} {
		acts := make([]api.ACIRequest, k)
		for i := range acts {
			px, py := 100+i*10, 100+i*10
			acts[i] = api.ACIRequest{Op: "move", X: &px, Y: &py}
		}
		step := summarize(fmt.Sprintf("step, %d moves + cursor", k), timed(n, func() error {
			_, _, err := a.Step(ctx, acts, &api.ACIObserve{Cursor: true})
			return err
		}))
		seq := summarize(fmt.Sprintf("%d moves + cursor, sequential", k), timed(n, func() error {
			for i := range acts {
				if _, _, err := a.Do(ctx, &acts[i]); err != nil {
					return err
				}
			}
			_, _, err := a.Do(ctx, &api.ACIRequest{Op: "cursor"})
			return err
		}))
		r.Series = append(r.Series, step, seq)
		r.Figures[fmt.Sprintf("step k=%d: sequential p50 / step p50", k)] = fmt.Sprintf("%.2f", ratioOf(seq.Latency.P50Ns, step.Latency.P50Ns))
	}

	slope, pss, err := desktopPSS(ctx, c, 8)
	if err != nil {
		return nil, err
	}
	for i, p := range pss {
		r.Figures[fmt.Sprintf("PSS of %d desktops (MiB)", i+1)] = fmt.Sprintf("%.1f", float64(p)/(1<<20))
	}
	r.Figures["PSS per added desktop (MiB, least-squares slope over 1..8)"] = fmt.Sprintf("%.1f", slope/(1<<20))

	r.Checks = append(r.Checks,
		check("create→ready p50, ms (at most)", float64(create.Latency.P50Ns)/1e6, DesktopTargets.ReadyMs, true),
		check("action round trip p50 (worst of click, key, type), ms (at most)", maxOf(actionP50), DesktopTargets.ActionMs, true),
		check("screenshot PNG 1280x800 p50, ms (at most)", pngMs, DesktopTargets.PNGMs, true),
		check("screenshot JPEG q80 1280x800 p50, ms (at most)", jpegMs, DesktopTargets.JPEGMs, true),
		check("screenshot PNG 1024 long edge p50 / 1280x800 p50 (at most)", pngRatio, DesktopTargets.ScaledRatio, true),
		check("screenshot JPEG q80 1024 long edge p50 / 1280x800 p50 (at most)", jpegRatio, DesktopTargets.ScaledRatio, true),
		check("PSS per added desktop, MiB (at most)", slope/(1<<20), DesktopTargets.PSSMiB, true))
	r.finish(g, before, false)
	return r, nil
}

// pythonRoundTripScript times n actions through the Python SDK's sync
// desktop session and prints the nanoseconds of each, one per line.
const pythonRoundTripScript = `
import sys, time, tine
sock, desktop, act, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = tine.Client(sock)
s = c.aci(desktop)
do = {"click": lambda: s.click(1200, 700), "key": lambda: s.key("shift"), "type 1 char": lambda: s.type("a")}[act]
for _ in range(10):
    do()
for _ in range(n):
    t = time.perf_counter_ns(); do(); print(time.perf_counter_ns() - t)
s.close()
`

// pythonRoundTrips runs pythonRoundTripScript with the SDK at sdk.
func pythonRoundTrips(sdk, socket, desktop, act string, n int) ([]sample, error) {
	cmd := exec.Command("/usr/bin/python3", "-c", pythonRoundTripScript, socket, desktop, act, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("python SDK: %v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("python SDK: %w", err)
	}
	var ss []sample
	for _, line := range strings.Fields(string(out)) {
		ns, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("python SDK printed %q", line)
		}
		ss = append(ss, sample{latency: time.Duration(ns)})
	}
	return ss, nil
}

// timed runs fn n times, one after another, timing each.
func timed(n int, fn func() error) []sample {
	out := make([]sample, n)
	for i := range out {
		t0 := time.Now()
		err := fn()
		out[i] = sample{latency: time.Since(t0), err: err}
	}
	return out
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// desktopPSS starts n desktops (one xterm each) one by one and sums the
// PSS of every process of all of them after each; it returns the
// least-squares slope per desktop and the sums.
func desktopPSS(ctx context.Context, c *client.Client, n int) (float64, []int64, error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			c.DeleteDesktop(ctx, id)
		}
	}()
	var sums []int64
	for range n {
		dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
		if err != nil {
			return 0, nil, fmt.Errorf("desktop %d of %d: %w", len(ids)+1, n, err)
		}
		ids = append(ids, dt.ID)
		time.Sleep(300 * time.Millisecond)
		var sum int64
		for _, id := range ids {
			d, err := c.Desktop(ctx, id)
			if err != nil {
				return 0, nil, err
			}
			sum += treePSS(d.Pid)
		}
		sums = append(sums, sum)
	}
	return slopeOf(sums), sums, nil
}
