//go:build !amd64 || purego

package frame

// useAVX2 is false off amd64: the portable Go passes do all the work.
var useAVX2 = false

func vblendAVX2(dst, src *byte, stride int, w *uint16, taps, chunks int) {
	panic("frame: no AVX2 kernels in this build")
}

func hblend2AVX2(dst, col *byte, c0 int, starts *int, w, w0, w1 *uint16, groups int) {
	panic("frame: no AVX2 kernels in this build")
}
