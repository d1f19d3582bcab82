// Package frame holds raw screen pixels as captured from X11 (BGRX, four
// bytes per pixel, the fourth undefined) and the operations every
// screenshot goes through before encoding: cropping, downscaling and the
// frame hash.
package frame

import (
	"fmt"
	"image"

	"github.com/zeebo/xxh3"
)

// Frame is a BGRX image: pixel (x, y) starts at Pix[y*Stride+x*4] and is
// blue, green, red, then one unused byte.
type Frame struct {
	Width, Height int
	Stride        int
	Pix           []byte
}

// New allocates a tightly packed frame.
func New(width, height int) *Frame {
	return &Frame{Width: width, Height: height, Stride: width * 4, Pix: make([]byte, width*height*4)}
}

// Bounds is the frame's rectangle, with its origin at (0, 0).
func (f *Frame) Bounds() image.Rectangle { return image.Rect(0, 0, f.Width, f.Height) }

// row returns the Width*4 bytes of row y.
func (f *Frame) row(y int) []byte { return f.Pix[y*f.Stride : y*f.Stride+f.Width*4] }

// Sub returns a view of r (in frame coordinates) sharing f's pixels.
func (f *Frame) Sub(r image.Rectangle) (*Frame, error) {
	if r.Empty() || !r.In(f.Bounds()) {
		return nil, fmt.Errorf("crop %v outside the frame %v", r, f.Bounds())
	}
	off := r.Min.Y*f.Stride + r.Min.X*4
	end := off + (r.Dy()-1)*f.Stride + r.Dx()*4
	return &Frame{Width: r.Dx(), Height: r.Dy(), Stride: f.Stride, Pix: f.Pix[off:end:end]}, nil
}

// Hash is the frame's identity: XXH3-128 over the visible pixels, row by
// row, with the unused fourth byte taken as it is (X servers fill it the
// same way for the same picture). Two frames with equal hashes show the
// same picture, so a client can skip a frame it already has.
type Hash [16]byte

// String is the hash as 32 lowercase hex digits.
func (h Hash) String() string { return fmt.Sprintf("%x", h[:]) }

// Hash computes the frame hash.
func (f *Frame) Hash() Hash {
	var sum xxh3.Uint128
	if f.Stride == f.Width*4 {
		sum = xxh3.Hash128(f.Pix[:f.Width*f.Height*4])
	} else {
		h := xxh3.New()
		for y := range f.Height {
			h.Write(f.row(y))
		}
		sum = h.Sum128()
	}
	return Hash(sum.Bytes())
}

// RGBA converts the frame to an opaque *image.RGBA, for encoders and tests
// that speak image.Image.
func (f *Frame) RGBA() *image.RGBA {
	img := image.NewRGBA(f.Bounds())
	for y := range f.Height {
		src, dst := f.row(y), img.Pix[y*img.Stride:]
		for i := 0; i < len(src); i += 4 {
			dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
		}
	}
	return img
}

// FromImage converts any image to a packed BGRX frame (the unused byte is
// zero), for tests and for pictures that did not come from X11.
func FromImage(img image.Image) *Frame {
	b := img.Bounds()
	f := New(b.Dx(), b.Dy())
	for y := range f.Height {
		row := f.row(y)
		for x := range f.Width {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			row[x*4], row[x*4+1], row[x*4+2] = byte(bl>>8), byte(g>>8), byte(r>>8)
		}
	}
	return f
}
