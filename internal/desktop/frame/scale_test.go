package frame

import (
	"bytes"
	"fmt"
	"image"
	"math/rand/v2"
	"testing"
)

// referenceScale is the scaler's arithmetic written out plainly, one
// channel at a time: down the columns, per channel (Σ pixel·weight + 128)
// >> 8 with the scaler's 8-bit weights, then along the rows the same way;
// the padding byte of the result is zero whatever the source's was.
func referenceScale(s *Scaler, src *Frame) *Frame {
	col := make([][3]int, s.SrcW)
	out := New(s.W, s.H)
	for y := range s.H {
		for x := range s.SrcW {
			for c := range 3 {
				sum := 0
				for k := range s.ys.n {
					sum += int(src.Pix[(s.ys.start[y]+k)*src.Stride+x*4+c]) * int(s.ys.w[y*s.ys.n+k])
				}
				col[x][c] = (sum + 128) >> 8
			}
		}
		for x := range s.W {
			for c := range 3 {
				sum := 0
				for k := range s.xs.n {
					sum += col[s.xs.start[x]+k][c] * int(s.xs.w[x*s.xs.n+k])
				}
				out.Pix[y*out.Stride+x*4+c] = byte((sum + 128) >> 8)
			}
		}
	}
	return out
}

// withKernels runs fn with the AVX2 kernels and, separately, with the Go
// passes alone (where the build has no kernels, once).
func withKernels(t *testing.T, fn func(t *testing.T)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	if saved {
		t.Run("avx2", fn)
	}
	useAVX2 = false
	t.Run("go", fn)
}

// scaleCases cover the common ratios (5:4 is 1280×800 → 1024), two-tap
// and many-tap axes, odd widths that leave 1–3 pixels after the groups of
// four, and strips one pixel wide.
var scaleCases = []struct{ w, h, max int }{
	{1280, 800, 1024}, {1920, 1080, 1280}, {1920, 1080, 1024}, {1366, 768, 1024},
	{333, 211, 301}, {101, 37, 53}, {17, 9, 13}, {640, 480, 100}, {5, 3, 4},
	{1, 300, 7}, {300, 1, 7}, {7, 2, 6}, {1023, 1023, 1022},
}

// Every pixel the scaler computes equals the plain reference, on random
// frames whose padding bytes are random too, in both implementations.
func TestScaleMatchesReference(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		for i, c := range scaleCases {
			f := randomFrame(c.w, c.h, uint64(100+i))
			s := NewScaler(c.w, c.h, c.max)
			want := referenceScale(s, f)
			got := New(s.W, s.H)
			s.Scale(got, f, got.Bounds())
			sameFrame(t, fmt.Sprintf("%dx%d → %dx%d", c.w, c.h, s.W, s.H), got, want)
			par := New(s.W, s.H)
			s.ScaleParallel(par, f, par.Bounds())
			sameFrame(t, fmt.Sprintf("%dx%d → %dx%d in bands", c.w, c.h, s.W, s.H), par, want)
		}
	})
}

// A source with a stride wider than its rows (a region of Xvfb's
// framebuffer), and random sub-rectangles of the output (a screencast's
// damage), give the reference's pixels and leave the rest of dst alone.
func TestScaleRegionsAndStrides(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		for i, c := range scaleCases {
			if c.w*c.h > 1280*800 {
				continue // the 1920x1080 cases: TestScaleMatchesReference has them
			}
			big := randomFrame(c.w+13, c.h+5, uint64(200+i))
			src, err := big.Sub(image.Rect(9, 3, 9+c.w, 3+c.h))
			if err != nil {
				t.Fatal(err)
			}
			s := NewScaler(c.w, c.h, c.max)
			want := referenceScale(s, src)
			for range 5 {
				x0, y0 := r.IntN(s.W), r.IntN(s.H)
				rect := image.Rect(x0, y0, x0+1+r.IntN(s.W-x0), y0+1+r.IntN(s.H-y0))
				got := New(s.W, s.H)
				for j := range got.Pix {
					got.Pix[j] = 0xa5
				}
				s.Scale(got, src, rect)
				for y := range s.H {
					for x := range s.W {
						p := got.Pix[y*got.Stride+x*4 : y*got.Stride+x*4+4]
						in := image.Pt(x, y).In(rect)
						if in && !bytes.Equal(p, want.Pix[y*want.Stride+x*4:y*want.Stride+x*4+4]) ||
							!in && !bytes.Equal(p, []byte{0xa5, 0xa5, 0xa5, 0xa5}) {
							t.Fatalf("%dx%d → %dx%d, rect %v: pixel (%d, %d) = %v, want %v (inside: %v)",
								c.w, c.h, s.W, s.H, rect, x, y, p, want.Pix[y*want.Stride+x*4:y*want.Stride+x*4+4], in)
						}
					}
				}
			}
		}
	})
}

// Extreme pixels: all-white and all-black frames stay exactly so (no
// overflow of a 16-bit lane at 255·256, no rounding drift).
func TestScaleExtremes(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		for _, v := range []byte{0, 255} {
			f := New(1280, 800)
			for i := range f.Pix {
				f.Pix[i] = v
			}
			g := f.Downscale(1024)
			for i := 0; i < len(g.Pix); i += 4 {
				if g.Pix[i] != v || g.Pix[i+1] != v || g.Pix[i+2] != v || g.Pix[i+3] != 0 {
					t.Fatalf("uniform %d: pixel %d = %v", v, i/4, g.Pix[i:i+4])
				}
			}
		}
	})
}

func sameFrame(t *testing.T, what string, got, want *Frame) {
	t.Helper()
	for y := range want.Height {
		g, w := got.row(y), want.row(y)
		if !bytes.Equal(g, w) {
			for i := range w {
				if g[i] != w[i] {
					t.Fatalf("%s: pixel (%d, %d) channel %d = %d, want %d", what, i/4, y, i%4, g[i], w[i])
				}
			}
		}
	}
}

// The two passes alone, single-threaded, per implementation.
func BenchmarkScale1280x800To1024(b *testing.B) {
	f := randomFrame(1280, 800, 4)
	s := NewScaler(1280, 800, 1024)
	dst := New(s.W, s.H)
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	for _, avx := range []bool{false, true} {
		if avx && !saved {
			continue
		}
		b.Run(map[bool]string{false: "go", true: "avx2"}[avx], func(b *testing.B) {
			useAVX2 = avx
			cpu0 := cpuTime()
			for b.Loop() {
				s.Scale(dst, f, dst.Bounds())
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// FuzzScaleMatchesReference: any source size and long edge, any pixels;
// the scaler (AVX2 where the CPU has it) gives the reference's bytes. Its
// seeds are the ratios whose kernel paths differ: 5:4 (consecutive
// sources, eight pixels a step), 3:2 and 4:3 (gathers between them), an
// odd number of four-pixel groups, many-tap reductions.
func FuzzScaleMatchesReference(f *testing.F) {
	for _, c := range []struct{ w, h, max uint16 }{{160, 100, 128}, {90, 60, 60}, {84, 63, 63}, {52, 20, 42}, {300, 40, 37}} {
		f.Add(c.w, c.h, c.max, uint64(1))
	}
	f.Fuzz(func(t *testing.T, w, h, max uint16, seed uint64) {
		if w == 0 || h == 0 || w > 700 || h > 400 {
			t.Skip()
		}
		s := NewScaler(int(w), int(h), int(max))
		if s == nil {
			t.Skip()
		}
		src := randomFrame(int(w), int(h), seed)
		got := New(s.W, s.H)
		s.Scale(got, src, got.Bounds())
		sameFrame(t, fmt.Sprintf("%dx%d → %dx%d", w, h, s.W, s.H), got, referenceScale(s, src))
	})
}
