package x11_test

import (
	"image"
	"image/png"
	"os"
	"testing"

	"github.com/jezek/xgb/xproto"

	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// showFixture puts the encoder fixture (a real desktop) on the screen, so
// end-to-end numbers are about realistic content.
func showFixture(b *testing.B, display string) {
	file, err := os.Open("../encode/testdata/screen.png")
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	img, err := png.Decode(file)
	if err != nil {
		b.Fatal(err)
	}
	f := frame.FromImage(img)
	c := newClient(b, display)
	w := c.window(b, image.Rect(0, 0, f.Width, f.Height), 0)
	gc, _ := xproto.NewGcontextId(c.conn)
	xproto.CreateGC(c.conn, gc, xproto.Drawable(w), 0, nil)
	const strip = 32 // rows per PutImage, under the core request size limit
	for y := 0; y < f.Height; y += strip {
		h := min(strip, f.Height-y)
		xproto.PutImage(c.conn, xproto.ImageFormatZPixmap, xproto.Drawable(w), gc, uint16(f.Width), uint16(h), 0, int16(y), 0, 24,
			f.Pix[y*f.Stride:(y+h)*f.Stride])
	}
	if _, err := xproto.GetInputFocus(c.conn).Reply(); err != nil {
		b.Fatal(err)
	}
}

func benchDisplay(b *testing.B, o x11.Options) *x11.Display {
	d, display := newDisplay(b, false, o)
	showFixture(b, display)
	return d
}

func BenchmarkCaptureSHM(b *testing.B) {
	d := benchDisplay(b, x11.Options{})
	for b.Loop() {
		if _, err := d.Capture(image.Rectangle{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCaptureSHMReuse(b *testing.B) {
	d := benchDisplay(b, x11.Options{})
	var f *frame.Frame
	for b.Loop() {
		var err error
		if f, err = d.CaptureInto(f, image.Rectangle{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCaptureFramebuffer(b *testing.B) {
	d, display := newFramebufferDisplay(b)
	showFixture(b, display)
	var f *frame.Frame
	for b.Loop() {
		var err error
		if f, err = d.CaptureInto(f, image.Rectangle{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCaptureGetImage(b *testing.B) {
	d := benchDisplay(b, x11.Options{NoSHM: true})
	for b.Loop() {
		if _, err := d.Capture(image.Rectangle{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCaptureSHMWithCursor(b *testing.B) {
	d := benchDisplay(b, x11.Options{})
	for b.Loop() {
		if _, err := d.Capture(image.Rectangle{}, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkActionMove is an input action's round trip: XTEST motion plus
// the sync that makes it visible to the next capture.
func BenchmarkActionMove(b *testing.B) {
	d, _ := newDisplay(b, false, x11.Options{})
	i := 0
	for b.Loop() {
		i++
		if err := d.Move(x11.Point{X: i % 1000, Y: i % 700}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkActionKey(b *testing.B) {
	d, _ := newDisplay(b, false, x11.Options{})
	for b.Loop() {
		if err := d.Key("shift"); err != nil {
			b.Fatal(err)
		}
	}
}

// Screenshot end to end: capture 1280x800, hash, encode.
func benchScreenshot(b *testing.B, o encode.Options) {
	d := benchDisplay(b, x11.Options{})
	var size int
	var f *frame.Frame
	for b.Loop() {
		var err error
		f, err = d.CaptureInto(f, image.Rectangle{}, true)
		if err != nil {
			b.Fatal(err)
		}
		img, err := encode.Screenshot(f, o)
		if err != nil {
			b.Fatal(err)
		}
		size = len(img.Data)
	}
	b.ReportMetric(float64(size), "bytes")
}

func BenchmarkScreenshotPNG(b *testing.B) {
	benchScreenshot(b, encode.Options{Format: encode.FormatPNG})
}
func BenchmarkScreenshotJPEG80(b *testing.B) {
	benchScreenshot(b, encode.Options{Format: encode.FormatJPEG, Quality: 80})
}
func BenchmarkScreenshotPNG1024(b *testing.B) {
	benchScreenshot(b, encode.Options{Format: encode.FormatPNG, MaxLongEdge: 1024})
}

// A 1024-edge capture scaled straight from the framebuffer, against a
// full-size capture and then the scale.
func BenchmarkCaptureScaledFramebuffer(b *testing.B) {
	d, display := newFramebufferDisplay(b)
	showFixture(b, display)
	s := frame.NewScaler(1280, 800, 1024)
	dst := frame.New(s.W, s.H)
	var buf *frame.Frame
	b.Run("fused", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.CaptureScaled(dst, buf, image.Rectangle{}, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy-then-scale", func(b *testing.B) {
		for b.Loop() {
			f, err := d.CaptureInto(buf, image.Rectangle{}, false)
			if err != nil {
				b.Fatal(err)
			}
			buf = f
			s.ScaleParallel(dst, f, dst.Bounds())
		}
	})
}
