package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"time"

	"github.com/tine-run/tine/api"
)

// OSWorldTargets are the bars on this 2-core machine: /execute of
// a pyautogui click through the facade's fast path and GET /screenshot,
// p50 in ms, and how many times faster a facade step is than OSWorld's own
// server on the same guest.
var OSWorldTargets = struct{ ExecuteMs, ScreenshotMs, StepSpeedup float64 }{2, 10, 30}

const osworldPrefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "

// OSWorld measures an OSWorld step as OSWorld's client takes it — POST
// /execute with a pyautogui click, then GET /screenshot, a fresh TCP
// connection each — through the facade's fast path and through its python3
// path (the same program run by the interpreter with tine's pyautogui
// module), and the ACI's step (click + PNG screenshot) on the same desktop,
// interleaved round by round.
func OSWorld(ctx context.Context, d *Daemon, opts WarmOptions) (*SeriesReport, error) {
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("osworld", g)
	c := d.Client
	n := max(opts.Requests/20, 30)
	slowEvery := 5 // the interpreter path costs ~100× more: every 5th round

	spec := &api.DesktopSpec{Width: 1280, Height: 800, OSWorld: true, Apps: textApps}
	if opts.OSWorldServer != "" {
		osworldServerSpec(spec)
	}
	dt, err := c.CreateDesktop(ctx, spec)
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

	// OSWorld's client opens a connection per request.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
	var peer *osworldPeer
	if opts.OSWorldServer != "" {
		if peer, err = startOSWorldServer(ctx, c, hc, dt, opts.OSWorldServer); err != nil {
			return nil, err
		}
	}
	facade := "http://" + dt.OSWorld
	// execute posts argv to base's /execute; wantPath is the facade's
	// X-Tine-Path ("" for OSWorld's own server, which sends none).
	execute := func(base string, argv []string, wantPath string) error {
		body, _ := json.Marshal(map[string]any{"command": argv, "shell": false})
		resp, err := hc.Post(base+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !succeeded(out) {
			return fmt.Errorf("execute: %d %s", resp.StatusCode, out)
		}
		if got := resp.Header.Get("X-Tine-Path"); got != wantPath {
			return fmt.Errorf("execute ran as %q, want %q", got, wantPath)
		}
		return nil
	}
	screenshot := func(base string) error {
		resp, err := hc.Get(base + "/screenshot")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		img, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !bytes.HasPrefix(img, []byte("\x89PNG")) {
			return fmt.Errorf("screenshot: %d", resp.StatusCode)
		}
		return nil
	}
	timeOne := func(fn func() error) sample {
		t0 := time.Now()
		err := fn()
		return sample{latency: time.Since(t0), err: err}
	}
	var fastExec, shots, fastStep, slowExec, slowStep, aciStep, peerStep []sample
	for i := range n {
		x, y := 900+i%50, 600
		click := fmt.Sprintf("pyautogui.click(%d, %d)", x, y)
		// fast: the facade's own path, then the screenshot.
		e := timeOne(func() error { return execute(facade, []string{"python", "-c", osworldPrefix + click}, "fast") })
		s := timeOne(func() error { return screenshot(facade) })
		fastExec, shots = append(fastExec, e), append(shots, s)
		fastStep = append(fastStep, sample{latency: e.latency + s.latency, err: firstErr(e.err, s.err)})
		// The ACI step: click, then a PNG screenshot, one round trip.
		aciStep = append(aciStep, timeOne(func() error {
			px, py := x, y
			_, _, err := a.Step(ctx, []api.ACIRequest{{Op: "click", X: &px, Y: &py}}, &api.ACIObserve{Screenshot: &api.ACIScreenshot{Format: "png", Cursor: true}})
			return err
		}))
		if i%slowEvery == 0 {
			// python -B -c is not the shape the fast path takes: the
			// interpreter runs it, with tine's pyautogui module.
			e := timeOne(func() error { return execute(facade, []string{"python", "-B", "-c", osworldPrefix + click}, "process") })
			s := timeOne(func() error { return screenshot(facade) })
			slowExec = append(slowExec, e)
			slowStep = append(slowStep, sample{latency: e.latency + s.latency, err: firstErr(e.err, s.err)})
			if peer != nil {
				// OSWorld's server runs the command as it comes.
				e := timeOne(func() error { return execute(peer.base, []string{"python", "-c", osworldPrefix + click}, "") })
				s := timeOne(func() error { return screenshot(peer.base) })
				peerStep = append(peerStep, sample{latency: e.latency + s.latency, err: firstErr(e.err, s.err)})
			}
		}
	}
	fe, sh, fs := summarize("/execute pyautogui.click, fast path (fresh TCP connection)", fastExec),
		summarize("/screenshot PNG 1280x800 with the cursor (fresh TCP connection)", shots),
		summarize("OSWorld step through the facade: /execute click + /screenshot", fastStep)
	se, ss := summarize("/execute pyautogui.click, python3 path (tine's pyautogui module)", slowExec),
		summarize("OSWorld step, python3 path: /execute click + /screenshot", slowStep)
	as := summarize("ACI step: click + PNG screenshot (Go client)", aciStep)
	r.Series = append(r.Series, fe, sh, fs, se, ss, as)
	r.Figures["python3 path step p50 / fast path step p50"] = fmt.Sprintf("%.1f", ratioOf(ss.Latency.P50Ns, fs.Latency.P50Ns))
	r.Figures["facade step p50 / ACI step p50"] = fmt.Sprintf("%.2f", ratioOf(fs.Latency.P50Ns, as.Latency.P50Ns))
	r.Checks = append(r.Checks,
		check("/execute click through the fast path p50, ms (at most)", float64(fe.Latency.P50Ns)/1e6, OSWorldTargets.ExecuteMs, true),
		check("/screenshot p50, ms (at most)", float64(sh.Latency.P50Ns)/1e6, OSWorldTargets.ScreenshotMs, true))
	if peer == nil {
		r.Figures["OSWorld's own server on the same guest"] = "not measured: give --osworld-server DIR (a checkout of OSWorld) to run its server on the same display"
	} else {
		ps := summarize("OSWorld step through OSWorld's own server: /execute click + /screenshot", peerStep)
		r.Series = append(r.Series, ps)
		r.Figures["OSWorld's own server: the pyautogui its commands import"] = peer.pyautogui
		r.Checks = append(r.Checks, check("OSWorld's own server step p50 / facade step p50 (at least)", ratioOf(ps.Latency.P50Ns, fs.Latency.P50Ns), OSWorldTargets.StepSpeedup, false))
	}
	r.finish(g, before, false)
	return r, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
