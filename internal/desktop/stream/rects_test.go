package stream

import (
	"image"
	"math/rand/v2"
	"testing"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// Merged tiles cover every damaged pixel, stay in bounds, never overlap
// and are few.
func TestMergeCoversWithoutOverlap(t *testing.T) {
	bounds := image.Rect(0, 0, 1280, 800)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var rects []image.Rectangle
		for range 1 + rng.IntN(60) {
			x, y := rng.IntN(1400)-60, rng.IntN(900)-60
			rects = append(rects, image.Rect(x, y, x+1+rng.IntN(200), y+1+rng.IntN(40)))
		}
		tiles := Merge(rects, bounds)
		if len(tiles) > MaxTiles {
			t.Fatalf("round %d: %d tiles, over %d", round, len(tiles), MaxTiles)
		}
		for i, a := range tiles {
			if !a.In(bounds) || a.Empty() {
				t.Fatalf("round %d: tile %v outside %v", round, a, bounds)
			}
			for _, b := range tiles[i+1:] {
				if a.Overlaps(b) {
					t.Fatalf("round %d: tiles %v and %v overlap", round, a, b)
				}
			}
		}
		for _, r := range rects {
			r = r.Intersect(bounds)
			for y := r.Min.Y; y < r.Max.Y; y += 7 {
				for x := r.Min.X; x < r.Max.X; x += 7 {
					if !covered(tiles, image.Pt(x, y)) {
						t.Fatalf("round %d: damaged %v not covered by %v", round, image.Pt(x, y), tiles)
					}
				}
			}
		}
	}
	// Two far-apart keystrokes stay two small tiles.
	tiles := Merge([]image.Rectangle{image.Rect(10, 10, 16, 23), image.Rect(900, 700, 906, 713)}, bounds)
	if len(tiles) != 2 || tiles[0] != image.Rect(0, 0, 16, 32) {
		t.Fatalf("two keystrokes became %v", tiles)
	}
	if Merge(nil, bounds) != nil || Merge([]image.Rectangle{image.Rect(2000, 0, 2010, 5)}, bounds) != nil {
		t.Fatal("no damage on screen should give no tiles")
	}
}

func covered(tiles []image.Rectangle, p image.Point) bool {
	for _, t := range tiles {
		if p.In(t) {
			return true
		}
	}
	return false
}

func TestChangedFindsEveryDifference(t *testing.T) {
	a := frame.New(203, 97)
	b := frame.New(203, 97)
	if got := Changed(a, b); got != nil {
		t.Fatalf("equal frames: %v", got)
	}
	for _, p := range []image.Point{{0, 0}, {202, 96}, {100, 50}, {17, 80}} {
		b.Pix[p.Y*b.Stride+p.X*4+1] = 9
	}
	tiles := Changed(a, b)
	for _, p := range []image.Point{{0, 0}, {202, 96}, {100, 50}, {17, 80}} {
		if !covered(tiles, p) {
			t.Fatalf("change at %v not in %v", p, tiles)
		}
	}
}
