package envd

import (
	"bytes"
	"unsafe"
)

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }

// cString is an inotify name without its NUL padding.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
