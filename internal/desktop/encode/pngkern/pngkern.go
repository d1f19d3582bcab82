// Package pngkern holds the PNG writer's hot loops in AVX2 assembly: row
// filters and Adler-32. They live apart from package encode because a
// package that uses cgo (encode's libjpeg-turbo binding) cannot have Go
// assembly.
package pngkern

// Slack is how many bytes past a filtered row's end the kernels may store.
const Slack = 4

// FilterNone writes the leading multiple of eight pixels of the BGRX row
// to out as RGB (the padding byte dropped) and returns how many pixels it
// wrote: 0 without AVX2, where the caller does them all. out must hold
// 3 bytes a pixel and Slack more.
func FilterNone(out, row []byte) int {
	groups := len(row) / 32
	if !useAVX2 || groups == 0 {
		return 0
	}
	_ = out[groups*24+Slack-1]
	filterNoneAVX2(&out[0], &row[0], groups)
	return groups * 8
}

// FilterUp is FilterNone with PNG's Up filter: each pixel's bytes minus
// those of the pixel above it, in prev (as long as row).
func FilterUp(out, row, prev []byte) int {
	groups := len(row) / 32
	if !useAVX2 || groups == 0 {
		return 0
	}
	_ = out[groups*24+Slack-1]
	_ = prev[groups*32-1]
	filterUpAVX2(&out[0], &row[0], &prev[0], groups)
	return groups * 8
}
