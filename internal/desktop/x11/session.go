package x11

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
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
