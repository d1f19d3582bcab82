package x11_test

import (
	"image"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
)

const screenW, screenH = 1280, 800

// newDisplay starts an Xvfb (and openbox when wm is set) and connects.
func newDisplay(t testing.TB, wm bool, o x11.Options) (*x11.Display, string) {
	t.Helper()
	name := xvfbtest.Start(t, screenW, screenH)
	if wm {
		xvfbtest.WindowManager(t, name)
	}
	d, err := x11.Connect(name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, name
}

// newFramebufferDisplay is newDisplay (without a window manager) with
// captures read from Xvfb's shared-memory framebuffer.
func newFramebufferDisplay(t testing.TB) (*x11.Display, string) {
	t.Helper()
	s := xvfbtest.StartServer(t, screenW, screenH)
	if s.Framebuffer < 0 {
		t.Fatalf("Xvfb -shmem printed no framebuffer segment id: %s", s.Stderr())
	}
	d, err := x11.Connect(s.Display, x11.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.UseFramebuffer(s.Framebuffer); err != nil {
		t.Fatal(err)
	}
	if d.CaptureMethod() != x11.CaptureFramebuffer {
		t.Fatal("UseFramebuffer succeeded but captures do not use it")
	}
	return d, s.Display
}

// client is a second X connection playing an application: it owns test
// windows and records the input events they receive.
type client struct {
	conn   *xgb.Conn
	root   xproto.Window
	events chan xgb.Event
}

func newClient(t testing.TB, display string) *client {
	t.Helper()
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{conn: conn, root: xproto.Setup(conn).DefaultScreen(conn).Root, events: make(chan xgb.Event, 4096)}
	go func() {
		for {
			ev, err := conn.WaitForEvent()
			if ev == nil && err == nil {
				close(c.events)
				return
			}
			if ev != nil {
				c.events <- ev
			}
		}
	}()
	t.Cleanup(conn.Close)
	return c
}

// window creates and maps an override-redirect window (no window manager
// moves it) with the given background, selecting input events, and returns
// once it is viewable.
func (c *client) window(t testing.TB, r image.Rectangle, bg uint32) xproto.Window {
	t.Helper()
	id, err := xproto.NewWindowId(c.conn)
	if err != nil {
		t.Fatal(err)
	}
	mask := uint32(xproto.EventMaskKeyPress | xproto.EventMaskKeyRelease | xproto.EventMaskButtonPress |
		xproto.EventMaskButtonRelease | xproto.EventMaskPointerMotion | xproto.EventMaskExposure)
	err = xproto.CreateWindowChecked(c.conn, 0, id, c.root, int16(r.Min.X), int16(r.Min.Y), uint16(r.Dx()), uint16(r.Dy()), 0,
		xproto.WindowClassInputOutput, 0, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{bg, 1, mask}).Check()
	if err != nil {
		t.Fatal(err)
	}
	xproto.MapWindow(c.conn, id)
	c.waitFor(t, "Expose", func(ev xgb.Event) bool { _, ok := ev.(xproto.ExposeEvent); return ok })
	return id
}

// fill paints r (window coordinates) in colour rgb.
func (c *client) fill(t testing.TB, w xproto.Window, r image.Rectangle, rgb uint32) {
	t.Helper()
	gc, _ := xproto.NewGcontextId(c.conn)
	xproto.CreateGC(c.conn, gc, xproto.Drawable(w), xproto.GcForeground, []uint32{rgb})
	xproto.PolyFillRectangle(c.conn, xproto.Drawable(w), gc, []xproto.Rectangle{{X: int16(r.Min.X), Y: int16(r.Min.Y), Width: uint16(r.Dx()), Height: uint16(r.Dy())}})
	xproto.FreeGC(c.conn, gc)
	if _, err := xproto.GetInputFocus(c.conn).Reply(); err != nil {
		t.Fatal(err)
	}
}

// waitFor returns the first event that match accepts, dropping others.
func (c *client) waitFor(t testing.TB, what string, match func(xgb.Event) bool) xgb.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("connection closed while waiting for %s", what)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s within 5s", what)
		}
	}
}

// inputEvents drains the input events received so far, after a round trip
// made sure the server has delivered them.
func (c *client) inputEvents(t testing.TB) []xgb.Event {
	t.Helper()
	if _, err := xproto.GetInputFocus(c.conn).Reply(); err != nil {
		t.Fatal(err)
	}
	var out []xgb.Event
	for {
		select {
		case ev := <-c.events:
			switch ev.(type) {
			case xproto.KeyPressEvent, xproto.KeyReleaseEvent, xproto.ButtonPressEvent,
				xproto.ButtonReleaseEvent, xproto.MotionNotifyEvent:
				out = append(out, ev)
			}
		case <-time.After(30 * time.Millisecond): // events were queued before the reply; let the reader goroutine hand them over
			return out
		}
	}
}
