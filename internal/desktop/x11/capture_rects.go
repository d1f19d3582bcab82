package x11

import (
	"fmt"
	"image"

	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// CaptureRects copies the screen's pixels in each of rects into screen,
// a frame the size of the screen, at the same places: what a screencast
// calls after DamageRegion.Take to refresh only what changed. With
// Xvfb's framebuffer every rectangle is copied under one server grab, so
// the frame never shows half of a drawing.
func (d *Display) CaptureRects(screen *frame.Frame, rects []image.Rectangle) error {
	if screen.Width != d.width || screen.Height != d.height {
		return fmt.Errorf("capture rects into a %dx%d frame: the screen is %dx%d", screen.Width, screen.Height, d.width, d.height)
	}
	for _, r := range rects {
		if _, err := d.screenRegion(r); err != nil {
			return err
		}
	}
	d.capMu.Lock()
	defer d.capMu.Unlock()
	if d.fb != nil {
		xproto.GrabServer(d.conn)
		defer xproto.UngrabServer(d.conn)
		if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
			return d.connErr(err)
		}
		for _, r := range rects {
			copyRect(screen, r, d.fb.pix[r.Min.Y*d.fb.stride+r.Min.X*4:], d.fb.stride)
		}
		return nil
	}
	for _, r := range rects {
		x, y, w, h := int16(r.Min.X), int16(r.Min.Y), uint16(r.Dx()), uint16(r.Dy())
		var src []byte
		if d.shm != nil {
			if _, err := shm.GetImage(d.conn, xproto.Drawable(d.root), x, y, w, h, ^uint32(0), xproto.ImageFormatZPixmap, d.shm.seg, 0).Reply(); err != nil {
				return fmt.Errorf("capture %v: %w", r, d.connErr(err))
			}
			src = d.shm.mem
		} else {
			reply, err := xproto.GetImage(d.conn, xproto.ImageFormatZPixmap, xproto.Drawable(d.root), x, y, w, h, ^uint32(0)).Reply()
			if err != nil {
				return fmt.Errorf("capture %v: %w", r, d.connErr(err))
			}
			src = reply.Data
		}
		if len(src) < r.Dx()*r.Dy()*4 {
			return fmt.Errorf("capture %v: %d bytes for %dx%d pixels", r, len(src), r.Dx(), r.Dy())
		}
		copyRect(screen, r, src, r.Dx()*4)
	}
	return nil
}

// copyRect copies r's rows from src (r's top left at src[0], rows stride
// bytes apart) into dst at r, zeroing the padding byte.
func copyRect(dst *frame.Frame, r image.Rectangle, src []byte, stride int) {
	row := r.Dx() * 4
	for y := range r.Dy() {
		off := (r.Min.Y+y)*dst.Stride + r.Min.X*4
		copyColour(dst.Pix[off:off+row], src[y*stride:y*stride+row])
	}
}

// Cursor is the pointer's image and where it is on the screen.
type Cursor struct {
	Bounds image.Rectangle // the image's place on the screen
	Hot    image.Point     // the pointer's position
	Serial uint32          // changes with the cursor's shape
	argb   []uint32        // premultiplied
}

// Pointer returns the cursor's image and place (XFixes), for streams that
// composite it themselves.
func (d *Display) Pointer() (*Cursor, error) {
	if !d.xfixes {
		return nil, fmt.Errorf("the X server lacks XFixes: no cursor image")
	}
	c, err := xfixes.GetCursorImage(d.conn).Reply()
	if err != nil {
		return nil, d.connErr(err)
	}
	left, top := int(c.X)-int(c.Xhot), int(c.Y)-int(c.Yhot)
	return &Cursor{Bounds: image.Rect(left, top, left+int(c.Width), top+int(c.Height)), Hot: image.Pt(int(c.X), int(c.Y)), Serial: c.CursorSerial, argb: c.CursorImage}, nil
}

// Draw blends the cursor over f, whose top left is at origin on the
// screen (clipped to f).
func (c *Cursor) Draw(f *frame.Frame, origin image.Point) {
	blendCursor(f, c.Bounds.Min.Sub(origin), c.Bounds.Dx(), c.Bounds.Dy(), c.argb)
}

// CaptureScaled captures region (the whole screen when zero) scaled by s
// into dst (s.W×s.H; s made for the region's size). With Xvfb's
// framebuffer the scaler reads the screen memory itself, under the server
// grab, so a scaled capture skips the full-size copy: scaling then costs
// about what it saves in encoding. No cursor: draw it before scaling.
func (d *Display) CaptureScaled(dst, buf *frame.Frame, region image.Rectangle, s *frame.Scaler) (*frame.Frame, error) {
	r, err := d.screenRegion(region)
	if err != nil {
		return nil, err
	}
	if r.Dx() != s.SrcW || r.Dy() != s.SrcH || dst.Width != s.W || dst.Height != s.H {
		return nil, fmt.Errorf("scaled capture of %v into %dx%d with a %dx%d→%dx%d scaler", r, dst.Width, dst.Height, s.SrcW, s.SrcH, s.W, s.H)
	}
	d.capMu.Lock()
	if d.fb != nil {
		defer d.capMu.Unlock()
		xproto.GrabServer(d.conn)
		defer xproto.UngrabServer(d.conn)
		if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
			return nil, d.connErr(err)
		}
		screen := &frame.Frame{Width: d.width, Height: d.height, Stride: d.fb.stride, Pix: d.fb.pix}
		src, err := screen.Sub(r)
		if err != nil {
			return nil, err
		}
		s.ScaleParallel(dst, src, dst.Bounds()) // the scaler ignores the padding byte
		return buf, nil
	}
	d.capMu.Unlock()
	f, err := d.CaptureInto(buf, r, false)
	if err != nil {
		return nil, err
	}
	s.ScaleParallel(dst, f, dst.Bounds())
	return f, nil
}
