package x11

import (
	"fmt"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// Point is a position on the screen in pixels, (0, 0) at the top left.
type Point struct{ X, Y int }

// Button is a pointer button as X numbers them.
type Button byte

const (
	ButtonLeft   Button = 1
	ButtonMiddle Button = 2
	ButtonRight  Button = 3
	// The wheel is buttons 4–7 in X; use Scroll rather than these.
	buttonWheelUp    Button = 4
	buttonWheelDown  Button = 5
	buttonWheelLeft  Button = 6
	buttonWheelRight Button = 7
	ButtonBack       Button = 8
	ButtonForward    Button = 9
)

// ParseButton maps "left", "middle", "right", "back", "forward" (the
// pyautogui and xdotool words) to a Button.
func ParseButton(name string) (Button, error) {
	switch name {
	case "left", "1", "":
		return ButtonLeft, nil
	case "middle", "2":
		return ButtonMiddle, nil
	case "right", "3":
		return ButtonRight, nil
	case "back", "8":
		return ButtonBack, nil
	case "forward", "9":
		return ButtonForward, nil
	}
	return 0, fmt.Errorf("%w: unknown mouse button %q (want left, middle, right, back or forward)", ErrInvalidArgument, name)
}

func (b Button) valid() error {
	if b < ButtonLeft || b > ButtonForward {
		return fmt.Errorf("%w: mouse button %d out of range 1–9", ErrInvalidArgument, b)
	}
	return nil
}

// fake sends one XTEST event without waiting; callers sync at the end of
// their sequence.
func (d *Display) fake(typ byte, detail byte, p Point) {
	xtest.FakeInput(d.conn, typ, detail, 0, d.root, int16(p.X), int16(p.Y), 0)
}

func (d *Display) motion(p Point) { d.fake(xproto.MotionNotify, 0, p) }

// Move puts the pointer at p.
func (d *Display) Move(p Point) error {
	if err := d.inScreen(p); err != nil {
		return err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	d.motion(p)
	return d.sync()
}

// Click moves to p and clicks button count times (2 is a double click,
// 3 a triple click: the presses are back to back, well within any
// toolkit's multi-click interval).
func (d *Display) Click(p Point, b Button, count int) error {
	if err := d.inScreen(p); err != nil {
		return err
	}
	if err := b.valid(); err != nil {
		return err
	}
	if count < 1 || count > 3 {
		return fmt.Errorf("%w: click count %d out of range 1–3", ErrInvalidArgument, count)
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	d.motion(p)
	for range count {
		d.fake(xproto.ButtonPress, byte(b), Point{})
		d.fake(xproto.ButtonRelease, byte(b), Point{})
	}
	return d.sync()
}

// Down presses button at p (nil: where the pointer is) and keeps it down.
func (d *Display) Down(p *Point, b Button) error { return d.button(xproto.ButtonPress, p, b) }

// Up releases button at p (nil: where the pointer is).
func (d *Display) Up(p *Point, b Button) error { return d.button(xproto.ButtonRelease, p, b) }

func (d *Display) button(typ byte, p *Point, b Button) error {
	if err := b.valid(); err != nil {
		return err
	}
	if p != nil {
		if err := d.inScreen(*p); err != nil {
			return err
		}
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if p != nil {
		d.motion(*p)
	}
	d.fake(typ, byte(b), Point{})
	return d.sync()
}

// Drag presses button at path[0], moves through the rest of path and
// releases at its last point. Every point is checked before anything is
// sent, so an off-screen point leaves no button pressed.
func (d *Display) Drag(path []Point, b Button) error {
	if len(path) < 2 {
		return fmt.Errorf("%w: a drag needs at least two points, got %d", ErrInvalidArgument, len(path))
	}
	if err := b.valid(); err != nil {
		return err
	}
	for _, p := range path {
		if err := d.inScreen(p); err != nil {
			return err
		}
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	d.motion(path[0])
	d.fake(xproto.ButtonPress, byte(b), Point{})
	// Toolkits start a drag only after they have seen the press; a round
	// trip here keeps the press and the first motion in separate batches.
	if err := d.sync(); err != nil {
		return err
	}
	for _, p := range path[1:] {
		d.motion(p)
	}
	d.fake(xproto.ButtonRelease, byte(b), Point{})
	return d.sync()
}

// Scroll turns the wheel by dy clicks vertically (positive: down, towards
// the end of a document) and dx clicks horizontally (positive: right),
// with the pointer where it is, or at p when p is not nil.
func (d *Display) Scroll(p *Point, dx, dy int) error {
	if p != nil {
		if err := d.inScreen(*p); err != nil {
			return err
		}
	}
	const maxClicks = 1000 // a bound so a typo cannot queue millions of events
	// Not abs(dx) > maxClicks: the absolute value of math.MinInt is itself.
	if dx < -maxClicks || dx > maxClicks || dy < -maxClicks || dy > maxClicks {
		return fmt.Errorf("%w: scroll of (%d,%d) clicks exceeds %d", ErrInvalidArgument, dx, dy, maxClicks)
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if p != nil {
		d.motion(*p)
	}
	wheel := func(n int, neg, pos Button) {
		b := pos
		if n < 0 {
			b, n = neg, -n
		}
		for range n {
			d.fake(xproto.ButtonPress, byte(b), Point{})
			d.fake(xproto.ButtonRelease, byte(b), Point{})
		}
	}
	wheel(dy, buttonWheelUp, buttonWheelDown)
	wheel(dx, buttonWheelLeft, buttonWheelRight)
	return d.sync()
}

// CursorPosition is where the pointer is.
func (d *Display) CursorPosition() (Point, error) {
	r, err := xproto.QueryPointer(d.conn, d.root).Reply()
	if err != nil {
		return Point{}, d.connErr(err)
	}
	return Point{X: int(r.RootX), Y: int(r.RootY)}, nil
}
