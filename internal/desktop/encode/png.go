package encode

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zlib"

	"github.com/tine-run/tine/internal/desktop/encode/pngkern"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/procs"
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

// pngFilter is the filter of most rows. Up wins on screen content: flat
// areas and vertical repetition become zero runs, and it costs one
// subtraction per byte; per-row adaptive choice (what image/png does)
// costs far more filtering work for a few percent of size (ADR 0010).
// But text scaled by a fractional ratio compresses better unfiltered, so
// each band of rows tries both first (trialFilter, ADR 0022).
const pngFilter = filterUp

// trialRows is the height of each of the two blocks trialFilter
// compresses both ways; bands under minTrialRows rows (a screencast's
// small damage tiles) skip the trial, which would cost them too large a
// share of their encode.
const (
	trialRows    = 4
	minTrialRows = 128
)

// trialFilter chooses the filter of rows y0 to y1: None when two blocks
// of trialRows rows, a third and two thirds of the way down, each
// compress smaller unfiltered than with Up; pngFilter otherwise. Cheap
// guesses from the residuals (libpng's sum of absolute values, byte
// entropy, runs) picked Up on scaled text, where None is 20 % smaller
// and cheaper to compress; an actual compression tells them apart, and
// keeps Up on smooth gradients, where None falls over (ADR 0022).
func trialFilter(f *frame.Frame, y0, y1 int) byte {
	if y1-y0 < minTrialRows {
		return pngFilter
	}
	fw := flatePool.Get().(*flate.Writer)
	defer flatePool.Put(fw)
	row := newRow(f.Width)
	size := func(from int, filter byte) int {
		var n countingWriter
		fw.Reset(&n)
		prev := f.Pix[(from-1)*f.Stride : (from-1)*f.Stride+f.Width*4]
		for y := from; y < from+trialRows; y++ {
			cur := f.Pix[y*f.Stride : y*f.Stride+f.Width*4]
			filterRow(row, cur, prev, filter)
			fw.Write(row[:len(row)-rowSlack])
			prev = cur
		}
		fw.Close()
		return int(n)
	}
	for _, from := range []int{y0 + (y1-y0)/3, y0 + (y1-y0)*2/3} {
		if size(from, filterNone) >= size(from, filterUp) {
			return pngFilter
		}
	}
	return filterNone
}

// countingWriter counts what is written to it and keeps nothing.
type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// PNG writes f as an 8-bit RGB PNG (the unused fourth byte is dropped).
// Decoding it gives back exactly the frame's pixels. A large frame is
// compressed in bands on all CPUs (parallelPNG).
func PNG(w io.Writer, f *frame.Frame) error {
	data, err := pngBytes(f)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// pngBytes is PNG into a new slice.
func pngBytes(f *frame.Frame) ([]byte, error) {
	bands := bandCount(f)
	defer procs.Borrow(bands)()
	return parallelPNG(f, bands)
}

var flatePool = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, pngLevel)
	return w
}}

// parallelPNG filters and deflates horizontal bands concurrently (one
// band: alone, still with its own Adler-32, not zlib.Writer's hash/adler32)
// and joins them into one zlib stream: every band but the last ends with a
// sync flush (a byte-aligned, non-final block), so their concatenation is
// a valid deflate stream, and the bands' Adler-32 sums combine into the
// stream's (as zlib's adler32_combine does).
func parallelPNG(f *frame.Frame, bands int) ([]byte, error) {
	type band struct {
		data  *bytes.Buffer
		adler uint32
		size  int64
		err   error
	}
	out := make([]band, bands)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			b := &out[i]
			y0, y1 := f.Height*i/bands, f.Height*(i+1)/bands
			fw := flatePool.Get().(*flate.Writer)
			defer flatePool.Put(fw)
			b.data = bandPool.Get().(*bytes.Buffer)
			b.data.Reset()
			fw.Reset(b.data)
			var sum uint32 = 1
			row := newRow(f.Width)
			filter := trialFilter(f, y0, y1)
			var prev []byte
			if y0 > 0 {
				prev = f.Pix[(y0-1)*f.Stride : (y0-1)*f.Stride+f.Width*4]
			}
			for y := y0; y < y1 && b.err == nil; y++ {
				cur := f.Pix[y*f.Stride : y*f.Stride+f.Width*4]
				filterRow(row, cur, prev, filter)
				sum = pngkern.Adler32(sum, row[:len(row)-rowSlack])
				_, b.err = fw.Write(row[:len(row)-rowSlack])
				prev = cur
			}
			if b.err == nil {
				if i == bands-1 {
					b.err = fw.Close()
				} else {
					b.err = fw.Flush()
				}
			}
			b.adler, b.size = sum, int64(y1-y0)*int64(len(row)-rowSlack)
		})
	}
	wg.Wait()
	// The file is written once, at its final size: the bands go straight
	// into the IDAT chunk, with no joined copy of the stream in between.
	idatLen := 2 + 4 // zlib header and Adler-32
	for i := range out {
		if out[i].err != nil {
			return nil, out[i].err
		}
		idatLen += out[i].data.Len()
	}
	buf := pngHeader(make([]byte, 0, pngHeaderLen+12+idatLen+12), f)
	buf = binary.BigEndian.AppendUint32(buf, uint32(idatLen))
	start := len(buf)
	buf = append(buf, "IDAT"...)
	buf = append(buf, 0x78, 0x01) // zlib header: deflate, 32 KiB window, fastest
	var sum uint32 = 1
	for i := range out {
		buf = append(buf, out[i].data.Bytes()...)
		bandPool.Put(out[i].data)
		sum = adler32Combine(sum, out[i].adler, out[i].size)
	}
	buf = binary.BigEndian.AppendUint32(buf, sum)
	buf = binary.BigEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf[start:]))
	return appendChunk(buf, "IEND", nil), nil
}

// bandPool keeps the bands' compressed bytes between pictures, so a
// screenshot does not grow a new buffer, doubling, for each band.
var bandPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// adler32Combine returns the Adler-32 of A followed by B from the sums of
// A and B and the length of B (zlib's adler32_combine).
func adler32Combine(a, b uint32, lenB int64) uint32 {
	const base = 65521
	rem := uint32(lenB % base)
	sum1 := a & 0xffff
	sum2 := rem * sum1 % base
	sum1 += (b & 0xffff) + base - 1
	sum2 += (a >> 16) + (b >> 16) + base - rem
	if sum1 >= base {
		sum1 -= base
	}
	if sum1 >= base {
		sum1 -= base
	}
	if sum2 >= base<<1 {
		sum2 -= base << 1
	}
	if sum2 >= base {
		sum2 -= base
	}
	return sum2<<16 | sum1
}

// writePNG is pngBytes in one pass, with the filter and the compressor as
// parameters, for the benchmarks that chose them.
func writePNG(f *frame.Frame, filter byte, zw *zlib.Writer) ([]byte, error) {
	var idat bytes.Buffer
	idat.Grow(f.Width * f.Height / 2)
	zw.Reset(&idat)

	out := newRow(f.Width)
	var prev []byte
	for y := range f.Height {
		row := f.Pix[y*f.Stride : y*f.Stride+f.Width*4]
		filterRow(out, row, prev, filter)
		if _, err := zw.Write(out[:len(out)-rowSlack]); err != nil {
			return nil, err
		}
		prev = row
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return chunks(f, idat.Bytes()), nil
}

// chunks is the PNG file: signature, IHDR, the one IDAT, IEND.
func chunks(f *frame.Frame, idat []byte) []byte {
	buf := pngHeader(make([]byte, 0, pngHeaderLen+2*12+len(idat)), f)
	buf = appendChunk(buf, "IDAT", idat)
	return appendChunk(buf, "IEND", nil)
}

// pngHeaderLen is what pngHeader appends: the signature and the IHDR chunk.
const pngHeaderLen = 8 + 12 + 13

// pngHeader appends the signature and f's IHDR chunk to buf.
func pngHeader(buf []byte, f *frame.Frame) []byte {
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(f.Width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(f.Height))
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB; compression, filter, interlace 0
	buf = append(buf, pngSignature...)
	return appendChunk(buf, "IHDR", ihdr[:])
}

func appendChunk(buf []byte, typ string, data []byte) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(data)))
	start := len(buf)
	buf = append(buf, typ...)
	buf = append(buf, data...)
	return binary.BigEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf[start:]))
}

// rowSlack is the bytes a filtered row's buffer has past its end, for
// filterRow's wide stores.
const rowSlack = pngkern.Slack

// useKernels lets filterRow call package pngkern's AVX2 filters; the
// tests switch it off to check the Go code alone.
var useKernels = true

// newRow is a buffer for one filtered row of width pixels.
func newRow(width int) []byte { return make([]byte, 1+width*3+rowSlack) }

// filterRow turns one BGRX row into a filtered PNG RGB row in out (a
// newRow buffer): the filter byte, then per pixel its bytes minus those of
// the reference pixel the filter names (none: zero; Sub: the pixel to the
// left; Up: the pixel above, in prev, nil for the first row). With AVX2,
// None and Up go eight pixels at a time (package pngkern); the rest, two
// pixels at a time through uint64s: loaded together, subtracted bytewise
// at once, stored with one eight-byte write whose last two bytes the next
// pair overwrites.
func filterRow(out, row, prev []byte, filter byte) {
	out[0] = filter
	o := out[1:]
	n := len(row) / 4 // pixels
	if filter == filterUp && prev == nil {
		filter = filterNone // the row above the first is zeros
	}
	i, j := 0, 0
	if useKernels && filter != filterSub {
		done := 0
		if filter == filterUp {
			done = pngkern.FilterUp(o, row, prev)
		} else {
			done = pngkern.FilterNone(o, row)
		}
		i, j = done*4, done*3
	}
	var left uint64 // Sub: the previous pair, its second pixel in the high half
	for ; i+8 <= len(row); i, j = i+8, j+6 {
		v := binary.LittleEndian.Uint64(row[i:])
		d := v
		switch filter {
		case filterSub:
			d = subBytes(v, v<<32|left>>32)
			left = v
		case filterUp:
			d = subBytes(v, binary.LittleEndian.Uint64(prev[i:]))
		}
		binary.LittleEndian.PutUint64(o[j:], uint64(rgb(uint32(d)))|uint64(rgb(uint32(d>>32)))<<24)
	}
	if n%2 == 1 { // the odd last pixel
		v := uint64(binary.LittleEndian.Uint32(row[i:]))
		d := v
		switch filter {
		case filterSub:
			d = subBytes(v, left>>32)
		case filterUp:
			d = subBytes(v, uint64(binary.LittleEndian.Uint32(prev[i:])))
		}
		binary.LittleEndian.PutUint32(o[j:], rgb(uint32(d)))
	}
}

// subBytes subtracts the bytes of y from those of x, each modulo 256
// without borrowing from its neighbour.
func subBytes(x, y uint64) uint64 {
	const high = 0x8080808080808080
	return ((x | high) - (y &^ high)) ^ ((x ^ ^y) & high)
}

// rgb turns the pixel 0xXXRRGGBB into 0x00BBGGRR: stored little endian,
// the bytes R, G, B, 0.
func rgb(v uint32) uint32 { return bits.ReverseBytes32(v) >> 8 }
