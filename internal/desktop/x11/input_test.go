package x11_test

import (
	"errors"
	"fmt"
	"image"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/tine-run/tine/internal/desktop/x11"
)

// describe renders input events compactly: "press 1 @(10,20)", "key+ 37".
func describe(evs []xgb.Event) string {
	var parts []string
	for _, ev := range evs {
		switch e := ev.(type) {
		case xproto.ButtonPressEvent:
			parts = append(parts, fmt.Sprintf("press %d @(%d,%d)", e.Detail, e.RootX, e.RootY))
		case xproto.ButtonReleaseEvent:
			parts = append(parts, fmt.Sprintf("release %d @(%d,%d)", e.Detail, e.RootX, e.RootY))
		case xproto.MotionNotifyEvent:
			parts = append(parts, fmt.Sprintf("motion @(%d,%d)", e.RootX, e.RootY))
		case xproto.KeyPressEvent:
			parts = append(parts, fmt.Sprintf("key+ %d", e.Detail))
		case xproto.KeyReleaseEvent:
			parts = append(parts, fmt.Sprintf("key- %d", e.Detail))
		}
	}
	return strings.Join(parts, ", ")
}

// buttons keeps only the press/release events.
func buttons(evs []xgb.Event) string {
	var keep []xgb.Event
	for _, ev := range evs {
		switch ev.(type) {
		case xproto.ButtonPressEvent, xproto.ButtonReleaseEvent:
			keep = append(keep, ev)
		}
	}
	return describe(keep)
}

func TestPointerInput(t *testing.T) {
	d, display := newDisplay(t, false, x11.Options{})
	c := newClient(t, display)
	c.window(t, image.Rect(0, 0, screenW, screenH), 0xffffff)
	at := x11.Point{X: 300, Y: 200}

	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"double click", func() error { return d.Click(at, x11.ButtonLeft, 2) },
			"press 1 @(300,200), release 1 @(300,200), press 1 @(300,200), release 1 @(300,200)"},
		{"right click", func() error { return d.Click(x11.Point{X: 10, Y: 20}, x11.ButtonRight, 1) },
			"press 3 @(10,20), release 3 @(10,20)"},
		{"scroll down 2", func() error { return d.Scroll(nil, 0, 2) },
			"press 5 @(10,20), release 5 @(10,20), press 5 @(10,20), release 5 @(10,20)"},
		{"scroll up and left at a point", func() error { return d.Scroll(&at, -1, -1) },
			"press 4 @(300,200), release 4 @(300,200), press 6 @(300,200), release 6 @(300,200)"},
		{"scroll right", func() error { return d.Scroll(nil, 1, 0) }, "press 7 @(300,200), release 7 @(300,200)"},
		{"down", func() error { return d.Down(&x11.Point{X: 50, Y: 60}, x11.ButtonMiddle) }, "press 2 @(50,60)"},
		{"up", func() error { return d.Up(nil, x11.ButtonMiddle) }, "release 2 @(50,60)"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := buttons(c.inputEvents(t)); got != s.want {
			t.Fatalf("%s: window received %q, want %q", s.name, got, s.want)
		}
	}

	path := []x11.Point{{100, 100}, {150, 120}, {200, 140}, {250, 160}}
	if err := d.Drag(path, x11.ButtonLeft); err != nil {
		t.Fatal(err)
	}
	got := describe(c.inputEvents(t))
	want := "press 1 @(100,100), motion @(150,120), motion @(200,140), motion @(250,160), release 1 @(250,160)"
	if !strings.HasSuffix(got, want) {
		t.Fatalf("drag: window received %q, want it to end with %q", got, want)
	}

	// Input works (above); these are refused before anything is sent.
	for name, do := range map[string]func() error{
		"click off screen":  func() error { return d.Click(x11.Point{X: screenW, Y: 0}, x11.ButtonLeft, 1) },
		"drag off screen":   func() error { return d.Drag([]x11.Point{{10, 10}, {10, -5}}, x11.ButtonLeft) },
		"scroll off screen": func() error { return d.Scroll(&x11.Point{X: 0, Y: screenH}, 0, 1) },
	} {
		if err := do(); !errors.Is(err, x11.ErrOffScreen) {
			t.Errorf("%s: err = %v, want ErrOffScreen", name, err)
		}
	}
	if err := d.Click(at, x11.ButtonLeft, 4); err == nil {
		t.Error("a quadruple click was accepted")
	}
	if evs := c.inputEvents(t); len(evs) != 0 {
		t.Fatalf("refused actions sent input: %s", describe(evs))
	}
}

// keycodes reads the core keyboard mapping: keysym → first keycode, and
// the whole table for comparisons.
func keycodes(t *testing.T, c *client) (map[xproto.Keysym]xproto.Keycode, []xproto.Keysym) {
	t.Helper()
	setup := xproto.Setup(c.conn)
	r, err := xproto.GetKeyboardMapping(c.conn, setup.MinKeycode, byte(setup.MaxKeycode-setup.MinKeycode+1)).Reply()
	if err != nil {
		t.Fatal(err)
	}
	m := map[xproto.Keysym]xproto.Keycode{}
	for i, ks := range r.Keysyms {
		code := xproto.Keycode(int(setup.MinKeycode) + i/int(r.KeysymsPerKeycode))
		if _, seen := m[ks]; !seen && ks != 0 {
			m[ks] = code
		}
	}
	return m, r.Keysyms
}

func TestKeys(t *testing.T) {
	d, display := newDisplay(t, false, x11.Options{})
	c := newClient(t, display)
	w := c.window(t, image.Rect(0, 0, screenW, screenH), 0xffffff)
	xproto.SetInputFocus(c.conn, xproto.InputFocusParent, w, xproto.TimeCurrentTime)
	codes, before := keycodes(t, c)
	code := func(ks xproto.Keysym) string { return fmt.Sprint(codes[ks]) }
	ctrl, shift, alt, tkey := code(0xffe3), code(0xffe1), code(0xffe9), code('t')

	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"combo", func() error { return d.Key("ctrl+shift+t") },
			fmt.Sprintf("key+ %s, key+ %s, key+ %s, key- %s, key- %s, key- %s", ctrl, shift, tkey, tkey, shift, ctrl)},
		{"pyautogui names", func() error { return d.Key("Alt+PgDn") },
			fmt.Sprintf("key+ %s, key+ %s, key- %s, key- %s", alt, code(0xff56), code(0xff56), alt)},
		{"capital adds shift", func() error { return d.Key("T") },
			fmt.Sprintf("key+ %s, key+ %s, key- %s, key- %s", shift, tkey, tkey, shift)},
		{"plus", func() error { return d.Key("ctrl++") }, // '+' is shift+equal on the US layout
			fmt.Sprintf("key+ %s, key+ %s, key+ %s, key- %s, key- %s, key- %s", shift, ctrl, code('='), code('='), ctrl, shift)},
		{"hold", func() error { return d.KeyDown("shift") }, "key+ " + shift},
		{"release", func() error { return d.KeyUp("shift") }, "key- " + shift},
		{"type", func() error { return d.Type("a\tZ\n", 0) },
			fmt.Sprintf("key+ %[1]s, key- %[1]s, key+ %[2]s, key- %[2]s, key+ %[3]s, key+ %[4]s, key- %[4]s, key- %[3]s, key+ %[5]s, key- %[5]s",
				code('a'), code(0xff09), shift, code('z'), code(0xff0d))},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := describe(c.inputEvents(t)); got != s.want {
			t.Fatalf("%s: window received %q, want %q", s.name, got, s.want)
		}
	}

	// Keys work (above), so these refusals are about the input; nothing
	// may be sent for them.
	err := d.Key("ctrl+ctlr+c")
	var unknown *x11.UnknownKeyError
	if !errors.Is(err, x11.ErrUnknownKey) || !errors.As(err, &unknown) || unknown.Name != "ctlr" || !strings.Contains(err.Error(), `"ctlr"`) {
		t.Fatalf("Key(ctrl+ctlr+c): err = %v, want an unknown-key error naming ctlr", err)
	}
	err = d.Type("ok\xffno", 0)
	var bad *x11.InvalidTextError
	if !errors.Is(err, x11.ErrInvalidText) || !errors.As(err, &bad) || bad.Offset != 2 {
		t.Fatalf("Type(invalid UTF-8): err = %v, want InvalidTextError at byte 2", err)
	}
	if err := d.Type("bell\a", 0); !errors.Is(err, x11.ErrInvalidText) {
		t.Fatalf("Type(BEL): err = %v, want ErrInvalidText", err)
	}
	if evs := c.inputEvents(t); len(evs) != 0 {
		t.Fatalf("refused input sent keys: %s", describe(evs))
	}

	// A character the layout lacks goes through a borrowed keycode that
	// Close gives back.
	if _, ok := codes[0x1006771]; ok {
		t.Fatal("the test layout already has 東; pick another character")
	}
	if err := d.Type("東", 0); err != nil {
		t.Fatal(err)
	}
	evs := c.inputEvents(t)
	if len(evs) != 2 {
		t.Fatalf("typing 東 gave %q, want one press and release", describe(evs))
	}
	press := evs[0].(xproto.KeyPressEvent)
	_, during := keycodes(t, c)
	setup := xproto.Setup(c.conn)
	per := len(during) / int(setup.MaxKeycode-setup.MinKeycode+1)
	if ks := during[int(press.Detail-setup.MinKeycode)*per]; ks != 0x1006771 {
		t.Fatalf("keycode %d maps to keysym 0x%x while typing 東, want 0x1006771", press.Detail, ks)
	}
	d.Close()
	if _, after := keycodes(t, c); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("the keyboard mapping differs after Close from before typing")
	}
}

func TestClosedDisplay(t *testing.T) {
	d, _ := newDisplay(t, false, x11.Options{})
	if err := d.Move(x11.Point{X: 1, Y: 1}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	done := make(chan error, 1)
	go func() { done <- d.Move(x11.Point{X: 2, Y: 2}) }()
	select {
	case err := <-done:
		if !errors.Is(err, x11.ErrClosed) {
			t.Fatalf("Move on a closed display: err = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Move on a closed display hangs")
	}
}
