package osworld

import (
	"bytes"
	"fmt"
	"image"
	_ "image/gif" // wallpapers OSWorld's tasks set: PNG, JPEG, GIF
	_ "image/jpeg"
	_ "image/png"
	"os"
	"path/filepath"

	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
)

// DefaultWallpaper makes the desktop's backdrop, the colour rgb
// (0xRRGGBB) over the whole screen, the wallpaper /wallpaper answers
// before any change_wallpaper: a PNG file of the facade's own, as
// OSWorld's VMs have Ubuntu's picture there.
func (s *Server) DefaultWallpaper(rgb uint32) error {
	w, h := s.D.Size()
	f := frame.New(w, h)
	for i := 0; i < len(f.Pix); i += 4 {
		f.Pix[i], f.Pix[i+1], f.Pix[i+2] = byte(rgb), byte(rgb>>8), byte(rgb>>16)
	}
	var b bytes.Buffer
	if err := encode.PNG(&b, f); err != nil {
		return fmt.Errorf("osworld: default wallpaper: %w", err)
	}
	p := filepath.Join(s.pyDir, "wallpaper.png")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("osworld: default wallpaper: %w", err)
	}
	s.mu.Lock()
	s.wallpaper = p
	s.mu.Unlock()
	return nil
}

// paintWallpaper draws the picture in file p on the root window, scaled
// to cover the screen and centred (GNOME's default "zoom").
func (s *Server) paintWallpaper(p string) error {
	file, err := os.Open(p)
	if err != nil {
		return err
	}
	defer file.Close()
	img, _, err := image.Decode(file)
	if err != nil {
		return fmt.Errorf("decode %s: %w", p, err)
	}
	w, h := s.D.Size()
	return s.D.PaintRootPicture(zoom(img, w, h))
}

// zoom scales img to cover w×h, cropping what overhangs evenly, by the
// nearest source pixel: a wallpaper's look, not a resampler's.
func zoom(img image.Image, w, h int) *frame.Frame {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	f := frame.New(w, h)
	if sw == 0 || sh == 0 {
		return f
	}
	// scale = max(w/sw, h/sh), kept as a fraction num/den.
	num, den := w, sw
	if h*sw > w*sh {
		num, den = h, sh
	}
	offX := (sw*num - w*den) / 2 // in destination units × den
	offY := (sh*num - h*den) / 2
	for y := 0; y < h; y++ {
		sy := b.Min.Y + min(sh-1, (y*den+offY)/num)
		row := f.Pix[y*f.Stride:]
		for x := 0; x < w; x++ {
			sx := b.Min.X + min(sw-1, (x*den+offX)/num)
			r, g, bl, _ := img.At(sx, sy).RGBA()
			row[x*4], row[x*4+1], row[x*4+2] = byte(bl>>8), byte(g>>8), byte(r>>8)
		}
	}
	return f
}
