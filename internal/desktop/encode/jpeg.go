package encode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"sync"

	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/procs"
)

// JPEG writes f as a baseline 4:2:0 JPEG of the given quality (1–100)
// with the build's encoder (JPEGBackend). A frame of many rows is cut
// into horizontal bands, one per CPU, encoded in parallel and joined into
// one picture with restart markers: a 1280x800 screen in about half the
// time, decoding to exactly the pixels a single pass gives.
func JPEG(w io.Writer, f *frame.Frame, quality int) error {
	data, err := jpegBytes(f, quality)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// jpegBytes is JPEG into a new slice.
func jpegBytes(f *frame.Frame, quality int) ([]byte, error) {
	if f.Width == 0 || f.Height == 0 {
		return nil, errors.New("jpeg: empty frame")
	}
	bands := bandCount(f)
	// libjpeg-turbo's calls need no P, but a goroutine must get one to
	// make its call: in a lean guest it would wait for sysmon to take the
	// P back from the first call.
	defer procs.Borrow(bands)()
	data, err := encodeBands(f, clampQuality(quality), bands)
	if err != nil {
		return nil, fmt.Errorf("jpeg: %w", err)
	}
	return data, nil
}

// mcuSize is the side of a 4:2:0 MCU, in pixels: bands start on one.
const mcuSize = 16

// encodeBands encodes f in (at most) n bands and joins them.
func encodeBands(f *frame.Frame, quality, n int) ([]byte, error) {
	mcuCols := (f.Width + mcuSize - 1) / mcuSize
	mcuRows := (f.Height + mcuSize - 1) / mcuSize
	perBand := (mcuRows + n - 1) / n // MCU rows in every band but the last
	if mcuCols*perBand > 0xffff {    // over what a restart interval can count
		perBand = mcuRows
	}
	n = (mcuRows + perBand - 1) / perBand
	if n == 1 {
		return encodeJPEG(f, quality)
	}
	bands := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		y0 := i * perBand * mcuSize
		band, err := f.Sub(image.Rect(0, y0, f.Width, min(y0+perBand*mcuSize, f.Height)))
		if err != nil {
			return nil, err
		}
		if i == n-1 {
			bands[i], errs[i] = encodeJPEG(band, quality) // this goroutine's share
			break
		}
		wg.Go(func() { bands[i], errs[i] = encodeJPEG(band, quality) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return joinBands(bands, f.Height, mcuCols*perBand)
}

// JPEG markers joinBands reads and writes.
const (
	markerSOF0 = 0xc0 // start of frame, baseline
	markerRST0 = 0xd0 // restart markers RST0–RST7 follow
	markerSOI  = 0xd8
	markerEOI  = 0xd9
	markerSOS  = 0xda // start of scan
	markerDRI  = 0xdd // define restart interval
)

// joinBands joins the JPEGs of consecutive horizontal bands of one
// picture into one JPEG of height rows. The bands must come from the same
// encoder with the same quality and fixed Huffman tables, every band but
// the last holding interval MCUs. The result is the first band's headers
// with the whole height and a restart interval of one band (DRI), then
// each band's entropy-coded data, a restart marker between two. A decoder
// resets its DC predictions at a restart marker, as each band's encoder
// started from zero, and the bands' last bytes are padded as before a
// marker; so the joined picture decodes to exactly the bands' pixels.
func joinBands(bands [][]byte, height, interval int) ([]byte, error) {
	if height > 0xffff || interval > 0xffff {
		return nil, fmt.Errorf("join JPEG bands: height %d or restart interval %d over 65535", height, interval)
	}
	first, err := splitJPEG(bands[0])
	if err != nil {
		return nil, fmt.Errorf("join JPEG bands: band 0: %w", err)
	}
	size := len(first.headers) + 6 + len(first.sos) + 2
	parts := make([]jpegParts, len(bands))
	for i, b := range bands {
		if parts[i], err = splitJPEG(b); err != nil {
			return nil, fmt.Errorf("join JPEG bands: band %d: %w", i, err)
		}
		p := parts[i]
		if !bytes.Equal(p.sos, first.sos) || !sameHeaders(p, first) {
			return nil, fmt.Errorf("join JPEG bands: band %d has other tables or components than band 0", i)
		}
		size += len(p.scan) + 2
	}
	out := make([]byte, 0, size)
	out = append(out, first.headers...)
	binary.BigEndian.PutUint16(out[first.heightAt:], uint16(height))
	out = append(out, 0xff, markerDRI, 0, 4, byte(interval>>8), byte(interval))
	out = append(out, first.sos...)
	for i, p := range parts {
		if i > 0 {
			out = append(out, 0xff, markerRST0+byte((i-1)%8))
		}
		out = append(out, p.scan...)
	}
	return append(out, 0xff, markerEOI), nil
}

// jpegParts is a baseline JPEG taken apart.
type jpegParts struct {
	headers  []byte // from SOI up to the SOS marker
	heightAt int    // offset in headers of the frame height (SOF0)
	sos      []byte // the SOS segment, marker included
	scan     []byte // the entropy-coded data, up to EOI
}

// splitJPEG takes apart a single-scan baseline JPEG without restart
// markers, as the encoders here write them.
func splitJPEG(b []byte) (jpegParts, error) {
	if len(b) < 4 || b[0] != 0xff || b[1] != markerSOI || b[len(b)-2] != 0xff || b[len(b)-1] != markerEOI {
		return jpegParts{}, errors.New("not a JPEG from SOI to EOI")
	}
	p := jpegParts{heightAt: -1}
	for i := 2; i+4 <= len(b); {
		if b[i] != 0xff {
			return p, fmt.Errorf("no marker at offset %d", i)
		}
		marker, length := b[i+1], int(binary.BigEndian.Uint16(b[i+2:]))
		end := i + 2 + length
		if length < 2 || end > len(b)-2 {
			return p, fmt.Errorf("segment %#x at offset %d runs past the end", marker, i)
		}
		switch {
		case marker == markerSOF0:
			p.heightAt = i + 5 // marker, length, precision
		case marker == markerDRI:
			return p, errors.New("already has restart markers")
		case marker >= 0xc1 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc:
			return p, fmt.Errorf("frame type %#x, want baseline (SOF0)", marker)
		case marker == markerSOS:
			if p.heightAt < 0 {
				return p, errors.New("scan before the frame header")
			}
			p.headers, p.sos, p.scan = b[:i], b[i:end], b[end:len(b)-2]
			return p, nil
		}
		i = end
	}
	return p, errors.New("no scan")
}

// sameHeaders says whether a and b have the same headers but for the
// frame height.
func sameHeaders(a, b jpegParts) bool {
	if len(a.headers) != len(b.headers) || a.heightAt != b.heightAt {
		return false
	}
	h := a.heightAt
	return bytes.Equal(a.headers[:h], b.headers[:h]) && bytes.Equal(a.headers[h+2:], b.headers[h+2:])
}
