//go:build turbojpeg

package encode

// #cgo LDFLAGS: -lturbojpeg
// #include <stdlib.h>
// #include <turbojpeg.h>
import "C"

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// JPEGBackend names the JPEG encoder this build carries.
const JPEGBackend = "libjpeg-turbo"

// JPEG writes f as a 4:2:0 JPEG of the given quality (1–100) through
// libjpeg-turbo, which reads the BGRX pixels as they are.
func JPEG(w io.Writer, f *frame.Frame, quality int) error {
	if f.Width == 0 || f.Height == 0 {
		return errors.New("jpeg: empty frame")
	}
	// A handle per call: tjInitCompress costs microseconds, and a shared
	// one would need a lock (handles are not safe for concurrent use).
	h := C.tjInitCompress()
	if h == nil {
		return fmt.Errorf("jpeg: tjInitCompress: %s", C.GoString(C.tjGetErrorStr()))
	}
	defer C.tjDestroy(h)
	var out *C.uchar
	var size C.ulong
	defer func() {
		if out != nil {
			C.tjFree(out)
		}
	}()
	if C.tjCompress2(h, (*C.uchar)(unsafe.Pointer(&f.Pix[0])), C.int(f.Width), C.int(f.Stride), C.int(f.Height),
		C.TJPF_BGRX, &out, &size, C.TJSAMP_420, C.int(clampQuality(quality)), C.TJFLAG_FASTDCT) != 0 {
		return fmt.Errorf("jpeg: tjCompress2: %s", C.GoString(C.tjGetErrorStr2(h)))
	}
	_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(out)), int(size)))
	return err
}
