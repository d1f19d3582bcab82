package encode

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// withKernels runs fn with package pngkern's filters and, separately,
// with the Go code alone.
func withKernels(t *testing.T, fn func(t *testing.T)) {
	defer func() { useKernels = true }()
	t.Run("kernels", fn)
	useKernels = false
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
