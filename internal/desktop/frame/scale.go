package frame

import "math"

// Downscale returns f shrunk so that its longer edge is at most maxLongEdge
// pixels, keeping the aspect ratio; f itself when it already fits (or
// maxLongEdge <= 0).
//
// The filter is area averaging (a box filter with fractional coverage at
// the edges), done in two separable passes with 14-bit fixed-point weights:
// every source pixel contributes exactly its covered area, so thin text
// strokes fade instead of vanishing as with bilinear sampling, and it is
// several times faster than Catmull-Rom (numbers in
// docs/decisions/0010-desktop-guest.md).
func (f *Frame) Downscale(maxLongEdge int) *Frame {
	long := max(f.Width, f.Height)
	if maxLongEdge <= 0 || long <= maxLongEdge {
		return f
	}
	w := max(1, int(math.Round(float64(f.Width)*float64(maxLongEdge)/float64(long))))
	h := max(1, int(math.Round(float64(f.Height)*float64(maxLongEdge)/float64(long))))
	xs, ys := boxWeights(f.Width, w), boxWeights(f.Height, h)

	// Horizontal pass: every source row to w pixels.
	tmp := New(w, f.Height)
	for y := range f.Height {
		src, dst := f.row(y), tmp.row(y)
		for x, t := range xs {
			var b, g, r int32
			for k, wt := range t.w {
				p := (t.start + k) * 4
				b += int32(src[p]) * wt
				g += int32(src[p+1]) * wt
				r += int32(src[p+2]) * wt
			}
			dst[x*4], dst[x*4+1], dst[x*4+2] = round14(b), round14(g), round14(r)
		}
	}
	// Vertical pass: the columns of tmp to h pixels, accumulated row by row
	// so memory is read sequentially.
	out := New(w, h)
	acc := make([]int32, w*3)
	for y, t := range ys {
		clear(acc)
		for k, wt := range t.w {
			src := tmp.row(t.start + k)
			for x := range w {
				acc[x*3] += int32(src[x*4]) * wt
				acc[x*3+1] += int32(src[x*4+1]) * wt
				acc[x*3+2] += int32(src[x*4+2]) * wt
			}
		}
		dst := out.row(y)
		for x := range w {
			dst[x*4], dst[x*4+1], dst[x*4+2] = round14(acc[x*3]), round14(acc[x*3+1]), round14(acc[x*3+2])
		}
	}
	return out
}

const one14 = 1 << 14

func round14(v int32) byte { return byte((v + one14/2) >> 14) }

// taps are the source pixels that make up one destination pixel.
type taps struct {
	start int
	w     []int32 // weights of start, start+1, …; they sum to one14
}

// boxWeights computes, for each of dst pixels along an axis of src pixels,
// the covered area of every overlapping source pixel.
func boxWeights(src, dst int) []taps {
	scale := float64(src) / float64(dst)
	out := make([]taps, dst)
	for i := range out {
		lo, hi := float64(i)*scale, float64(i+1)*scale
		first, last := int(lo), min(src, int(math.Ceil(hi)))
		t := taps{start: first, w: make([]int32, last-first)}
		var sum int32
		big := 0
		for j := first; j < last; j++ {
			cover := math.Min(hi, float64(j+1)) - math.Max(lo, float64(j))
			wt := int32(math.Round(cover / scale * one14))
			t.w[j-first] = wt
			sum += wt
			if wt > t.w[big] {
				big = j - first
			}
		}
		t.w[big] += one14 - sum // rounding leftovers go to the largest tap
		out[i] = t
	}
	return out
}
