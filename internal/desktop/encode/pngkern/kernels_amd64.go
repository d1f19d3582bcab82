//go:build amd64 && !purego

package pngkern

import "golang.org/x/sys/cpu"

// useAVX2 selects the kernels of png_amd64.s; the tests switch it off to
// check the portable Go code against the same inputs.
var useAVX2 = cpu.X86.HasAVX2

// filterUpAVX2 writes groups×8 pixels of an Up-filtered RGB row to out:
// each BGRX pixel of cur minus the one above it in prev, bytewise, padding
// dropped. It stores 4 bytes past the last group's 24.
//
//go:noescape
func filterUpAVX2(out, cur, prev *byte, groups int)

// filterNoneAVX2 is filterUpAVX2 without the subtraction.
//
//go:noescape
func filterNoneAVX2(out, cur *byte, groups int)

// adlerBlocksAVX2 adds blocks×32 bytes at p to Adler-32's sums s1, s2
// without reducing them modulo 65521 (blocks·32 must be at most NMAX).
//
//go:noescape
func adlerBlocksAVX2(s1, s2 uint32, p *byte, blocks int) (r1, r2 uint32)
