// Package x11 drives one X11 display for an agent: synthetic input through
// XTEST, screen capture through MIT-SHM (plain GetImage when shared memory
// cannot be attached), the cursor through XFixes, and top-level windows
// through the EWMH and ICCCM properties a window manager keeps.
//
// A Display is one connection. Its methods are safe for concurrent use and
// synchronous: when an input method returns, the X server has processed the
// input, so a capture that follows sees its effect (as far as the client
// that receives it has redrawn — a Display cannot wait for other clients).
//
//	d, err := x11.Connect(":1", x11.Options{})
//	d.Click(x11.Point{X: 100, Y: 200}, x11.ButtonLeft, 2) // double click
//	d.Key("ctrl+shift+t")
//	d.Type("naïve – 東京\n", 0)
//	f, err := d.Capture(image.Rect(0, 0, 640, 400), true) // with the cursor
//	ws, err := d.Windows()
//
// Bad input gives typed errors matching ErrOffScreen, ErrUnknownKey,
// ErrInvalidText and ErrNoWindow under errors.Is.
package x11

import (
	"fmt"
	"image"
	"io"
	"log"
	"os"
	"sync"
	"syscall"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

func init() {
	// xgb logs to stderr on its own (a missing ~/.Xauthority, a closed
	// connection); every such condition also reaches the caller as an
	// error, so the log is only noise in a guest's output.
	xgb.Logger = log.New(io.Discard, "", 0)
}

// Options tune Connect.
type Options struct {
	// NoSHM skips MIT-SHM and captures with plain GetImage (for tests and
	// for comparing; Connect falls back on its own when SHM fails).
	NoSHM bool
}

// Display is a connection to one X server screen.
type Display struct {
	name   string
	conn   *xgb.Conn
	root   xproto.Window
	width  int
	height int
	xfixes bool // cursor image available

	inputMu sync.Mutex // one input sequence at a time (combos, typing)
	kb      keyboard

	capMu sync.Mutex
	fb    *framebuffer // Xvfb's screen itself; nil: shm or GetImage
	shm   *shmSegment  // nil: plain GetImage

	atomMu sync.Mutex
	atoms  map[string]xproto.Atom

	damage screenDamage

	regionsMu sync.Mutex
	regions   map[damage.Damage]*DamageRegion // screencasts' damage (damage_region.go)

	closeOnce sync.Once

	launchCred *syscall.Credential // Launch's (SetLaunchCredential)

	evMu    sync.Mutex
	changed chan struct{} // closed and replaced on every X event
	closed  bool
}

// Connect opens the display name ("" means $DISPLAY) and prepares XTEST
// (required), XFixes and MIT-SHM (optional).
func Connect(name string, o Options) (*Display, error) {
	if name == "" {
		name = os.Getenv("DISPLAY")
	}
	conn, err := xgb.NewConnDisplay(name)
	if err != nil {
		return nil, fmt.Errorf("connect to X display %q: %w", name, err)
	}
	d := &Display{name: name, conn: conn, atoms: map[string]xproto.Atom{}, changed: make(chan struct{})}
	if err := d.init(o); err != nil {
		conn.Close()
		return nil, err
	}
	go d.readEvents()
	return d, nil
}

func (d *Display) init(o Options) error {
	setup := xproto.Setup(d.conn)
	screen := setup.DefaultScreen(d.conn)
	d.root = screen.Root
	d.width, d.height = int(screen.WidthInPixels), int(screen.HeightInPixels)
	if err := checkPixelFormat(setup, screen); err != nil {
		return err
	}
	if err := xtest.Init(d.conn); err != nil {
		return fmt.Errorf("X server %q lacks the XTEST extension, needed for input: %w", d.name, err)
	}
	if xfixes.Init(d.conn) == nil {
		// XFixes requires the client to announce its version before use.
		if _, err := xfixes.QueryVersion(d.conn, 4, 0).Reply(); err == nil {
			d.xfixes = true
		}
	}
	if !o.NoSHM {
		d.shm = attachSHM(d.conn, d.width*d.height*4) // nil when it fails: plain GetImage
	}
	if err := d.kb.load(d.conn, setup); err != nil {
		return err
	}
	d.initDamage()
	// Window lists and focus change with these; waits wake on them.
	return xproto.ChangeWindowAttributesChecked(d.conn, d.root, xproto.CwEventMask,
		[]uint32{xproto.EventMaskSubstructureNotify | xproto.EventMaskPropertyChange}).Check()
}

// checkPixelFormat makes sure captures come back as BGRX: 24-bit colour
// in 32-bit little-endian pixels, which is what Xvfb, Xorg and Xvnc use on
// every little-endian host.
func checkPixelFormat(setup *xproto.SetupInfo, screen *xproto.ScreenInfo) error {
	if setup.ImageByteOrder != xproto.ImageOrderLSBFirst {
		return fmt.Errorf("X server sends images MSB first; only LSB first (BGRX) is supported")
	}
	for _, f := range setup.PixmapFormats {
		if f.Depth == screen.RootDepth {
			if f.BitsPerPixel != 32 || screen.RootDepth < 24 {
				return fmt.Errorf("screen depth %d with %d bits per pixel; only depth 24/32 at 32 bpp is supported (start Xvfb with -screen 0 WxHx24)",
					screen.RootDepth, f.BitsPerPixel)
			}
			return nil
		}
	}
	return fmt.Errorf("no pixmap format for the root depth %d", screen.RootDepth)
}

// Name is the display name it was connected with.
func (d *Display) Name() string { return d.name }

// Size is the screen size in pixels.
func (d *Display) Size() (width, height int) { return d.width, d.height }

// SHM says whether captures go through MIT-SHM.
func (d *Display) SHM() bool { return d.shm != nil }

// How captures read the screen, fastest first (CaptureMethod).
const (
	CaptureFramebuffer = "framebuffer" // Xvfb's screen memory, mapped (UseFramebuffer)
	CaptureSHM         = "shm"         // MIT-SHM GetImage into a shared segment
	CaptureGetImage    = "getimage"    // GetImage through the socket
)

// CaptureMethod says how captures read the screen.
func (d *Display) CaptureMethod() string {
	d.capMu.Lock()
	defer d.capMu.Unlock()
	switch {
	case d.fb != nil:
		return CaptureFramebuffer
	case d.shm != nil:
		return CaptureSHM
	}
	return CaptureGetImage
}

// Close restores the keyboard mapping if typing changed it, releases the
// shared memory and closes the connection. Later calls do nothing.
func (d *Display) Close() error {
	d.closeOnce.Do(d.close)
	return nil
}

func (d *Display) close() {
	d.inputMu.Lock()
	d.closeKeys()
	d.inputMu.Unlock()
	d.capMu.Lock()
	if d.fb != nil {
		d.fb.detach()
		d.fb = nil
	}
	if d.shm != nil {
		d.shm.detach(d.conn)
		d.shm = nil
	}
	d.capMu.Unlock()
	d.markClosed() // before the connection goes, so every later call says ErrClosed
	d.conn.Close()
}

// sync makes a round trip: once it returns, the server has processed every
// request sent before it.
func (d *Display) sync() error {
	if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
		return d.connErr(err)
	}
	return nil
}

// connErr turns a failure of the connection itself into ErrClosed.
func (d *Display) connErr(err error) error {
	d.evMu.Lock()
	closed := d.closed
	d.evMu.Unlock()
	if closed {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

// inScreen checks a point.
func (d *Display) inScreen(p Point) error {
	if p.X < 0 || p.Y < 0 || p.X >= d.width || p.Y >= d.height {
		return &OffScreenError{What: "point", X: p.X, Y: p.Y, ScreenW: d.width, ScreenH: d.height}
	}
	return nil
}

// screenRegion returns r, or the whole screen for an empty r, checked to
// lie within the screen.
func (d *Display) screenRegion(r image.Rectangle) (image.Rectangle, error) {
	screen := image.Rect(0, 0, d.width, d.height)
	if r == (image.Rectangle{}) {
		return screen, nil
	}
	if r.Empty() || !r.In(screen) {
		return r, &OffScreenError{What: "region", X: r.Min.X, Y: r.Min.Y, Width: r.Dx(), Height: r.Dy(), ScreenW: d.width, ScreenH: d.height}
	}
	return r, nil
}

// atom interns name once per Display.
func (d *Display) atom(name string) xproto.Atom {
	d.atomMu.Lock()
	defer d.atomMu.Unlock()
	if a, ok := d.atoms[name]; ok {
		return a
	}
	r, err := xproto.InternAtom(d.conn, false, uint16(len(name)), name).Reply()
	if err != nil {
		return xproto.AtomNone // not cached: the next call retries
	}
	d.atoms[name] = r.Atom
	return r.Atom
}

// readEvents wakes every waiter on each event, and marks the display
// closed when the connection ends. It also keeps the keymap current.
func (d *Display) readEvents() {
	for {
		ev, xerr := d.conn.WaitForEvent()
		if ev == nil && xerr == nil {
			d.markClosed()
			return
		}
		switch ev := ev.(type) {
		case xproto.MappingNotifyEvent:
			d.kb.stale.Store(true)
		case damage.NotifyEvent:
			if !d.regionEvent(ev) {
				d.onDamage()
			}
		}
		d.evMu.Lock()
		if !d.closed {
			close(d.changed)
			d.changed = make(chan struct{})
		}
		d.evMu.Unlock()
	}
}

// markClosed records that the connection is gone and wakes all waiters.
func (d *Display) markClosed() {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.changed)
	}
}

// changes returns a channel closed at the next X event (or at once when
// the connection is gone), for waits that re-check a condition on events.
func (d *Display) changes() (<-chan struct{}, bool) {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	return d.changed, !d.closed
}
