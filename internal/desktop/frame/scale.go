package frame

import (
	"image"
	"math"
	"sync"
	"unsafe"

	"github.com/tine-run/tine/internal/procs"
)

// Downscale returns f shrunk so that its longer edge is at most maxLongEdge
// pixels, keeping the aspect ratio; f itself when it already fits (or
// maxLongEdge <= 0).
//
// The filter is area averaging (a box filter with fractional coverage at
// the edges), in two separable passes: every source pixel contributes
// exactly its covered area, so thin text strokes fade instead of vanishing
// as with bilinear sampling, and it is several times faster than
// Catmull-Rom (numbers in docs/decisions/0010-desktop-guest.md).
func (f *Frame) Downscale(maxLongEdge int) *Frame {
	s := NewScaler(f.Width, f.Height, maxLongEdge)
	if s == nil {
		return f
	}
	out := New(s.W, s.H)
	s.ScaleParallel(out, f, out.Bounds())
	return out
}

// Scaler scales frames of one size to one smaller size; a screencast
// keeps one and rescales only the part of the picture that changed.
type Scaler struct {
	SrcW, SrcH int
	W, H       int // the scaled size
	xs, ys     weights
	wy         []uint16 // ys.w as 16-bit lanes, for vblendAVX2
	wx         []uint16 // xs.w of two-tap outputs, each pair four times, for hblend2AVX2
	wx0, wx1   []uint16 // the same, each first (second) weight four times
}

var scalers sync.Map // [3]int{srcW, srcH, maxLongEdge} → *Scaler

// NewScaler is the scaler from srcW×srcH to the longer edge maxLongEdge;
// nil when the frame already fits (or maxLongEdge <= 0). Scalers are
// cached: the weights of a size are computed once.
func NewScaler(srcW, srcH, maxLongEdge int) *Scaler {
	long := max(srcW, srcH)
	if maxLongEdge <= 0 || long <= maxLongEdge {
		return nil
	}
	key := [3]int{srcW, srcH, maxLongEdge}
	if s, ok := scalers.Load(key); ok {
		return s.(*Scaler)
	}
	w := max(1, int(math.Round(float64(srcW)*float64(maxLongEdge)/float64(long))))
	h := max(1, int(math.Round(float64(srcH)*float64(maxLongEdge)/float64(long))))
	s := &Scaler{SrcW: srcW, SrcH: srcH, W: w, H: h, xs: boxWeights(srcW, w), ys: boxWeights(srcH, h)}
	s.wy = make([]uint16, len(s.ys.w))
	for i, v := range s.ys.w {
		s.wy[i] = uint16(v)
	}
	if s.xs.n == 2 {
		s.wx, s.wx0, s.wx1 = make([]uint16, w*8), make([]uint16, w*4), make([]uint16, w*4)
		for i := range w {
			w0, w1 := uint16(s.xs.w[2*i]), uint16(s.xs.w[2*i+1])
			for c := range 4 {
				s.wx[i*8+2*c], s.wx[i*8+2*c+1] = w0, w1
				s.wx0[i*4+c], s.wx1[i*4+c] = w0, w1
			}
		}
	}
	scalers.Store(key, s)
	return s
}

// Covering is the rectangle of scaled pixels that source pixels r feed.
func (s *Scaler) Covering(r image.Rectangle) image.Rectangle {
	x0, x1 := s.xs.covering(r.Min.X, r.Max.X)
	y0, y1 := s.ys.covering(r.Min.Y, r.Max.Y)
	return image.Rect(x0, y0, x1, y1)
}

// ScaleParallel is Scale with bands of rows on all CPUs.
func (s *Scaler) ScaleParallel(dst, src *Frame, r image.Rectangle) {
	bands := max(1, min(procs.Max(), 8, r.Dy()/64))
	if bands == 1 {
		s.Scale(dst, src, r)
		return
	}
	defer procs.Borrow(bands)()
	var wg sync.WaitGroup
	for i := range bands {
		band := image.Rect(r.Min.X, r.Min.Y+r.Dy()*i/bands, r.Max.X, r.Min.Y+r.Dy()*(i+1)/bands)
		wg.Go(func() { s.Scale(dst, src, band) })
	}
	wg.Wait()
}

// Scale computes the pixels r of dst (a W×H frame) from src (SrcW×SrcH):
// first down the columns, blending each output row's source rows over
// just the columns r needs, then along the row. With AVX2 both passes run
// in scale_amd64.s over 16-bit lanes; the Go passes work on several
// channels per integer. Either way 8-bit weights summing to 256 keep every
// weighted channel sum within 16 bits, and both give the same bytes.
func (s *Scaler) Scale(dst, src *Frame, r image.Rectangle) {
	if r.Empty() {
		return
	}
	c0 := s.xs.start[r.Min.X]
	c1 := s.xs.start[r.Max.X-1] + s.xs.n
	col := make([]uint32, c1-c0+2) // one blended row, padded for word reads
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if useAVX2 {
			s.blendRowsAVX2(col, src, y, c0, c1)
		} else {
			s.blendRows(col, src, y, c0, c1)
		}
		out := pixels32(dst.Pix[y*dst.Stride+r.Min.X*4:], r.Dx())
		x := r.Min.X
		if groups := len(out) / 4; useAVX2 && s.xs.n == 2 && groups > 0 {
			hblend2AVX2((*byte)(unsafe.Pointer(&out[0])), (*byte)(unsafe.Pointer(&col[0])), c0, &s.xs.start[x], &s.wx[x*8], &s.wx0[x*4], &s.wx1[x*4], groups)
			x, out = x+groups*4, out[groups*4:]
		}
		s.blendAlong(out, col, x, c0)
	}
}

// blendAlong is the horizontal pass in Go: out is the scaled row from
// pixel x on, col the blended source columns from c0 on.
func (s *Scaler) blendAlong(out, col []uint32, x, c0 int) {
	xn := s.xs.n
	starts := s.xs.start[x : x+len(out)]
	if xn == 2 { // the common case: a ratio under 2
		ws := s.xs.w[x*2 : (x+len(out))*2]
		for i := range out {
			o := starts[i] - c0
			p0, p1 := col[o], col[o+1]
			w0, w1 := uint32(ws[2*i]), uint32(ws[2*i+1])
			rb := (p0&0xff00ff)*w0 + (p1&0xff00ff)*w1
			g := (p0&0xff00)*w0 + (p1&0xff00)*w1
			out[i] = (rb+0x800080)>>8&0xff00ff | (g+0x8000)>>8&0xff00
		}
		return
	}
	for i := range out {
		px := col[starts[i]-c0:]
		var rb, g uint32
		for k, w := range s.xs.w[(x+i)*xn : (x+i)*xn+xn] {
			rb += (px[k] & 0xff00ff) * uint32(w)
			g += (px[k] & 0xff00) * uint32(w)
		}
		out[i] = (rb+0x800080)>>8&0xff00ff | (g+0x8000)>>8&0xff00
	}
}

// blendRowsAVX2 is blendRows with vblendAVX2 for whole groups of four
// pixels and blendGeneric for the rest.
func (s *Scaler) blendRowsAVX2(col []uint32, src *Frame, y, c0, c1 int) {
	yn := s.ys.n
	first := s.ys.start[y]
	px := c1 - c0
	chunks := px / 4
	if chunks > 0 {
		// The kernel reads chunks*16 bytes of each of the yn rows.
		_ = src.Pix[(first+yn-1)*src.Stride+c0*4+chunks*16-1]
		_ = col[chunks*4-1]
		vblendAVX2((*byte)(unsafe.Pointer(&col[0])), &src.Pix[first*src.Stride+c0*4], src.Stride, &s.wy[y*yn], yn, chunks)
	}
	if rest := chunks * 4; rest < px {
		s.blendGeneric(col[rest:], src, first, s.ys.w[y*yn:y*yn+yn], c0+rest, px-rest)
	}
}

// pixels32 views the first n pixels of p as 32-bit words (x86 and arm64
// load them unaligned at full speed).
func pixels32(p []byte, n int) []uint32 {
	_ = p[n*4-1]
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(p))), n)
}

// words64 views the first n*8 bytes of p as 64-bit words.
func words64(p []byte, n int) []uint64 {
	if n == 0 {
		return nil
	}
	_ = p[n*8-1]
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(p))), n)
}

// blendRows writes into col the columns c0 to c1 of scaled row y's source
// rows, weighed: blue and red of two pixels in one uint64, green in
// another; the padding byte is dropped (it is zero in the result).
func (s *Scaler) blendRows(col []uint32, src *Frame, y, c0, c1 int) {
	const lo, hi = 0x00ff00ff00ff00ff, 0x0000ff000000ff00
	const half = 0x0080008000800080
	yn := s.ys.n
	taps := s.ys.w[y*yn : y*yn+yn]
	first := s.ys.start[y]
	px := c1 - c0
	var rows [3][]uint64
	var ws [3]uint64
	k := 0
	for i, w := range taps {
		if w == 0 {
			continue
		}
		if k == len(rows) { // a strong reduction: many rows
			s.blendGeneric(col, src, first, taps, c0, px)
			return
		}
		rows[k], ws[k] = words64(src.Pix[(first+i)*src.Stride+c0*4:], px/2), w
		k++
	}
	out := words64(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(col))), len(col)*4), px/2)
	switch k {
	case 1:
		for i, v := range rows[0][:len(out)] {
			out[i] = v &^ 0xff000000ff000000
		}
	case 2:
		a, b := rows[0][:len(out)], rows[1][:len(out)]
		w0, w1 := ws[0], ws[1]
		for i := range out {
			va, vb := a[i], b[i]
			l := (va&lo)*w0 + (vb&lo)*w1
			h := (va&hi>>8)*w0 + (vb&hi>>8)*w1
			out[i] = (l+half)>>8&lo | (h+half)&(hi)
		}
	default:
		a, b, c := rows[0][:len(out)], rows[1][:len(out)], rows[2][:len(out)]
		w0, w1, w2 := ws[0], ws[1], ws[2]
		for i := range out {
			va, vb, vc := a[i], b[i], c[i]
			l := (va&lo)*w0 + (vb&lo)*w1 + (vc&lo)*w2
			h := (va&hi>>8)*w0 + (vb&hi>>8)*w1 + (vc&hi>>8)*w2
			out[i] = (l+half)>>8&lo | (h+half)&(hi)
		}
	}
	if px%2 == 1 { // an odd last pixel
		var b, g, r uint64
		for t, w := range taps {
			if w == 0 {
				continue
			}
			p := src.Pix[(first+t)*src.Stride+(c1-1)*4:]
			b += uint64(p[0]) * w
			g += uint64(p[1]) * w
			r += uint64(p[2]) * w
		}
		col[px-1] = uint32((b+128)>>8) | uint32((g+128)>>8)<<8 | uint32((r+128)>>8)<<16
	}
}

// blendGeneric is blendRows for any number of rows (strong reductions).
func (s *Scaler) blendGeneric(col []uint32, src *Frame, first int, taps []uint64, c0, px int) {
	for i := range px {
		var b, g, r uint64
		for t, w := range taps {
			if w == 0 {
				continue
			}
			p := src.Pix[(first+t)*src.Stride+(c0+i)*4:]
			b += uint64(p[0]) * w
			g += uint64(p[1]) * w
			r += uint64(p[2]) * w
		}
		col[i] = uint32((b+128)>>8) | uint32((g+128)>>8)<<8 | uint32((r+128)>>8)<<16
	}
}

const one8 = 256

// weights are, for each destination pixel i along an axis, the n source
// pixels start[i], start[i]+1, … and their weights w[i*n:(i+1)*n], which
// sum to one8. n is the same for every pixel (padded with zero weights),
// so the inner loops have a fixed length.
type weights struct {
	n     int
	start []int
	w     []uint64
}

// covering is the range of destination pixels whose taps reach into the
// source range [lo, hi).
func (ws weights) covering(lo, hi int) (int, int) {
	d0, d1 := len(ws.start), 0
	for i, st := range ws.start {
		if st < hi && st+ws.n > lo {
			d0, d1 = min(d0, i), i+1
		}
	}
	if d1 == 0 {
		return 0, 0
	}
	return d0, d1
}

// boxWeights computes, for each of dst pixels along an axis of src pixels,
// the covered area of every overlapping source pixel.
func boxWeights(src, dst int) weights {
	scale := float64(src) / float64(dst)
	span := func(i int) (lo, hi float64, first, last int) {
		lo, hi = float64(i)*scale, float64(i+1)*scale
		return lo, hi, int(lo), min(src, int(math.Ceil(hi)))
	}
	n := 0
	for i := range dst {
		_, _, first, last := span(i)
		n = max(n, last-first)
	}
	ws := weights{n: n, start: make([]int, dst), w: make([]uint64, dst*n)}
	for i := range dst {
		lo, hi, first, last := span(i)
		start := min(first, src-n) // keep start+n within the axis
		taps := ws.w[i*n : (i+1)*n]
		var sum uint64
		big := first - start
		for j := first; j < last; j++ {
			cover := math.Min(hi, float64(j+1)) - math.Max(lo, float64(j))
			wt := uint64(math.Round(cover / scale * one8))
			taps[j-start] = wt
			sum += wt
			if wt > taps[big] {
				big = j - start
			}
		}
		taps[big] += one8 - sum // rounding leftovers go to the largest tap
		ws.start[i] = start
	}
	return ws
}
