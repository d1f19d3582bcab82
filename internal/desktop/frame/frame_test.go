package frame

import (
	"bytes"
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"syscall"
	"time"

	"golang.org/x/image/draw"
	"testing"
)

func randomFrame(w, h int, seed uint64) *Frame {
	f := New(w, h)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range f.Pix {
		f.Pix[i] = byte(r.UintN(256))
	}
	return f
}

func TestSubSharesPixels(t *testing.T) {
	f := randomFrame(10, 8, 1)
	s, err := f.Sub(image.Rect(2, 3, 7, 8))
	if err != nil {
		t.Fatal(err)
	}
	if s.Width != 5 || s.Height != 5 {
		t.Fatalf("size %dx%d, want 5x5", s.Width, s.Height)
	}
	for y := range 5 {
		for x := range 5 {
			for c := range 4 {
				if got, want := s.Pix[y*s.Stride+x*4+c], f.Pix[(y+3)*f.Stride+(x+2)*4+c]; got != want {
					t.Fatalf("(%d,%d)[%d] = %d, want %d", x, y, c, got, want)
				}
			}
		}
	}
	if _, err := f.Sub(image.Rect(5, 5, 11, 6)); err == nil {
		t.Fatal("a crop past the right edge was accepted")
	}
}

func TestHashFollowsVisiblePixels(t *testing.T) {
	f := randomFrame(64, 32, 2)
	region := image.Rect(8, 4, 40, 30)
	view, _ := f.Sub(region)
	packed := FromImage(view.RGBA()) // same picture, packed, fourth byte zeroed
	for y := range view.Height {     // make the fourth bytes agree
		for x := range view.Width {
			view.Pix[y*view.Stride+x*4+3] = 0
		}
	}
	if view.Hash() != packed.Hash() {
		t.Fatal("a strided view and a packed copy of the same pixels hash differently")
	}
	before := packed.Hash()
	packed.Pix[len(packed.Pix)-2] ^= 1
	if packed.Hash() == before {
		t.Fatal("changing one pixel did not change the hash")
	}
}

func TestDownscaleSize(t *testing.T) {
	for _, c := range []struct{ w, h, max, ww, wh int }{
		{1280, 800, 1024, 1024, 640},
		{800, 1280, 640, 400, 640},
		{1280, 800, 1280, 1280, 800},
		{1280, 800, 0, 1280, 800},
		{1000, 3, 100, 100, 1},
	} {
		g := New(c.w, c.h).Downscale(c.max)
		if g.Width != c.ww || g.Height != c.wh {
			t.Errorf("%dx%d to %d: got %dx%d, want %dx%d", c.w, c.h, c.max, g.Width, g.Height, c.ww, c.wh)
		}
	}
}

func TestDownscaleAveragesArea(t *testing.T) {
	// A 2x2 checkerboard of black and white halves to uniform mid grey: area
	// averaging keeps the mean, point sampling would give black or white.
	img := image.NewRGBA(image.Rect(0, 0, 64, 32))
	for y := range 32 {
		for x := range 64 {
			if (x+y)%2 == 0 {
				img.Set(x, y, color.White)
			} else {
				img.Set(x, y, color.Black)
			}
		}
	}
	g := FromImage(img).Downscale(32)
	for i := 0; i < len(g.Pix); i += 4 {
		for c := range 3 {
			if v := g.Pix[i+c]; v < 127 || v > 128 {
				t.Fatalf("pixel %d channel %d = %d, want 127 or 128", i/4, c, v)
			}
		}
	}
	// A uniform colour stays exactly that colour at a fractional scale.
	u := New(1280, 800)
	for i := 0; i < len(u.Pix); i += 4 {
		u.Pix[i], u.Pix[i+1], u.Pix[i+2] = 10, 200, 255
	}
	s := u.Downscale(1000)
	for i := 0; i < len(s.Pix); i += 4 {
		if s.Pix[i] != 10 || s.Pix[i+1] != 200 || s.Pix[i+2] != 255 {
			t.Fatalf("pixel %d = %v, want [10 200 255]", i/4, s.Pix[i:i+3])
		}
	}
}

// Downscale in bands of rows gives what one pass over all rows gives.
func TestDownscaleBandsAgree(t *testing.T) {
	for _, c := range []struct{ w, h, max int }{{1280, 800, 1024}, {300, 700, 257}, {1920, 1080, 640}} {
		f := randomFrame(c.w, c.h, 5)
		got := f.Downscale(c.max)
		if got.Height < 128 {
			t.Fatalf("%dx%d → %d: %d rows, too few for bands", c.w, c.h, c.max, got.Height)
		}
		w, h := got.Width, got.Height
		want := New(w, h)
		NewScaler(f.Width, f.Height, c.max).Scale(want, f, want.Bounds())
		if !bytes.Equal(got.Pix, want.Pix) {
			t.Fatalf("%dx%d → %dx%d: banded and one-pass results differ", c.w, c.h, w, h)
		}
	}
}

// Rescaling only what a change covers gives what scaling the whole
// changed frame gives: what a scaled screencast relies on.
func TestScaleCoveringMatchesWhole(t *testing.T) {
	for _, c := range []struct{ w, h, max int }{{1280, 800, 1024}, {301, 203, 97}, {640, 480, 100}} {
		f := randomFrame(c.w, c.h, 7)
		s := NewScaler(c.w, c.h, c.max)
		scaled := f.Downscale(c.max)
		for _, ch := range []image.Rectangle{image.Rect(3, 5, 40, 9), image.Rect(0, 0, 1, 1), image.Rect(c.w-17, c.h-3, c.w, c.h)} {
			for y := ch.Min.Y; y < ch.Max.Y; y++ {
				for x := ch.Min.X; x < ch.Max.X; x++ {
					f.Pix[y*f.Stride+x*4] ^= 0x5a
				}
			}
			s.Scale(scaled, f, s.Covering(ch))
			if want := f.Downscale(c.max); !bytes.Equal(scaled.Pix, want.Pix) {
				t.Fatalf("%dx%d → %d: rescaling %v (covering %v) differs from scaling it all", c.w, c.h, c.max, ch, s.Covering(ch))
			}
		}
	}
}

// The integer passes stay within one level per pass of exact area
// averaging computed in floating point.
func TestScaleNearExact(t *testing.T) {
	for _, c := range []struct{ w, h, max int }{{1280, 800, 1024}, {200, 150, 37}, {99, 70, 50}} {
		f := randomFrame(c.w, c.h, 9)
		g := f.Downscale(c.max)
		sx, sy := float64(c.w)/float64(g.Width), float64(c.h)/float64(g.Height)
		for _, p := range []image.Point{{0, 0}, {g.Width - 1, g.Height - 1}, {g.Width / 2, g.Height / 3}, {1, g.Height - 2}} {
			for ch := range 3 {
				var sum float64
				for y := int(float64(p.Y) * sy); float64(y) < float64(p.Y+1)*sy; y++ {
					cy := math.Min(float64(p.Y+1)*sy, float64(y+1)) - math.Max(float64(p.Y)*sy, float64(y))
					for x := int(float64(p.X) * sx); float64(x) < float64(p.X+1)*sx; x++ {
						cx := math.Min(float64(p.X+1)*sx, float64(x+1)) - math.Max(float64(p.X)*sx, float64(x))
						sum += cx * cy * float64(f.Pix[y*f.Stride+x*4+ch])
					}
				}
				want := sum / (sx * sy)
				if got := float64(g.Pix[p.Y*g.Stride+p.X*4+ch]); math.Abs(got-want) > 2.5 {
					t.Fatalf("%dx%d → %d: pixel %v channel %d = %v, want %.1f", c.w, c.h, c.max, p, ch, got, want)
				}
			}
			if g.Pix[p.Y*g.Stride+p.X*4+3] != 0 {
				t.Fatalf("pixel %v: padding byte not zero", p)
			}
		}
	}
}

func BenchmarkHash1280x800(b *testing.B) {
	f := randomFrame(1280, 800, 3)
	b.SetBytes(int64(len(f.Pix)))
	for b.Loop() {
		f.Hash()
	}
}

func BenchmarkDownscale1280x800To1024(b *testing.B) {
	f := randomFrame(1280, 800, 4)
	dst := New(1024, 640)
	s := NewScaler(1280, 800, 1024)
	cpu0 := cpuTime()
	for b.Loop() {
		s.ScaleParallel(dst, f, dst.Bounds())
	}
	// CPU time as well as wall time: on a shared host the wall time
	// is mostly the wait for a core.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The alternatives the area filter was measured against (ADR 0010); they
// work on *image.RGBA, so the conversion is part of their cost.
func benchmarkXDraw(b *testing.B, s draw.Scaler) {
	f := randomFrame(1280, 800, 4)
	for b.Loop() {
		dst := image.NewRGBA(image.Rect(0, 0, 1024, 640))
		s.Scale(dst, dst.Bounds(), f.RGBA(), f.Bounds(), draw.Src, nil)
	}
}

func BenchmarkXDrawApproxBiLinear(b *testing.B) { benchmarkXDraw(b, draw.ApproxBiLinear) }
func BenchmarkXDrawBiLinear(b *testing.B)       { benchmarkXDraw(b, draw.BiLinear) }
func BenchmarkXDrawCatmullRom(b *testing.B)     { benchmarkXDraw(b, draw.CatmullRom) }
