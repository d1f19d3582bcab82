// Package encode turns frames into the pictures an agent receives: PNG
// (own writer over klauspost/compress flate, lossless, its row filters and
// Adler-32 in AVX2 from package pngkern) and JPEG
// (libjpeg-turbo with the turbojpeg build tag, image/jpeg otherwise), plus
// Screenshot, the pipeline every screenshot takes: downscale to a maximum
// long edge, hash the raw pixels, encode.
package encode

import (
	"fmt"

	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/procs"
)

// Format is an encoding of a screenshot.
type Format string

const (
	FormatPNG  Format = "png"
	FormatJPEG Format = "jpeg"
)

// DefaultJPEGQuality is used when Options.Quality is zero.
const DefaultJPEGQuality = 80

// Options say how a screenshot is encoded.
type Options struct {
	Format      Format // FormatPNG when empty
	Quality     int    // JPEG quality 1–100; 0 means DefaultJPEGQuality
	MaxLongEdge int    // downscale so the longer edge is at most this; 0 keeps the size
}

// Image is an encoded screenshot.
type Image struct {
	Format        Format
	Width, Height int        // after scaling
	FrameHash     frame.Hash // over the raw pixels after crop and scale, before encoding
	Data          []byte
}

// Screenshot downscales f as o asks, hashes the result and encodes it.
// Cropping is the capture's business (the X server crops for free).
func Screenshot(f *frame.Frame, o Options) (*Image, error) {
	if o.Format != "" && o.Format != FormatPNG && o.Format != FormatJPEG {
		return nil, fmt.Errorf("unknown image format %q (want png or jpeg)", o.Format)
	}
	if o.Quality < 0 || o.Quality > 100 {
		return nil, fmt.Errorf("JPEG quality %d out of range (want 1–100, or 0 for %d)", o.Quality, DefaultJPEGQuality)
	}
	if o.MaxLongEdge < 0 {
		return nil, fmt.Errorf("max long edge %d is negative (want 0 to keep the size)", o.MaxLongEdge)
	}
	f = f.Downscale(o.MaxLongEdge)
	img := &Image{Format: o.Format, Width: f.Width, Height: f.Height, FrameHash: f.Hash()}
	if img.Format == "" {
		img.Format = FormatPNG
	}
	data, err := Encode(f, img.Format, o.Quality)
	if err != nil {
		return nil, err
	}
	img.Data = data
	return img, nil
}

// Encode encodes f as format (FormatPNG when empty); quality is JPEG's
// (0 means DefaultJPEGQuality). The ACI calls it after its own scale and
// hash, to skip encoding a frame the client already has.
func Encode(f *frame.Frame, format Format, quality int) ([]byte, error) {
	// The encoders' own buffers are returned as they are: no copy into a
	// bytes.Buffer of a picture of a few hundred kilobytes.
	var data []byte
	var err error
	switch format {
	case FormatJPEG:
		if quality == 0 {
			quality = DefaultJPEGQuality
		}
		data, err = jpegBytes(f, quality)
	case FormatPNG, "":
		format = FormatPNG
		data, err = pngBytes(f)
	default:
		return nil, fmt.Errorf("unknown image format %q (want png or jpeg)", format)
	}
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", format, err)
	}
	return data, nil
}

func clampQuality(q int) int { return min(max(q, 1), 100) }

// Bands: deflate and JPEG coding are most of a screenshot's time, so a
// large frame is cut into horizontal bands coded in parallel, one per CPU
// (what pigz does for gzip), each large enough that joining them is worth
// it.
const (
	maxBands    = 8
	minBandRows = 128
)

// bandCount is how many bands f is coded in (1: no parallel coding): one
// per CPU the process may use, also in a guest that runs on one P
// (internal/procs), which borrows them while it codes.
func bandCount(f *frame.Frame) int {
	return max(1, min(procs.Max(), maxBands, f.Height/minBandRows))
}
