//go:build turbojpeg

package encode

import (
	"bytes"
	"image/jpeg"
	"testing"
)

// A picture larger than the buffer libjpeg-turbo is given to start with
// (noise at q100: about 8 bits a pixel against the 4 guessed) makes it
// move to buffers of its own; the JPEG still comes back whole.
func TestJPEGOutgrowsItsFirstBuffer(t *testing.T) {
	f := noiseFrame(320, 240)
	guess := firstBuffer(f.Width, f.Height)
	data, err := encodeJPEG(f, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) <= guess {
		t.Fatalf("noise at q100 took %d bytes, not over the first buffer's %d: the test does not reach the growth path", len(data), guess)
	}
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the %d-byte JPEG does not decode: %v", len(data), err)
	}
	if img.Bounds() != f.Bounds() {
		t.Fatalf("decodes to %v, want %v", img.Bounds(), f.Bounds())
	}
	small, err := encodeJPEG(screenFrame(t), 80)
	if err != nil || len(small) >= firstBuffer(1280, 800) {
		t.Fatalf("the screen at q80: %d bytes, %v; want under the first buffer", len(small), err)
	}
}
