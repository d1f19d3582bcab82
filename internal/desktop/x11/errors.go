package x11

import (
	"errors"
	"fmt"

	"github.com/jezek/xgb/xproto"
)

// Sentinel errors; every typed error below matches one of them with
// errors.Is, so callers (the ACI) map them to error codes in one place.
var (
	ErrOffScreen   = errors.New("off screen")
	ErrUnknownKey  = errors.New("unknown key")
	ErrInvalidText = errors.New("invalid text")
	ErrNoWindow    = errors.New("no such window")
	ErrClosed      = errors.New("display connection closed")
	// ErrInvalidArgument: a count, button or path out of its range.
	ErrInvalidArgument = errors.New("invalid argument")
)

// OffScreenError reports coordinates or a region outside the screen.
type OffScreenError struct {
	What                string // "point" or "region"
	X, Y, Width, Height int    // Width and Height are 0 for a point
	ScreenW, ScreenH    int
}

func (e *OffScreenError) Error() string {
	if e.What == "point" {
		return fmt.Sprintf("point (%d,%d) is off screen (the screen is %dx%d; x must be in [0,%d), y in [0,%d))",
			e.X, e.Y, e.ScreenW, e.ScreenH, e.ScreenW, e.ScreenH)
	}
	return fmt.Sprintf("region %dx%d at (%d,%d) does not lie within the %dx%d screen",
		e.Width, e.Height, e.X, e.Y, e.ScreenW, e.ScreenH)
}

func (e *OffScreenError) Is(target error) bool { return target == ErrOffScreen }

// UnknownKeyError names a key name that no table knows.
type UnknownKeyError struct {
	Name  string // the offending part, e.g. "ctlr"
	Combo string // the whole combo it came from, e.g. "ctlr+c"
}

func (e *UnknownKeyError) Error() string {
	msg := fmt.Sprintf("unknown key %q", e.Name)
	if e.Combo != "" && e.Combo != e.Name {
		msg += fmt.Sprintf(" in %q", e.Combo)
	}
	return msg + " (use X keysym names like Return, ctrl, shift, alt, super, F5, Page_Up, a single character, or U+XXXX)"
}

func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// InvalidTextError reports text that cannot be typed: invalid UTF-8, or a
// control character with no key.
type InvalidTextError struct {
	Offset int  // byte offset of the problem
	Rune   rune // the control character, or utf8.RuneError for bad UTF-8
}

func (e *InvalidTextError) Error() string {
	if e.Rune == 0xFFFD {
		return fmt.Sprintf("text is not valid UTF-8 at byte %d", e.Offset)
	}
	return fmt.Sprintf("text holds control character %U at byte %d, which has no key (only \\n, \\r, \\t, \\b and ESC do)", e.Rune, e.Offset)
}

func (e *InvalidTextError) Is(target error) bool { return target == ErrInvalidText }

// NoWindowError reports an action on a window that does not exist (any
// more).
type NoWindowError struct{ ID uint32 }

func (e *NoWindowError) Error() string {
	return fmt.Sprintf("window 0x%x does not exist (closed?)", e.ID)
}

func (e *NoWindowError) Is(target error) bool { return target == ErrNoWindow }

// windowErr turns the X errors for a vanished window into *NoWindowError.
func windowErr(id xproto.Window, err error) error {
	switch err.(type) {
	case xproto.WindowError, xproto.DrawableError:
		return &NoWindowError{ID: uint32(id)}
	}
	return err
}
