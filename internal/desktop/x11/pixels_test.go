package x11

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// copyColour against the obvious byte loop, over every length class the
// unrolled word loop and its tails meet, at an odd offset too.
func TestCopyColour(t *testing.T) {
	for n := 0; n <= 76; n += 4 {
		for _, off := range []int{0, 4} {
			src := make([]byte, n+off)
			for i := range src {
				src[i] = byte(i*7 + 1)
			}
			src = src[off:]
			want := make([]byte, n)
			for i := 0; i+4 <= n; i += 4 {
				copy(want[i:i+3], src[i:i+3])
			}
			got := bytes.Repeat([]byte{0xee}, n)
			copyColour(got, src)
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d off=%d: got % x, want % x", n, off, got, want)
			}
		}
	}
}

// parseXWD takes a well-formed Xvfb header and refuses any geometry that
// would read past the segment.
func TestParseXWD(t *testing.T) {
	const w, h = 8, 4
	header := func(edit func(words []uint32)) []byte {
		words := make([]uint32, xwdWords)
		words[xwdHeaderSize] = xwdWords*4 + 8
		words[xwdFileVersion] = 7
		words[xwdPixmapFormat] = 2
		words[xwdPixmapWidth], words[xwdPixmapHeight] = w, h
		words[xwdBitsPerPixel] = 32
		words[xwdBytesPerLine] = w * 4
		words[xwdRedMask], words[xwdGreenMask], words[xwdBlueMask] = 0xff0000, 0xff00, 0xff
		words[xwdNColors] = 2
		if edit != nil {
			edit(words)
		}
		mem := make([]byte, xwdWords*4+8+2*xwdColorSize+w*4*h)
		for i, v := range words {
			binary.BigEndian.PutUint32(mem[i*4:], v)
		}
		return mem
	}
	fb, err := parseXWD(header(nil), w, h)
	if err != nil {
		t.Fatal(err)
	}
	if fb.stride != w*4 || len(fb.pix) != w*4*h || &fb.pix[len(fb.pix)-1] != &fb.mem[len(fb.mem)-1] {
		t.Fatalf("stride %d, %d pixel bytes ending at the segment's end: want %d, %d", fb.stride, len(fb.pix), w*4, w*4*h)
	}
	for _, c := range []struct {
		name string
		mem  []byte
		want string
	}{
		{"short", header(nil)[:40], "shorter than an XWD header"},
		{"version", header(func(x []uint32) { x[xwdFileVersion] = 6 }), "version 6"},
		{"depth", header(func(x []uint32) { x[xwdBitsPerPixel] = 16 }), "at 16 bpp"},
		{"masks", header(func(x []uint32) { x[xwdRedMask] = 0xff }), "colour masks"},
		{"size", header(func(x []uint32) { x[xwdPixmapWidth] = w + 1 }), "the screen is 8x4"},
		{"stride", header(func(x []uint32) { x[xwdBytesPerLine] = w*4 + 4 }), "bytes per line"},
		{"narrow stride", header(func(x []uint32) { x[xwdBytesPerLine] = w*4 - 4 }), "bytes per line"},
		{"colours", header(func(x []uint32) { x[xwdNColors] = 1 << 30 }), "bytes per line"},
		{"header size", header(func(x []uint32) { x[xwdHeaderSize] = 1 << 31 }), "bytes per line"},
	} {
		if _, err := parseXWD(c.mem, w, h); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
}
