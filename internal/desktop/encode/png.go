package encode

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// pngLevel is klauspost's level 1: its fastest LZ77 matcher. Screens are
// mostly flat areas and repeated glyphs, so this keeps nearly the size of
// higher levels at a fraction of the time (ADR 0010).
const pngLevel = zlib.BestSpeed

// Row filters of the PNG spec that the writer may apply.
const (
	filterNone = 0
	filterSub  = 1
	filterUp   = 2
)

// pngFilter is the one filter applied to every row. Up wins on screen
// content: flat areas and vertical repetition become zero runs, and it costs
// one subtraction per byte; per-row adaptive choice (what image/png does)
// triples the filtering work for a few percent of size (ADR 0010).
var pngFilter byte = filterUp

var zlibPool = sync.Pool{New: func() any {
	w, _ := zlib.NewWriterLevel(nil, pngLevel)
	return w
}}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// PNG writes f as an 8-bit RGB PNG (the unused fourth byte is dropped).
// Decoding it gives back exactly the frame's pixels.
func PNG(w io.Writer, f *frame.Frame) error {
	var idat bytes.Buffer
	idat.Grow(f.Width * f.Height / 2)
	zw := zlibPool.Get().(*zlib.Writer)
	defer zlibPool.Put(zw)
	zw.Reset(&idat)

	rowLen := 1 + f.Width*3
	cur, prev, out := make([]byte, rowLen), make([]byte, rowLen), make([]byte, rowLen)
	for y := range f.Height {
		src := f.Pix[y*f.Stride : y*f.Stride+f.Width*4]
		for i, j := 0, 1; i < len(src); i, j = i+4, j+3 {
			cur[j], cur[j+1], cur[j+2] = src[i+2], src[i+1], src[i]
		}
		out[0] = pngFilter
		switch pngFilter {
		case filterNone:
			copy(out[1:], cur[1:])
		case filterSub:
			copy(out[1:4], cur[1:4])
			for i := 4; i < rowLen; i++ {
				out[i] = cur[i] - cur[i-3]
			}
		case filterUp: // prev starts as zeros, as the spec wants for row 0
			for i := 1; i < rowLen; i++ {
				out[i] = cur[i] - prev[i]
			}
		}
		if _, err := zw.Write(out); err != nil {
			return err
		}
		cur, prev = prev, cur
	}
	if err := zw.Close(); err != nil {
		return err
	}

	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(f.Width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(f.Height))
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB; compression, filter, interlace 0

	buf := make([]byte, 0, len(pngSignature)+3*12+len(ihdr)+idat.Len())
	buf = append(buf, pngSignature...)
	buf = appendChunk(buf, "IHDR", ihdr[:])
	buf = appendChunk(buf, "IDAT", idat.Bytes())
	buf = appendChunk(buf, "IEND", nil)
	_, err := w.Write(buf)
	return err
}

func appendChunk(buf []byte, typ string, data []byte) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(data)))
	start := len(buf)
	buf = append(buf, typ...)
	buf = append(buf, data...)
	return binary.BigEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf[start:]))
}
