package pngkern

import (
	"bytes"
	"hash/adler32"
	"math/rand/v2"
	"testing"
)

// withAVX2 runs fn with the AVX2 kernels and, separately, with the Go
// code alone (where the build has no kernels, once).
func withAVX2(t *testing.T, fn func(t *testing.T)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	if saved {
		t.Run("avx2", fn)
	}
	useAVX2 = false
	t.Run("go", fn)
}

// Adler32 agrees with hash/adler32 for any length and any starting
// sums, on random bytes and on all-0xff runs long enough to overflow
// unreduced sums (the kernels' worst case).
func TestAdler32MatchesStdlib(t *testing.T) {
	withAVX2(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		data := make([]byte, 70000)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		ones := bytes.Repeat([]byte{0xff}, 70000)
		for _, d := range [][]byte{data, ones} {
			for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 5535, 5536, 5552, 5553, 11104, 40000, 70000} {
				for _, split := range []int{0, 1, 17, n / 2} {
					split = min(split, n)
					got := Adler32(Adler32(1, d[:split]), d[split:n])
					if want := adler32.Checksum(d[:n]); got != want {
						t.Fatalf("%d bytes split at %d: %#x, want %#x", n, split, got, want)
					}
				}
			}
		}
	})
}
