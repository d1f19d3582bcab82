//go:build !turbojpeg

package encode

import (
	"bytes"
	"image/jpeg"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// JPEGBackend names the JPEG encoder this build carries.
const JPEGBackend = "image/jpeg"

// encodeJPEG encodes f as one baseline 4:2:0 JPEG with the standard
// Huffman tables. This is the pure-Go fallback for builds without the
// turbojpeg tag: about eight times slower than libjpeg-turbo (ADR 0010),
// but no cgo.
func encodeJPEG(f *frame.Frame, quality int) ([]byte, error) {
	// image/jpeg has a fast path for *image.RGBA; the swizzle costs far
	// less than the encoder's generic At() path would.
	var buf bytes.Buffer
	err := jpeg.Encode(&buf, f.RGBA(), &jpeg.Options{Quality: quality})
	return buf.Bytes(), err
}
