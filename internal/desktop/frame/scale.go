package frame

import (
	"encoding/binary"
	"image"
	"math"
	"runtime"
	"sync"
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
	bands := max(1, min(runtime.GOMAXPROCS(0), 8, r.Dy()/64))
	if bands == 1 {
		s.Scale(dst, src, r)
		return
	}
	var wg sync.WaitGroup
	for i := range bands {
		band := image.Rect(r.Min.X, r.Min.Y+r.Dy()*i/bands, r.Max.X, r.Min.Y+r.Dy()*(i+1)/bands)
		wg.Go(func() { s.Scale(dst, src, band) })
	}
	wg.Wait()
}

// Scale computes the pixels r of dst (a W×H frame) from src (SrcW×SrcH):
// first down the columns, blending each output row's source rows over
// just the columns r needs, then along the row. Both passes work on
// several channels per integer: 8-bit weights summing to 256 keep every
// weighted channel sum within 16 bits.
func (s *Scaler) Scale(dst, src *Frame, r image.Rectangle) {
	if r.Empty() {
		return
	}
	c0 := s.xs.start[r.Min.X]
	c1 := s.xs.start[r.Max.X-1] + s.xs.n
	col := make([]byte, (c1-c0)*4+8) // one blended row, padded for word reads
	xn := s.xs.n
	for y := r.Min.Y; y < r.Max.Y; y++ {
		s.blendRows(col, src, y, c0, c1)
		out := dst.Pix[y*dst.Stride:]
		for x := r.Min.X; x < r.Max.X; x++ {
			px := col[(s.xs.start[x]-c0)*4:]
			wt := s.xs.w[x*xn : x*xn+xn]
			var rb, g uint32
			if xn == 2 { // the common case: a ratio under 2
				p0, p1 := binary.LittleEndian.Uint32(px), binary.LittleEndian.Uint32(px[4:])
				w0, w1 := uint32(wt[0]), uint32(wt[1])
				rb = (p0&0xff00ff)*w0 + (p1&0xff00ff)*w1
				g = (p0>>8&0xff)*w0 + (p1>>8&0xff)*w1
			} else {
				for k, w := range wt {
					p := binary.LittleEndian.Uint32(px[k*4:])
					rb += (p & 0xff00ff) * uint32(w)
					g += (p >> 8 & 0xff) * uint32(w)
				}
			}
			v := (rb+0x800080)>>8&0xff00ff | ((g+0x80)>>8&0xff)<<8
			binary.LittleEndian.PutUint32(out[x*4:], v)
		}
	}
}

// blendRows writes into col the columns c0 to c1 of scaled row y's source
// rows, weighed: blue and red of two pixels in one uint64, green in
// another; the padding byte is dropped (it is zero in the result).
func (s *Scaler) blendRows(col []byte, src *Frame, y, c0, c1 int) {
	const lo, hi = 0x00ff00ff00ff00ff, 0x000000ff000000ff
	yn := s.ys.n
	taps := s.ys.w[y*yn : y*yn+yn]
	first := s.ys.start[y]
	n := (c1 - c0) * 4
	var rows [4][]byte
	var ws [4]uint64
	k := 0
	for i, w := range taps {
		if w == 0 {
			continue
		}
		if k == len(rows) { // more than 4 rows: fold the sum so far in
			s.blendGeneric(col, src, first, taps, c0, n)
			return
		}
		off := (first+i)*src.Stride + c0*4
		rows[k], ws[k] = src.Pix[off:off+n], w
		k++
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		var a, b uint64
		for j := range k {
			v := binary.LittleEndian.Uint64(rows[j][i:])
			a += (v & lo) * ws[j]
			b += (v >> 8 & hi) * ws[j]
		}
		binary.LittleEndian.PutUint64(col[i:], (a+0x0080008000800080)>>8&lo|((b+0x0000008000000080)>>8&hi)<<8)
	}
	for ; i < n; i += 4 { // an odd last pixel
		var a, b uint64
		for j := range k {
			v := uint64(binary.LittleEndian.Uint32(rows[j][i:]))
			a += (v & lo) * ws[j]
			b += (v >> 8 & hi) * ws[j]
		}
		binary.LittleEndian.PutUint32(col[i:], uint32((a+0x0080008000800080)>>8&lo|((b+0x0000008000000080)>>8&hi)<<8))
	}
}

// blendGeneric is blendRows for any number of rows (strong reductions).
func (s *Scaler) blendGeneric(col []byte, src *Frame, first int, taps []uint64, c0, n int) {
	for i := 0; i < n; i += 4 {
		var bs, gs, rs uint64
		for t, w := range taps {
			if w == 0 {
				continue
			}
			p := src.Pix[(first+t)*src.Stride+c0*4+i:]
			bs += uint64(p[0]) * w
			gs += uint64(p[1]) * w
			rs += uint64(p[2]) * w
		}
		col[i], col[i+1], col[i+2], col[i+3] = byte((bs+128)>>8), byte((gs+128)>>8), byte((rs+128)>>8), 0
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
