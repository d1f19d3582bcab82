package x11

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// WaitWindowManager returns once a window manager manages windows: a probe
// window this display maps shows up in _NET_CLIENT_LIST, and is then
// destroyed. (_NET_SUPPORTING_WM_CHECK alone comes too early: a window
// mapped right after it was seen to wait seconds before openbox handled
// it — the known race that leaves an app's window unmapped.)
func (d *Display) WaitWindowManager(ctx context.Context) error {
	probe, err := xproto.NewWindowId(d.conn)
	if err != nil {
		return d.connErr(err)
	}
	xproto.CreateWindow(d.conn, 0, probe, d.root, 0, 0, 10, 10, 0, xproto.WindowClassInputOutput, 0, 0, nil)
	defer xproto.DestroyWindow(d.conn, probe)
	clients := d.atom("_NET_CLIENT_LIST")
	for {
		// Mapped again each round: a map before the manager redirects
		// maps is not a request it ever sees.
		xproto.MapWindow(d.conn, probe)
		if p, err := xproto.GetProperty(d.conn, false, d.root, clients, xproto.AtomWindow, 0, 4096).Reply(); err == nil {
			for i := 0; i+4 <= len(p.Value); i += 4 {
				if xproto.Window(xgb.Get32(p.Value[i:])) == probe {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no window manager managed a window on %s: %w", d.name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// PaintRoot sets the root window's background to the colour rgb
// (0xRRGGBB) and repaints it, so the desktop has a known backdrop.
func (d *Display) PaintRoot(rgb uint32) error {
	// The server's visual is 24-bit TrueColor (checked at Connect): the
	// pixel value is the colour.
	xproto.ChangeWindowAttributes(d.conn, d.root, xproto.CwBackPixel, []uint32{rgb})
	return d.connErr(xproto.ClearAreaChecked(d.conn, false, d.root, 0, 0, 0, 0).Check())
}

// PaintRootPicture makes f, the screen's size, the root window's
// background (a wallpaper) and repaints it. The pixmap goes up in strips
// that each fit one request (PutImage has no BIG-REQUESTS here).
func (d *Display) PaintRootPicture(f *frame.Frame) error {
	if f.Width != d.width || f.Height != d.height {
		return fmt.Errorf("root picture %dx%d: the screen is %dx%d", f.Width, f.Height, d.width, d.height)
	}
	pm, err := xproto.NewPixmapId(d.conn)
	if err != nil {
		return d.connErr(err)
	}
	gc, err := xproto.NewGcontextId(d.conn)
	if err != nil {
		return d.connErr(err)
	}
	xproto.CreatePixmap(d.conn, 24, pm, xproto.Drawable(d.root), uint16(d.width), uint16(d.height))
	defer xproto.FreePixmap(d.conn, pm) // the root keeps its background
	xproto.CreateGC(d.conn, gc, xproto.Drawable(pm), 0, nil)
	defer xproto.FreeGC(d.conn, gc)
	row := d.width * 4
	maxBytes := int(xproto.Setup(d.conn).MaximumRequestLength)*4 - 64
	strip := max(1, maxBytes/row)
	for y := 0; y < d.height; y += strip {
		n := min(strip, d.height-y)
		pix := make([]byte, 0, n*row)
		for r := y; r < y+n; r++ {
			pix = append(pix, f.Pix[r*f.Stride:r*f.Stride+row]...)
		}
		xproto.PutImage(d.conn, xproto.ImageFormatZPixmap, xproto.Drawable(pm), gc, uint16(d.width), uint16(n), 0, int16(y), 0, 24, pix)
	}
	xproto.ChangeWindowAttributes(d.conn, d.root, xproto.CwBackPixmap, []uint32{uint32(pm)})
	return d.connErr(xproto.ClearAreaChecked(d.conn, false, d.root, 0, 0, 0, 0).Check())
}
