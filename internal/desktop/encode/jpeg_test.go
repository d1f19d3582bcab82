package encode

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// A picture encoded in bands and joined decodes to exactly the pixels of
// the same picture encoded in one pass — also when the width and the last
// band's height are no multiple of an MCU.
func TestJPEGBandsDecodeLikeOnePass(t *testing.T) {
	screen := screenFrame(t)
	odd, err := screen.Sub(image.Rect(3, 1, 3+1001, 1+797))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*frame.Frame{screen, odd} {
		one, err := encodeBands(f, 80, 1)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(one, []byte{0xff, markerDRI}) {
			t.Fatalf("%dx%d in one band has a restart interval", f.Width, f.Height)
		}
		want := decodeRGBA(t, one)
		for _, n := range []int{2, 3, 7} {
			name := fmt.Sprintf("%dx%d in %d bands", f.Width, f.Height, n)
			joined, err := encodeBands(f, 80, n)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// The negative check first: the bands were joined, restart
			// markers and all, not encoded in one pass.
			if !bytes.Contains(joined, []byte{0xff, markerDRI, 0, 4}) || !bytes.Contains(joined, []byte{0xff, markerRST0}) {
				t.Fatalf("%s: no restart interval or marker in the joined JPEG", name)
			}
			got := decodeRGBA(t, joined)
			if got.Bounds() != want.Bounds() {
				t.Fatalf("%s: decodes to %v, want %v", name, got.Bounds(), want.Bounds())
			}
			if !bytes.Equal(got.Pix, want.Pix) {
				t.Fatalf("%s: decodes to other pixels than one pass", name)
			}
		}
	}
}

func decodeRGBA(t *testing.T, data []byte) *image.RGBA {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s output does not decode: %v", JPEGBackend, err)
	}
	rgba := image.NewRGBA(img.Bounds())
	for y := range img.Bounds().Dy() {
		for x := range img.Bounds().Dx() {
			rgba.Set(x, y, img.At(x, y))
		}
	}
	return rgba
}

// Bands that do not belong together are refused, not joined into garbage.
func TestJoinBandsRefuses(t *testing.T) {
	f := screenFrame(t)
	top, _ := f.Sub(image.Rect(0, 0, 1280, 400))
	bottom, _ := f.Sub(image.Rect(0, 400, 1280, 800))
	a, err := encodeJPEG(top, 80)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodeJPEG(bottom, 80)
	if err != nil {
		t.Fatal(err)
	}
	other, err := encodeJPEG(bottom, 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := joinBands([][]byte{a, b}, 800, 80*25); err != nil {
		t.Fatalf("matching bands: %v", err)
	}
	joined, _ := joinBands([][]byte{a, b}, 800, 80*25)
	for _, c := range []struct {
		name  string
		bands [][]byte
		want  string
	}{
		{"other quality", [][]byte{a, other}, "other tables"},
		{"not a JPEG", [][]byte{a, []byte("GIF89a")}, "not a JPEG"},
		{"truncated", [][]byte{a, append(b[:40:40], 0xff, markerEOI)}, "past the end"},
		{"restart markers", [][]byte{joined, b}, "already has restart markers"},
	} {
		if _, err := joinBands(c.bands, 800, 80*25); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// BenchmarkJPEGBands is the native and the 1024-edge JPEG q80 of the
// desktop fixtures in 1 to 8 bands: with -cpu 1 the CPU each costs (the
// bands' overhead), with -cpu 2 the wall time (ADR 0022).
func BenchmarkJPEGBands(b *testing.B) {
	for _, fx := range desktopFixtures(b) {
		for _, n := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("%s/bands%d", fx.name, n), func(b *testing.B) {
				var data []byte
				cpu0 := cpuTime()
				for b.Loop() {
					var err error
					if data, err = encodeBands(fx.f, 80, n); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(len(data)), "bytes")
			})
		}
	}
}
