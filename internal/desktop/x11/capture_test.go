package x11_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
	"github.com/tine-run/tine/internal/require"
)

// The test pattern: four stripes of known colours in a window at a known
// place on a black screen.
var (
	patternRect    = image.Rect(100, 120, 100+4*50, 120+80)
	patternColours = []uint32{0xff0000, 0x00ff00, 0x0000ff, 0x123456}
)

func drawPattern(t *testing.T, display string) {
	c := newClient(t, display)
	w := c.window(t, patternRect, 0)
	for i, rgb := range patternColours {
		c.fill(t, w, image.Rect(i*50, 0, i*50+50, 80), rgb)
	}
}

// wantPattern checks that f, captured at origin, shows the pattern.
func wantPattern(t *testing.T, f *frame.Frame, origin image.Point) {
	t.Helper()
	for y := range f.Height {
		for x := range f.Width {
			sp := image.Pt(x, y).Add(origin)
			want := uint32(0) // Xvfb's root is black
			if sp.In(patternRect) {
				want = patternColours[(sp.X-patternRect.Min.X)/50]
			}
			p := f.Pix[y*f.Stride+x*4:]
			if got := uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0]); got != want {
				t.Fatalf("screen pixel %v = #%06x, want #%06x", sp, got, want)
			}
		}
	}
}

// The ways to capture, each on a fresh Xvfb.
var captureModes = []struct {
	name    string
	connect func(testing.TB) (*x11.Display, string)
	shm     bool
}{
	{"shm", func(t testing.TB) (*x11.Display, string) { return newDisplay(t, false, x11.Options{}) }, true},
	{"getimage", func(t testing.TB) (*x11.Display, string) { return newDisplay(t, false, x11.Options{NoSHM: true}) }, false},
	{"framebuffer", newFramebufferDisplay, true},
}

// Every capture path passes the same checks (and they agree to the bit).
func TestCapture(t *testing.T) {
	var hashes []frame.Hash
	for _, c := range captureModes {
		t.Run(c.name, func(t *testing.T) {
			d, display := c.connect(t)
			if d.SHM() != c.shm {
				t.Fatalf("SHM() = %v, want %v", d.SHM(), c.shm)
			}
			drawPattern(t, display)

			full, err := d.Capture(image.Rectangle{}, false)
			if err != nil {
				t.Fatal(err)
			}
			if full.Width != screenW || full.Height != screenH {
				t.Fatalf("full capture %dx%d, want %dx%d", full.Width, full.Height, screenW, screenH)
			}
			wantPattern(t, full, image.Point{})

			region := image.Rect(80, 110, 330, 230) // pattern plus a black margin
			crop, err := d.Capture(region, false)
			if err != nil {
				t.Fatal(err)
			}
			wantPattern(t, crop, region.Min)
			hashes = append(hashes, crop.Hash())

			// Lossless: the PNG of a capture decodes to the same pixels.
			var buf bytes.Buffer
			if err := encode.PNG(&buf, crop); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if frame.FromImage(img).Hash() != zeroPad(crop).Hash() {
				t.Fatal("PNG of the capture does not decode to the captured pixels")
			}

			// The capture above proves capturing works, so this error is
			// about the region.
			_, err = d.Capture(image.Rect(1200, 700, 1300, 800), false)
			var off *x11.OffScreenError
			if !errors.Is(err, x11.ErrOffScreen) || !errors.As(err, &off) || off.What != "region" {
				t.Fatalf("capture past the edge: err = %v, want an off-screen region error", err)
			}
		})
	}
	for i := range hashes {
		if hashes[i] != hashes[0] {
			t.Fatalf("%s and %s captures of the same region hash differently", captureModes[0].name, captureModes[i].name)
		}
	}
}

// zeroPad copies f with the unused fourth byte cleared, as a decoded PNG
// has it.
func zeroPad(f *frame.Frame) *frame.Frame {
	g := frame.New(f.Width, f.Height)
	for y := range f.Height {
		copy(g.Pix[y*g.Stride:(y+1)*g.Stride], f.Pix[y*f.Stride:])
		for x := range f.Width {
			g.Pix[y*g.Stride+x*4+3] = 0
		}
	}
	return g
}

// The cursor is in a capture when asked for, and only then: Xvfb draws its
// software cursor into the framebuffer, which the framebuffer path hides.
func TestCaptureWithCursor(t *testing.T) {
	for _, c := range captureModes {
		t.Run(c.name, func(t *testing.T) { testCaptureWithCursor(t, c.connect) })
	}
}

func testCaptureWithCursor(t *testing.T, connect func(testing.TB) (*x11.Display, string)) {
	d, display := connect(t)
	if !d.CursorImages() {
		t.Fatal("Xvfb has XFixes, but the display found no cursor images")
	}
	drawPattern(t, display)
	at := x11.Point{X: patternRect.Min.X + 120, Y: patternRect.Min.Y + 40} // inside the blue stripe
	if err := d.Move(at); err != nil {
		t.Fatal(err)
	}
	region := image.Rect(at.X-20, at.Y-20, at.X+20, at.Y+20)
	plain, err := d.Capture(region, false)
	if err != nil {
		t.Fatal(err)
	}
	wantPattern(t, plain, region.Min) // without the cursor: just the pattern
	with, err := d.Capture(region, true)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := 0; i < len(plain.Pix); i += 4 {
		if !bytes.Equal(plain.Pix[i:i+3], with.Pix[i:i+3]) {
			changed++
		}
	}
	if changed < 10 {
		t.Fatalf("the cursor changed %d pixels of a 40x40 region around it, want a cursor's worth", changed)
	}
}

func TestSizeAndCursorPosition(t *testing.T) {
	d, _ := newDisplay(t, false, x11.Options{})
	if w, h := d.Size(); w != screenW || h != screenH {
		t.Fatalf("Size() = %dx%d, want %dx%d", w, h, screenW, screenH)
	}
	for _, p := range []x11.Point{{0, 0}, {640, 400}, {screenW - 1, screenH - 1}} {
		if err := d.Move(p); err != nil {
			t.Fatal(err)
		}
		got, err := d.CursorPosition()
		if err != nil {
			t.Fatal(err)
		}
		if got != p {
			t.Fatalf("after Move(%v) the pointer is at %v", p, got)
		}
	}
	// Moves work (above), so these errors are about the coordinates.
	for _, p := range []x11.Point{{-1, 0}, {screenW, 10}, {10, screenH}} {
		err := d.Move(p)
		var off *x11.OffScreenError
		if !errors.Is(err, x11.ErrOffScreen) || !errors.As(err, &off) || off.X != p.X || off.Y != p.Y {
			t.Fatalf("Move(%v): err = %v, want *OffScreenError for that point", p, err)
		}
	}
	if got, _ := d.CursorPosition(); got != (x11.Point{X: screenW - 1, Y: screenH - 1}) {
		t.Fatalf("a refused move moved the pointer to %v", got)
	}
}

func TestScreenChanges(t *testing.T) {
	d, display := newDisplay(t, false, x11.Options{})
	if !d.Damage() {
		t.Fatal("Xvfb has DAMAGE, but the display does not watch it")
	}
	c := newClient(t, display)
	w := c.window(t, image.Rect(10, 10, 110, 110), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.WaitScreenIdle(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before := d.ScreenVersion()
	c.fill(t, w, image.Rect(0, 0, 50, 50), 0xffffff)
	after, err := d.WaitScreenChange(ctx, before)
	if err != nil {
		t.Fatalf("painting a window was not seen as a screen change: %v", err)
	}
	if after <= before {
		t.Fatalf("version %d after the change, %d before", after, before)
	}
	// Nothing draws now: a wait for the next change times out.
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if err := d.WaitScreenIdle(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if v, err := d.WaitScreenChange(short, d.ScreenVersion()); err == nil {
		t.Fatalf("a screen change (version %d) with nothing drawing", v)
	}
}

// An X server in another IPC namespace cannot attach our segment: Connect
// falls back to GetImage on its own, and captures still work.
func TestCaptureFallsBackWithoutSHM(t *testing.T) {
	require.Root(t)
	require.Feature(t, "ns.ipc")
	require.Binary(t, "unshare")
	display := xvfbtest.Start(t, screenW, screenH, "unshare", "--ipc")
	d, err := x11.Connect(display, x11.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.SHM() {
		t.Fatal("SHM attached across IPC namespaces; the test cannot show the fallback")
	}
	drawPattern(t, display)
	f, err := d.Capture(patternRect, false)
	if err != nil {
		t.Fatal(err)
	}
	wantPattern(t, f, patternRect.Min)
}
