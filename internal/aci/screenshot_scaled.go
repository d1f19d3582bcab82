package aci

import (
	"image"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/frame"
)

// capture reads region for a screenshot, scaled to o.MaxLongEdge. A
// scaled capture without the cursor scales straight from the screen
// (x11.CaptureScaled) into a buffer the session keeps; with the cursor the
// pointer is drawn at full size first, then the frame is scaled.
func (ss *session) capture(region image.Rectangle, o *api.ACIScreenshot) (*frame.Frame, error) {
	w, h := region.Dx(), region.Dy()
	if region == (image.Rectangle{}) {
		w, h = ss.s.D.Size()
	}
	sc := frame.NewScaler(w, h, o.MaxLongEdge)
	if sc != nil && !o.Cursor {
		if ss.scaled == nil || ss.scaled.Width != sc.W || ss.scaled.Height != sc.H {
			ss.scaled = frame.New(sc.W, sc.H)
		}
		buf, err := ss.s.D.CaptureScaled(ss.scaled, ss.buf, region, sc)
		if err != nil {
			return nil, err
		}
		ss.buf = buf
		return ss.scaled, nil
	}
	f, err := ss.s.D.CaptureInto(ss.buf, region, o.Cursor)
	if err != nil {
		return nil, err
	}
	ss.buf = f
	return f.Downscale(o.MaxLongEdge), nil
}
