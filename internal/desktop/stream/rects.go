// Package stream holds the parts of a screencast that know nothing of X
// or the wire: turning damage into a few tiles worth encoding, and
// finding changed tiles by comparing frames (when nothing reports
// damage).
package stream

import (
	"bytes"
	"image"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// Grid is the alignment of tiles: a multiple of JPEG's 16×16 macroblock,
// so a tile's edges are block edges and rectangles that meet merge.
const Grid = 16

// MaxTiles bounds the tiles of one frame: each is encoded on its own and
// costs a header and an encoder start.
const MaxTiles = 8

// slack is the area two tiles may waste by becoming one: less than the
// few hundred bytes a tile of its own costs.
const slack = 64 * 64

// Merge turns damaged rectangles into at most MaxTiles tiles within
// bounds: each aligned to Grid (clipped at the edges), none overlapping
// another, together covering every damaged pixel. Tiles that overlap or
// waste little as one are joined; past MaxTiles, the pair whose union
// wastes least is joined, until few enough remain.
func Merge(rects []image.Rectangle, bounds image.Rectangle) []image.Rectangle {
	var tiles []image.Rectangle
	for _, r := range rects {
		r = align(r).Intersect(bounds)
		if !r.Empty() {
			tiles = append(tiles, r)
		}
	}
	for joined := true; joined; {
		joined = false
		for i := 0; i < len(tiles); i++ {
			for j := i + 1; j < len(tiles); j++ {
				a, b := tiles[i], tiles[j]
				u := a.Union(b)
				if a.Overlaps(b) || area(u) <= area(a)+area(b)+slack {
					tiles[i] = u
					tiles = append(tiles[:j], tiles[j+1:]...)
					joined = true
					j = i // the grown tile may now meet earlier ones
				}
			}
		}
	}
	for len(tiles) > MaxTiles {
		bi, bj, best := 0, 1, -1
		for i := range tiles {
			for j := i + 1; j < len(tiles); j++ {
				u := tiles[i].Union(tiles[j])
				if waste := area(u) - area(tiles[i]) - area(tiles[j]); best < 0 || waste < best {
					bi, bj, best = i, j, waste
				}
			}
		}
		tiles[bi] = tiles[bi].Union(tiles[bj])
		tiles = append(tiles[:bj], tiles[bj+1:]...)
		tiles = Merge(tiles, bounds) // a union may overlap a third tile
	}
	return tiles
}

func align(r image.Rectangle) image.Rectangle {
	down := func(v int) int { return v - ((v%Grid)+Grid)%Grid }
	up := func(v int) int { return down(v + Grid - 1) }
	return image.Rect(down(r.Min.X), down(r.Min.Y), up(r.Max.X), up(r.Max.Y))
}

func area(r image.Rectangle) int { return r.Dx() * r.Dy() }

// Changed compares two frames of one size tile by tile (Grid×Grid) and
// returns the tiles that differ, merged: what a screencast sends when it
// has to poll.
func Changed(prev, cur *frame.Frame) []image.Rectangle {
	var dirty []image.Rectangle
	for ty := 0; ty < cur.Height; ty += Grid {
		y1 := min(ty+Grid, cur.Height)
		for tx := 0; tx < cur.Width; tx += Grid {
			x1 := min(tx+Grid, cur.Width)
			for y := ty; y < y1; y++ {
				a := prev.Pix[y*prev.Stride+tx*4 : y*prev.Stride+x1*4]
				b := cur.Pix[y*cur.Stride+tx*4 : y*cur.Stride+x1*4]
				if !bytes.Equal(a, b) {
					dirty = append(dirty, image.Rect(tx, ty, x1, y1))
					break
				}
			}
		}
	}
	return Merge(dirty, cur.Bounds())
}
