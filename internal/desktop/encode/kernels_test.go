package encode

import (
	"bytes"
	"hash/adler32"
	"math/rand/v2"
	"testing"
)

// withKernels runs fn with the AVX2 kernels and, separately, with the Go
// code alone (where the build has no kernels, once).
func withKernels(t *testing.T, fn func(t *testing.T)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	if saved {
		t.Run("avx2", fn)
	}
	useAVX2 = false
	t.Run("go", fn)
}

// referenceFilter is filterRow written plainly, a byte at a time.
func referenceFilter(row, prev []byte, filter byte) []byte {
	out := []byte{filter}
	for x := 0; x < len(row)/4; x++ {
		for _, c := range []int{2, 1, 0} { // BGRX → RGB
			v, ref := row[x*4+c], byte(0)
			switch {
			case filter == filterSub && x > 0:
				ref = row[(x-1)*4+c]
			case filter == filterUp && prev != nil:
				ref = prev[x*4+c]
			}
			out = append(out, v-ref)
		}
	}
	return out
}

// Every filter gives the reference's bytes for widths that leave 0 to 7
// pixels after the kernels' groups of eight, random padding bytes
// included, and leaves the slack alone as far as the row's length goes.
func TestFilterRowMatchesReference(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, width := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1023, 1280} {
			row, prev := make([]byte, width*4), make([]byte, width*4)
			for i := range row {
				row[i], prev[i] = byte(rng.Uint32()), byte(rng.Uint32())
			}
			for _, filter := range []byte{filterNone, filterSub, filterUp} {
				for _, p := range [][]byte{prev, nil} {
					out := newRow(width)
					filterRow(out, row, p, filter)
					got := out[:len(out)-rowSlack]
					want := referenceFilter(row, p, filter)
					if filter == filterUp && p == nil {
						want[0] = filterUp // the byte says Up; the row above is zeros
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("width %d filter %d (prev %v): rows differ", width, filter, p != nil)
					}
				}
			}
		}
	})
}

// adler32Update agrees with hash/adler32 for any length and any starting
// sums, on random bytes and on all-0xff runs long enough to overflow
// unreduced sums (the kernels' worst case).
func TestAdler32MatchesStdlib(t *testing.T) {
	withKernels(t, func(t *testing.T) {
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
					got := adler32Update(adler32Update(1, d[:split]), d[split:n])
					if want := adler32.Checksum(d[:n]); got != want {
						t.Fatalf("%d bytes split at %d: %#x, want %#x", n, split, got, want)
					}
				}
			}
		}
	})
}
