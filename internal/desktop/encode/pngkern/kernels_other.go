//go:build !amd64 || purego

package pngkern

// useAVX2 is false off amd64: png.go's Go code does all the work.
var useAVX2 = false

func filterUpAVX2(out, cur, prev *byte, groups int) { panic("pngkern: no AVX2 kernels in this build") }

func filterNoneAVX2(out, cur *byte, groups int) { panic("pngkern: no AVX2 kernels in this build") }

func adlerBlocksAVX2(s1, s2 uint32, p *byte, blocks int) (r1, r2 uint32) {
	panic("pngkern: no AVX2 kernels in this build")
}
