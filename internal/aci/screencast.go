package aci

import (
	"context"
	"encoding/json"
	"image"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/stream"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// Screencast defaults and limits (docs/aci.md, "Screencast").
const (
	defaultFPS        = 10
	maxFPS            = 60
	defaultKeyEveryMs = 5000
	minKeyEveryMs     = 100
	maxKeyEveryMs     = 600000
)

// screencast streams one session's screen as frames. It waits on XDamage
// (or, polling, a ticker), so a still screen costs no capture and no
// encode; it sends one message at a time and captures the next only once
// the last is written, so a slow client gets the latest state late,
// never a queue. The session's requests run on their own goroutine: the
// stream never holds up input.
type screencast struct {
	d        *x11.Display
	c        *websocket.Conn
	o        api.ACIScreencast
	format   encode.Format
	interval time.Duration
	keyEvery time.Duration

	region *x11.DamageRegion // nil: poll
	scaler *frame.Scaler     // nil: native size
	screen image.Rectangle
	raw    *frame.Frame // the screen as last captured, without the cursor
	next   *frame.Frame // poll: the capture being compared
	comp   *frame.Frame // raw with the cursor drawn in (cursor only)
	out    *frame.Frame // what is streamed: comp or raw, scaled
	cursor *x11.Cursor  // as last drawn

	keyReq chan struct{}
	start  chan struct{} // closed (begin) once the start's reply is written
	begun  sync.Once
	stop   chan struct{}
	done   chan struct{}
	t0     time.Time
	seq    uint64
}

// screencastOp runs screencast_start, _stop and _keyframe.
func (ss *session) screencastOp(req *api.ACIRequest, rep *api.ACIReply) error {
	switch req.Op {
	case "screencast_start":
		if ss.cast != nil {
			return bad("a screencast is already running on this session: screencast_stop it first")
		}
		sc, err := newScreencast(ss.s.D, ss.c, req.Screencast)
		if err != nil {
			return err
		}
		ss.cast = sc
		ss.afterReply = sc.begin
		go sc.run(ss.ctx)
		rep.Width, rep.Height, rep.Format = sc.out.Width, sc.out.Height, string(sc.format)
		return nil
	case "screencast_stop":
		if ss.cast == nil {
			return bad("no screencast is running on this session")
		}
		ss.stopScreencast()
		return nil
	default: // screencast_keyframe
		if ss.cast == nil {
			return bad("no screencast is running on this session")
		}
		select {
		case ss.cast.keyReq <- struct{}{}:
		default: // one is already asked for
		}
		return nil
	}
}

// stopScreencast ends the session's stream, if any: once it returns, no
// frame follows.
func (ss *session) stopScreencast() {
	if ss.cast == nil {
		return
	}
	sc := ss.cast
	ss.cast = nil
	close(sc.stop)
	sc.begin() // if its reply never went out
	<-sc.done
	if sc.region != nil {
		sc.region.Close()
	}
}

// begin lets the stream send its first frame (after its start's reply).
func (sc *screencast) begin() { sc.begun.Do(func() { close(sc.start) }) }

func newScreencast(d *x11.Display, c *websocket.Conn, o *api.ACIScreencast) (*screencast, error) {
	if o == nil {
		o = &api.ACIScreencast{}
	}
	sc := &screencast{d: d, c: c, o: *o, keyReq: make(chan struct{}, 1), start: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	switch {
	case o.FPS == 0:
		sc.o.FPS = defaultFPS
	case o.FPS < 1 || o.FPS > maxFPS:
		return nil, bad("screencast fps %d: want 1 to %d", o.FPS, maxFPS)
	}
	switch sc.format = encode.Format(o.Format); sc.format {
	case "":
		sc.format = encode.FormatPNG
	case encode.FormatPNG, encode.FormatJPEG:
	default:
		return nil, bad("screencast format %q: want png or jpeg", o.Format)
	}
	if o.Quality < 0 || o.Quality > 100 {
		return nil, bad("screencast quality %d: want 1 to 100 (0: %d)", o.Quality, encode.DefaultJPEGQuality)
	}
	if o.MaxLongEdge < 0 {
		return nil, bad("screencast max_long_edge %d: want 0 (native size) or more", o.MaxLongEdge)
	}
	switch k := o.KeyframeIntervalMs; {
	case k == 0:
		sc.o.KeyframeIntervalMs = defaultKeyEveryMs
	case k < minKeyEveryMs || k > maxKeyEveryMs:
		return nil, bad("screencast keyframe_interval_ms %d: want %d to %d", k, minKeyEveryMs, maxKeyEveryMs)
	}
	if o.Cursor && !d.CursorImages() {
		return nil, bad("screencast cursor: the X server lacks XFixes, so the cursor cannot be drawn")
	}
	sc.interval = time.Second / time.Duration(sc.o.FPS)
	sc.keyEvery = time.Duration(sc.o.KeyframeIntervalMs) * time.Millisecond
	w, h := d.Size()
	sc.screen = image.Rect(0, 0, w, h)
	sc.raw = frame.New(w, h)
	sc.comp, sc.out = sc.raw, sc.raw
	if o.Cursor {
		sc.comp = frame.New(w, h)
		sc.out = sc.comp
	}
	if sc.scaler = frame.NewScaler(w, h, o.MaxLongEdge); sc.scaler != nil {
		sc.out = frame.New(sc.scaler.W, sc.scaler.H)
	}
	if !o.Poll && d.Damage() {
		r, err := d.NewDamageRegion()
		if err != nil {
			return nil, err
		}
		sc.region = r
	} else {
		sc.o.Poll = true
		sc.next = frame.New(w, h)
	}
	return sc, nil
}

func (sc *screencast) run(ctx context.Context) {
	defer close(sc.done)
	select {
	case <-sc.start:
	case <-sc.stop:
		return
	}
	sc.t0 = time.Now()
	var tick <-chan time.Time // poll, or the cursor's moves
	if sc.o.Poll || sc.o.Cursor {
		t := time.NewTicker(sc.interval)
		defer t.Stop()
		tick = t.C
	}
	var changed <-chan struct{}
	if sc.region != nil {
		changed = sc.region.Changed()
	}
	key := true // the first frame
	var lastCap, lastKey time.Time
	for {
		if !key {
			select {
			case <-sc.stop:
				return
			case <-ctx.Done():
				return
			case <-sc.keyReq:
				key = true
			case <-changed:
			case <-tick:
			}
		}
		// At most fps frames a second: changes until the slot is due
		// gather into one frame.
		if wait := time.Until(lastCap.Add(sc.interval)); wait > 0 {
			select {
			case <-sc.stop:
				return
			case <-time.After(wait):
			}
		}
		select {
		case <-sc.keyReq:
			key = true
		default:
		}
		now := time.Now()
		tiles, skipped, err := sc.collect(now, lastCap)
		if err != nil {
			return
		}
		if len(tiles) == 0 && !key {
			continue
		}
		if !sc.o.Delta || now.Sub(lastKey) >= sc.keyEvery {
			key = true
		}
		msg, err := sc.frame(key, tiles, now, skipped)
		if err != nil {
			return
		}
		if err := sc.c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			return
		}
		lastCap = now
		if key {
			lastKey, key = now, false
		}
	}
}

// collect finds what changed since the last frame, reads it into raw and
// returns it as tiles (screen coordinates), with the frame slots missed.
func (sc *screencast) collect(now, lastCap time.Time) ([]image.Rectangle, int, error) {
	var dirty []image.Rectangle
	due := lastCap.Add(sc.interval)
	if sc.region != nil {
		rects, since := sc.region.Take()
		if since.After(due) {
			due = since
		}
		dirty = stream.Merge(rects, sc.screen)
		if err := sc.d.CaptureRects(sc.raw, dirty); err != nil {
			return nil, 0, err
		}
	} else {
		f, err := sc.d.CaptureInto(sc.next, image.Rectangle{}, false)
		if err != nil {
			return nil, 0, err
		}
		dirty = stream.Changed(sc.raw, f)
		sc.raw, sc.next = f, sc.raw
	}
	if sc.o.Cursor {
		c, err := sc.d.Pointer()
		if err != nil {
			return nil, 0, err
		}
		if old := sc.cursor; old == nil || old.Bounds != c.Bounds || old.Serial != c.Serial {
			if old != nil {
				dirty = append(dirty, old.Bounds)
			}
			dirty = append(dirty, c.Bounds)
		} else {
			for _, t := range dirty {
				if t.Overlaps(c.Bounds) { // redrawn under the cursor: draw it again
					dirty = append(dirty, c.Bounds)
					break
				}
			}
		}
		sc.cursor = c
		dirty = stream.Merge(dirty, sc.screen)
	}
	skipped := 0
	if !lastCap.IsZero() && now.After(due) {
		skipped = int(now.Sub(due) / sc.interval)
	}
	return dirty, skipped, nil
}

// frame composes, scales and encodes a keyframe (the whole screen) or a
// delta (the tiles), and lays out its message.
func (sc *screencast) frame(key bool, tiles []image.Rectangle, now time.Time, skipped int) ([]byte, error) {
	if key {
		if sc.region != nil && (len(tiles) != 1 || tiles[0] != sc.screen) {
			if err := sc.d.CaptureRects(sc.raw, []image.Rectangle{sc.screen}); err != nil {
				return nil, err
			}
		}
		tiles = []image.Rectangle{sc.screen}
	}
	src := sc.raw // poll swaps raw for each capture
	if sc.o.Cursor {
		src = sc.comp
	}
	if sc.scaler == nil {
		sc.out = src
	}
	out := make([]image.Rectangle, 0, len(tiles))
	for _, t := range tiles {
		if sc.o.Cursor {
			copyPixels(sc.comp, sc.raw, t)
			sub, _ := sc.comp.Sub(t)
			sc.cursor.Draw(sub, t.Min)
		}
		if sc.scaler != nil {
			t = sc.scaler.Covering(t)
			sc.scaler.ScaleParallel(sc.out, src, t)
		}
		out = append(out, t)
	}
	hdr := api.ACIFrame{Type: api.ACIFrameType, Kind: "delta", Format: string(sc.format), Width: sc.out.Width, Height: sc.out.Height,
		TimeMs: float64(now.Sub(sc.t0).Microseconds()) / 1000, Skipped: skipped, FrameHash: sc.out.Hash().String()}
	if key {
		hdr.Kind = "key"
	}
	if sc.o.Cursor {
		x, y := sc.cursorAt()
		hdr.Cursor = &[2]int{x, y}
	}
	var payload []byte
	for _, t := range out {
		sub, err := sc.out.Sub(t)
		if err != nil {
			return nil, err
		}
		img, err := encode.Encode(sub, sc.format, sc.o.Quality)
		if err != nil {
			return nil, err
		}
		payload = append(payload, img...)
		hdr.Rects = append(hdr.Rects, api.ACIRect{X: t.Min.X, Y: t.Min.Y, W: t.Dx(), H: t.Dy(), Bytes: len(img)})
	}
	sc.seq++
	hdr.Seq = sc.seq
	head, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	return api.ACIJoin(head, payload), nil
}

// cursorAt is the pointer's hot spot in the stream's coordinates.
func (sc *screencast) cursorAt() (int, int) {
	p := sc.cursor.Hot
	if sc.scaler != nil {
		return p.X * sc.scaler.W / sc.scaler.SrcW, p.Y * sc.scaler.H / sc.scaler.SrcH
	}
	return p.X, p.Y
}

// copyPixels copies rectangle r of src into dst (frames of one size).
func copyPixels(dst, src *frame.Frame, r image.Rectangle) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		copy(dst.Pix[y*dst.Stride+r.Min.X*4:y*dst.Stride+r.Max.X*4], src.Pix[y*src.Stride+r.Min.X*4:])
	}
}
