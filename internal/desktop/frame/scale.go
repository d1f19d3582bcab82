package frame

import (
	"encoding/binary"
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
//
// Weights are 8-bit fixed point summing to 256, so a weighted sum of one
// channel fits 16 bits and all four channels of a pixel go through one
// 64-bit multiply (see spread); the error is under one level per pass.
func (f *Frame) Downscale(maxLongEdge int) *Frame {
	long := max(f.Width, f.Height)
	if maxLongEdge <= 0 || long <= maxLongEdge {
		return f
	}
	w := max(1, int(math.Round(float64(f.Width)*float64(maxLongEdge)/float64(long))))
	h := max(1, int(math.Round(float64(f.Height)*float64(maxLongEdge)/float64(long))))
	xs, ys := boxWeights(f.Width, w), boxWeights(f.Height, h)
	out := New(w, h)
	// Output rows are independent: bands of them scale on all CPUs.
	bands := max(1, min(runtime.GOMAXPROCS(0), 8, h/64))
	var wg sync.WaitGroup
	for i := range bands {
		wg.Go(func() { f.downscaleRows(out, xs, ys, h*i/bands, h*(i+1)/bands) })
	}
	wg.Wait()
	return out
}

// downscaleRows computes rows y0 to y1 of out, f scaled by the weights xs
// and ys.
func (f *Frame) downscaleRows(out *Frame, xs, ys weights, y0, y1 int) {
	w := out.Width
	// Horizontal pass, on demand: source row sy scaled to w pixels, kept
	// spread for the vertical pass. Output rows need windows of ys.n
	// consecutive source rows, so a ring of ys.n rows computes each once.
	spreadRow := make([]uint64, f.Width)
	ring := make([][]uint64, ys.n)
	ringRow := make([]int, ys.n)
	for i := range ring {
		ring[i], ringRow[i] = make([]uint64, w), -1
	}
	hrow := func(sy int) []uint64 {
		slot := sy % ys.n
		dst := ring[slot]
		if ringRow[slot] == sy {
			return dst
		}
		src := f.row(sy)
		for x := range spreadRow {
			spreadRow[x] = spread(src[x*4:])
		}
		for x := range dst {
			px := spreadRow[xs.start[x] : xs.start[x]+xs.n]
			var acc uint64
			for k, wt := range xs.w[x*xs.n : (x+1)*xs.n] {
				acc += px[k] * wt
			}
			dst[x] = round8(acc)
		}
		ringRow[slot] = sy
		return dst
	}

	acc := make([]uint64, w)
	for y := y0; y < y1; y++ {
		clear(acc)
		for k, wt := range ys.w[y*ys.n : (y+1)*ys.n] {
			if wt == 0 {
				continue
			}
			src := hrow(ys.start[y] + k)
			src = src[:len(acc)]
			for x, v := range src {
				acc[x] += v * wt
			}
		}
		dst := out.row(y)
		for x, v := range acc {
			binary.LittleEndian.PutUint32(dst[x*4:], pack(v))
		}
	}
}

// spread puts the four bytes of a pixel into the four 16-bit lanes of a
// uint64, so one multiply weighs them all.
func spread(p []byte) uint64 {
	v := uint64(binary.LittleEndian.Uint32(p))
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

// round8 divides the four lanes of a weighted sum by 256, rounding.
func round8(v uint64) uint64 { return (v + 0x0080008000800080) >> 8 & 0x00ff00ff00ff00ff }

// pack rounds the four lanes of a weighted sum back to bytes, with the
// unused fourth byte zero.
func pack(v uint64) uint32 {
	v = round8(v)
	v = (v | v>>8) & 0x0000ffff0000ffff
	return uint32(v|v>>16) & 0x00ffffff
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
