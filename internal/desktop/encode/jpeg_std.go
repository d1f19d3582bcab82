//go:build !turbojpeg

package encode

import (
	"image/jpeg"
	"io"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// JPEGBackend names the JPEG encoder this build carries.
const JPEGBackend = "image/jpeg"

// JPEG writes f as a baseline JPEG of the given quality (1–100). This is the
// pure-Go fallback for builds without the turbojpeg tag: about five times
// slower than libjpeg-turbo (ADR 0010), but no cgo.
func JPEG(w io.Writer, f *frame.Frame, quality int) error {
	// image/jpeg has a fast path for *image.RGBA; the swizzle costs far
	// less than the encoder's generic At() path would.
	return jpeg.Encode(w, f.RGBA(), &jpeg.Options{Quality: clampQuality(quality)})
}
