//go:build amd64 && !purego

package frame

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2 kernels of scale_amd64.s; the tests switch it
// off to check the portable Go passes against the same reference.
var useAVX2 = cpu.X86.HasAVX2

// vblendAVX2 blends taps rows of src (stride bytes apart) into dst, chunks
// groups of four BGRX pixels: per channel (Σ row_k·w[k] + 128) >> 8, the
// padding byte zeroed. The weights sum to 256, so every sum fits a 16-bit
// lane.
//
//go:noescape
func vblendAVX2(dst, src *byte, stride int, w *uint16, taps, chunks int)

// hblend2AVX2 writes groups×4 output pixels to dst, pixel i from the two
// pixels col[starts[i]-c0] and the next one, with the weights w[8i:8i+2]
// (each pair repeated four times, one per channel, for PMADDWD), also laid
// out as w0[4i:4i+4] and w1[4i:4i+4] (each weight four times, for PMULLW).
//
//go:noescape
func hblend2AVX2(dst, col *byte, c0 int, starts *int, w, w0, w1 *uint16, groups int)
