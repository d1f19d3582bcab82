package encode

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zlib"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// screenFrame is a real 1280x800 Xvfb screenshot (openbox, xterms with
// text), the kind of picture the encoders are tuned for.
func screenFrame(tb testing.TB) *frame.Frame { return pngFrame(tb, "testdata/screen.png") }

// benchDesktopFrame is the screen `tine bench desktop` photographs: its
// two xterms (internal/bench textApps) full of text, a dark strip below.
func benchDesktopFrame(tb testing.TB) *frame.Frame { return pngFrame(tb, "testdata/bench-desktop.png") }

func pngFrame(tb testing.TB, path string) *frame.Frame {
	tb.Helper()
	file, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer file.Close()
	img, err := png.Decode(file)
	if err != nil {
		tb.Fatal(err)
	}
	return frame.FromImage(img)
}

// desktopFixtures are both desktop screenshots, native and scaled to a
// 1024 long edge, for the benchmarks.
func desktopFixtures(tb testing.TB) []struct {
	name string
	f    *frame.Frame
} {
	screen, bench := screenFrame(tb), benchDesktopFrame(tb)
	return []struct {
		name string
		f    *frame.Frame
	}{{"desktop", screen}, {"desktop1024", screen.Downscale(1024)}, {"bench", bench}, {"bench1024", bench.Downscale(1024)}}
}

func noiseFrame(w, h int) *frame.Frame {
	f := frame.New(w, h)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range f.Pix {
		if i%4 != 3 {
			f.Pix[i] = byte(r.UintN(256))
		}
	}
	return f
}

// gradientFrame is smooth colour, the case where PNG's None filter
// falls over.
func gradientFrame(w, h int) *frame.Frame {
	f := frame.New(w, h)
	for y := range h {
		for x := range w {
			p := f.Pix[y*f.Stride+x*4:]
			p[0], p[1], p[2] = byte(x*255/w), byte(y*255/h), byte((x+y)*255/(w+h))
		}
	}
	return f
}

// samePixels fails unless img shows exactly f's pixels.
func samePixels(t *testing.T, f *frame.Frame, img image.Image) {
	t.Helper()
	if img.Bounds() != f.Bounds() {
		t.Fatalf("decoded bounds %v, want %v", img.Bounds(), f.Bounds())
	}
	for y := range f.Height {
		for x := range f.Width {
			r, g, b, a := img.At(x, y).RGBA()
			p := f.Pix[y*f.Stride+x*4:]
			if byte(b>>8) != p[0] || byte(g>>8) != p[1] || byte(r>>8) != p[2] || a != 0xffff {
				t.Fatalf("pixel (%d,%d) = rgba(%d,%d,%d,%d), want rgb(%d,%d,%d)", x, y, r>>8, g>>8, b>>8, a>>8, p[2], p[1], p[0])
			}
		}
	}
}

func TestPNGRoundTripsExactly(t *testing.T) {
	screen := screenFrame(t)
	strided, _ := noiseFrame(300, 200).Sub(image.Rect(17, 9, 290, 187))
	for name, f := range map[string]*frame.Frame{
		"screen":  screen,
		"scaled":  screen.Downscale(1024), // bands without a filter (trialFilter)
		"noise":   noiseFrame(257, 129),
		"strided": strided,
		"1x1":     noiseFrame(1, 1),
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := PNG(&buf, f); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("image/png cannot read our PNG: %v", err)
			}
			samePixels(t, f, img)
		})
	}
}

// Every filter the writer knows round-trips, odd widths included.
func TestPNGFiltersRoundTrip(t *testing.T) {
	zw, _ := zlib.NewWriterLevel(nil, pngLevel)
	for _, filter := range []byte{filterNone, filterSub, filterUp} {
		for _, f := range []*frame.Frame{noiseFrame(257, 33), noiseFrame(1, 5), noiseFrame(2, 2)} {
			data, err := writePNG(f, filter, zw)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("filter %d, %dx%d: %v", filter, f.Width, f.Height, err)
			}
			samePixels(t, f, img)
		}
	}
}

func TestJPEGDecodesClose(t *testing.T) {
	f := screenFrame(t)
	var buf bytes.Buffer
	if err := JPEG(&buf, f, 90); err != nil {
		t.Fatal(err)
	}
	img, err := jpeg.Decode(&buf)
	if err != nil {
		t.Fatalf("%s output does not decode: %v", JPEGBackend, err)
	}
	if img.Bounds() != f.Bounds() {
		t.Fatalf("bounds %v, want %v", img.Bounds(), f.Bounds())
	}
	var diff, n int
	for y := 0; y < f.Height; y += 3 {
		for x := 0; x < f.Width; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			p := f.Pix[y*f.Stride+x*4:]
			diff += abs(int(b>>8)-int(p[0])) + abs(int(g>>8)-int(p[1])) + abs(int(r>>8)-int(p[2]))
			n += 3
		}
	}
	if mean := float64(diff) / float64(n); mean > 4 {
		t.Fatalf("%s at q90: mean absolute error %.2f per channel, want <= 4", JPEGBackend, mean)
	}
}

func abs(v int) int { return max(v, -v) }

func TestScreenshot(t *testing.T) {
	f := screenFrame(t)
	img, err := Screenshot(f, Options{Format: FormatPNG, MaxLongEdge: 640})
	if err != nil {
		t.Fatal(err)
	}
	if img.Width != 640 || img.Height != 400 {
		t.Fatalf("scaled to %dx%d, want 640x400", img.Width, img.Height)
	}
	scaled := f.Downscale(640)
	if img.FrameHash != scaled.Hash() {
		t.Fatal("frame hash is not the hash of the scaled pixels")
	}
	dec, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatal(err)
	}
	samePixels(t, scaled, dec)

	j, err := Screenshot(f, Options{Format: FormatJPEG})
	if err != nil {
		t.Fatal(err)
	}
	if j.FrameHash != f.Hash() || j.Width != 1280 {
		t.Fatalf("unscaled JPEG: %dx%d hash %s, want 1280x800 hash %s", j.Width, j.Height, j.FrameHash, f.Hash())
	}
	for _, bad := range []Options{{Format: "gif"}, {Format: FormatJPEG, Quality: 101}, {MaxLongEdge: -1}} {
		if _, err := Screenshot(f, bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

func BenchmarkPNG(b *testing.B) {
	f := screenFrame(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		PNG(&buf, f)
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}

func BenchmarkPNGStdlibBestSpeed(b *testing.B) {
	f := screenFrame(b)
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		enc.Encode(&buf, f.RGBA())
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}

func BenchmarkJPEGQ80(b *testing.B) {
	f := screenFrame(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		JPEG(&buf, f, 80)
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}

// BenchmarkPNGChoices measures the filter and zlib level candidates on the
// desktop fixture, native and scaled to a 1024 long edge (ADR 0010, 0022).
func BenchmarkPNGChoices(b *testing.B) {
	native := screenFrame(b)
	for _, f := range []struct {
		name string
		f    *frame.Frame
	}{{"desktop", native}, {"desktop1024", native.Downscale(1024)}, {"gradient", gradientFrame(1280, 800)}, {"gradient1024", gradientFrame(1280, 800).Downscale(1024)}} {
		for _, level := range []int{zlib.HuffmanOnly, zlib.BestSpeed, 2, zlib.DefaultCompression} {
			for _, filter := range []byte{filterNone, filterSub, filterUp} {
				name, f := f.name, f.f
				b.Run(fmt.Sprintf("%s/level%d/filter%d", name, level, filter), func(b *testing.B) {
					zw, _ := zlib.NewWriterLevel(nil, level)
					var data []byte
					cpu0 := cpuTime()
					for b.Loop() {
						data, _ = writePNG(f, filter, zw)
					}
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
					b.ReportMetric(float64(len(data)), "bytes")
				})
			}
		}
	}
}

// The banded writer round-trips for any number of bands, uneven ones
// included: the joined deflate stream and the combined Adler-32 are valid
// (image/png checks both).
func TestParallelPNGBands(t *testing.T) {
	for _, f := range []*frame.Frame{screenFrame(t), screenFrame(t).Downscale(1024), noiseFrame(333, 1031)} {
		for _, bands := range []int{2, 3, 7} {
			data, err := parallelPNG(f, bands)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%dx%d in %d bands: image/png cannot read it: %v", f.Width, f.Height, bands, err)
			}
			samePixels(t, f, img)
		}
	}
}

// trialFilter compresses to choose: Up on the desktops and on smooth
// gradients, native or scaled; None on the desktops' text scaled by 5:4,
// where it is the smaller (the sizes say so, here, for the whole frame).
func TestTrialFilterChoosesTheSmaller(t *testing.T) {
	screen, bench := screenFrame(t), benchDesktopFrame(t)
	zw, _ := zlib.NewWriterLevel(nil, pngLevel)
	for _, c := range []struct {
		name string
		f    *frame.Frame
		want byte
	}{
		{"desktop", screen, filterUp},
		{"desktop scaled to 1024", screen.Downscale(1024), filterNone},
		{"bench desktop", bench, filterUp},
		{"bench desktop scaled to 1024", bench.Downscale(1024), filterNone},
		{"gradient", gradientFrame(1280, 800), filterUp},
		{"gradient scaled to 1024", gradientFrame(1280, 800).Downscale(1024), filterUp},
	} {
		got := trialFilter(c.f, 0, c.f.Height)
		none, _ := writePNG(c.f, filterNone, zw)
		up, _ := writePNG(c.f, filterUp, zw)
		if got != c.want || (got == filterNone) != (len(none) < len(up)) {
			t.Errorf("%s: trial chose filter %d, want %d (whole frame: None %d bytes, Up %d)", c.name, got, c.want, len(none), len(up))
		}
	}
}

// What a 1024-edge screenshot costs against a native one, from the scale
// on: the scaling must cost less than the encoding it saves.
func BenchmarkScaled1024(b *testing.B) {
	for _, fx := range []struct {
		name string
		f    *frame.Frame
	}{{"desktop", screenFrame(b)}, {"bench", benchDesktopFrame(b)}} {
		for _, format := range []Format{FormatPNG, FormatJPEG} {
			for _, edge := range []int{0, 1024} {
				b.Run(fmt.Sprintf("%s/%s/%d", fx.name, format, edge), func(b *testing.B) {
					var img *Image
					cpu0 := cpuTime()
					for b.Loop() {
						var err error
						if img, err = Screenshot(fx.f, Options{Format: format, MaxLongEdge: edge}); err != nil {
							b.Fatal(err)
						}
					}
					// CPU time too: on a shared host wall time is mostly waiting.
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
					b.ReportMetric(float64(len(img.Data)), "bytes")
				})
			}
		}
	}
}

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
