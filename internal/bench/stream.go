package bench

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// StreamTargets are the bars for the screencast on this 2-core
// machine: an idle 30 fps stream's CPU (guest + Xvfb, % of one core), and
// the delta/full ratio of bytes per typing frame.
var StreamTargets = struct{ IdleCPUPct, DeltaOverFull float64 }{0.5, 0.1}

// Stream measures the screencast on one 1280x800 desktop with an xterm:
// bytes per frame of full and delta streams (PNG, JPEG q80) while typing
// at ~12 characters a second (fps 10, frames frames) and over a 3 s idle
// window; whether the composited delta PNG stream equals a lossless
// screenshot once the screen is still; and the CPU of the guest and Xvfb
// at fps 5, 10, 30, idle and typing, with XDamage gating and polling.
// cpuWindow is each CPU cell's length.
func Stream(ctx context.Context, d *Daemon, frames int, cpuWindow time.Duration) (*SeriesReport, error) {
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("stream", g)
	c := d.Client
	dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1280, Height: 800,
		Apps: [][]string{{"xterm", "-geometry", "100x40+0+0"}}})
	if err != nil {
		return nil, fmt.Errorf("create the desktop: %w", err)
	}
	defer c.DeleteDesktop(ctx, dt.ID)
	input, err := c.DialACI(ctx, dt.ID)
	if err != nil {
		return nil, err
	}
	defer input.Close()
	guest, xvfb, err := desktopProcesses(dt.Pid)
	if err != nil {
		return nil, err
	}

	// Bytes per frame.
	var fullPNG, deltaPNG float64
	for _, m := range []struct {
		name string
		o    api.ACIScreencast
	}{
		{"full PNG", api.ACIScreencast{FPS: 10}},
		{"full JPEG q80", api.ACIScreencast{FPS: 10, Format: "jpeg", Quality: 80}},
		{"delta PNG", api.ACIScreencast{FPS: 10, Delta: true}},
		{"delta JPEG q80", api.ACIScreencast{FPS: 10, Format: "jpeg", Quality: 80, Delta: true}},
	} {
		res, err := streamBytes(ctx, c, dt.ID, input, m.o, frames, m.name == "delta PNG")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		r.Figures["typing: "+m.name+": frames, mean / p50 bytes per frame"] = fmt.Sprintf("%d, %.0f / %.0f", res.frames, res.mean, res.p50)
		r.Figures["idle 3 s: "+m.name+": messages, bytes"] = fmt.Sprintf("%d, %d", res.idleMsgs, res.idleBytes)
		switch m.name {
		case "full PNG":
			fullPNG = res.mean
		case "delta PNG":
			deltaPNG = res.mean
			r.Figures["delta PNG composite equals the lossless screenshot"] = res.exact
			r.Figures["delta PNG sequence gaps"] = res.gaps
			exact := 0.0
			if res.exact && res.gaps == 0 {
				exact = 1
			}
			r.Checks = append(r.Checks, check("composited delta PNG stream equals the screenshot, no gaps (1 = yes)", exact, 1, false))
		}
	}
	r.Checks = append(r.Checks, check("delta / full PNG bytes per typing frame (at most)", deltaPNG/fullPNG, StreamTargets.DeltaOverFull, true))

	// CPU of the guest and Xvfb.
	base, err := streamCPU(ctx, c, dt.ID, input, nil, false, cpuWindow, guest, xvfb)
	if err != nil {
		return nil, err
	}
	r.Figures["no stream, idle: guest + Xvfb, % of a core"] = base.String()
	var idle30 float64
	for _, poll := range []bool{false, true} {
		for _, fps := range []int{5, 10, 30} {
			for _, typing := range []bool{false, true} {
				o := &api.ACIScreencast{FPS: fps, Format: "jpeg", Quality: 80, Delta: true, Poll: poll}
				u, err := streamCPU(ctx, c, dt.ID, input, o, typing, cpuWindow, guest, xvfb)
				if err != nil {
					return nil, err
				}
				mode, work := "damage", "idle"
				if poll {
					mode = "poll"
				}
				if typing {
					work = "typing"
				}
				r.Figures[fmt.Sprintf("CPU %s, fps %2d, %s: guest + Xvfb, %% of a core", mode, fps, work)] = u.String()
				if !poll && !typing && fps == 30 {
					idle30 = u.guest + u.xvfb
				}
			}
		}
	}
	r.Figures["CPU read from"] = "/proc/PID/task/*/schedstat (ns on a CPU, every thread), over " + cpuWindow.String() + " a cell"
	r.Checks = append(r.Checks, check("idle 30 fps delta stream: guest + Xvfb, % of a core (at most)", idle30, StreamTargets.IdleCPUPct, true))
	r.finish(g, before, false)
	return r, nil
}

type streamResult struct {
	frames              int
	mean, p50           float64
	idleMsgs, idleBytes int
	exact               bool
	gaps                int
}

// streamBytes streams with o while typing, until frames messages have
// come, then measures a 3 s still window; verify also checks the
// composite against a lossless screenshot.
func streamBytes(ctx context.Context, c *client.Client, id string, input *client.ACI, o api.ACIScreencast, frames int, verify bool) (*streamResult, error) {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	s, err := a.StartScreencast(ctx, &o)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.Next(ctx); err != nil { // the first keyframe
		return nil, fmt.Errorf("the first keyframe: %w", err)
	}
	typeCtx, stopTyping := context.WithCancel(ctx)
	typed := make(chan error, 1)
	go func() { typed <- typeSlowly(typeCtx, input) }()
	res := &streamResult{}
	var sizes []float64
	seq := uint64(1)
	var last *api.ACIFrame
	var pic *image.RGBA
	for len(sizes) < frames {
		h, p, err := s.Next(ctx)
		if err != nil {
			stopTyping()
			return nil, fmt.Errorf("frame %d while typing: %w", len(sizes)+1, err)
		}
		if h.Seq != seq+1 {
			res.gaps++
		}
		seq, last, pic = h.Seq, h, p
		sizes = append(sizes, float64(frameBytes(h)))
	}
	stopTyping()
	if err := <-typed; err != nil {
		return nil, fmt.Errorf("typing: %w", err)
	}
	res.frames = len(sizes)
	res.mean, res.p50 = mean(sizes), median(sizes)

	// Still: the last frames of typing drain, then nothing should come.
	rep, img, err := input.Step(ctx, nil, &api.ACIObserve{Screenshot: &api.ACIScreenshot{}, SettleMs: 300})
	if err != nil {
		return nil, fmt.Errorf("the still screenshot: %w", err)
	}
	for last.FrameHash != rep.FrameHash { // unless the last frame read was the still screen
		h, p, err := s.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("frames after typing: %w", err)
		}
		if h.Seq != seq+1 {
			res.gaps++
		}
		seq, last, pic = h.Seq, h, p
	}
	if verify {
		want, err := png.Decode(bytes.NewReader(img))
		if err != nil {
			return nil, err
		}
		res.exact = samePicture(pic, want)
	}
	idle, cancel := context.WithTimeout(ctx, 3*time.Second)
	for {
		h, _, err := s.Next(idle)
		if err != nil {
			break
		}
		res.idleMsgs++
		res.idleBytes += frameBytes(h)
	}
	cancel()
	return res, s.Stop(ctx)
}

// typeSlowly types a shell line at ~12 characters a second until stop
// ends. (Each key goes with a context of its own: a write cancelled
// midway closes the WebSocket.)
func typeSlowly(stop context.Context, a *client.ACI) error {
	const line = "echo the quick brown fox jumps over the lazy dog\n"
	for i := 0; ; i++ {
		if err := a.Type(context.Background(), string(line[i%len(line)])); err != nil {
			return err
		}
		select {
		case <-stop.Done():
			return nil
		case <-time.After(80 * time.Millisecond):
		}
	}
}

func frameBytes(h *api.ACIFrame) int {
	n := 0
	for _, r := range h.Rects {
		n += r.Bytes
	}
	return n
}

func samePicture(got *image.RGBA, want image.Image) bool {
	if got == nil || got.Bounds() != want.Bounds() {
		return false
	}
	for y := range got.Rect.Dy() {
		for x := range got.Rect.Dx() {
			r, g, b, _ := want.At(x, y).RGBA()
			p := got.RGBAAt(x, y)
			if p.R != uint8(r>>8) || p.G != uint8(g>>8) || p.B != uint8(b>>8) {
				return false
			}
		}
	}
	return true
}

type cpuUse struct{ guest, xvfb float64 } // % of one core

func (u cpuUse) String() string {
	return fmt.Sprintf("%.2f + %.2f = %.2f", u.guest, u.xvfb, u.guest+u.xvfb)
}

// streamCPU runs a stream o (nil: none) for window, typing or not, and
// returns the CPU the guest and Xvfb used meanwhile.
func streamCPU(ctx context.Context, c *client.Client, id string, input *client.ACI, o *api.ACIScreencast, typing bool, window time.Duration, guest, xvfb int) (cpuUse, error) {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return cpuUse{}, err
	}
	defer a.Close()
	var s *client.Screencast
	drained := make(chan struct{})
	if o != nil {
		if s, err = a.StartScreencast(ctx, o); err != nil {
			return cpuUse{}, err
		}
		go func() { // read as a client would, so the guest never waits on us
			defer close(drained)
			for {
				if _, _, err := s.Next(ctx); err != nil {
					return
				}
			}
		}()
	} else {
		close(drained)
	}
	// Settle: the first keyframe, and whatever the last cell left drawing.
	if _, _, err := input.Step(ctx, nil, &api.ACIObserve{SettleMs: 300}); err != nil {
		return cpuUse{}, err
	}
	typeCtx, stopTyping := context.WithCancel(ctx)
	defer stopTyping()
	if typing {
		go typeSlowly(typeCtx, input)
	}
	g0, x0 := taskCPU(guest), taskCPU(xvfb)
	t0 := time.Now()
	time.Sleep(window)
	g1, x1 := taskCPU(guest), taskCPU(xvfb)
	el := time.Since(t0)
	stopTyping()
	if s != nil {
		s.Stop(ctx)
		a.Close()
	}
	<-drained
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(el) }
	return cpuUse{guest: pct(g1 - g0), xvfb: pct(x1 - x0)}, nil
}

// taskCPU is the time every thread of pid has run, from schedstat (ns;
// /proc/PID/stat counts in 10 ms ticks, too coarse for an idle stream).
func taskCPU(pid int) time.Duration {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			if ns, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
				sum += ns
			}
		}
	}
	return time.Duration(sum)
}

// desktopProcesses finds a desktop's guest and Xvfb among its sandbox's
// processes.
func desktopProcesses(pid int) (guest, xvfb int, err error) {
	for _, p := range processTree(pid) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		argv := strings.Split(string(cmd), "\x00")
		switch {
		case filepath.Base(argv[0]) == "Xvfb":
			xvfb = p
		case len(argv) > 1 && argv[1] == "guest":
			guest = p
		}
	}
	if guest == 0 || xvfb == 0 {
		return 0, 0, fmt.Errorf("desktop sandbox %d: guest pid %d, Xvfb pid %d: not both found", pid, guest, xvfb)
	}
	return guest, xvfb, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
