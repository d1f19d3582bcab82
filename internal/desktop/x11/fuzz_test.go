package x11

import (
	"errors"
	"testing"
)

// FuzzParseCombo: a key combo ("ctrl+shift+t", pyautogui's and xdotool's
// names, single characters, U+XXXX, 0xXXXX) is refused with an
// *UnknownKeyError that quotes the combo and names a part of it, or gives
// one X keysym (29 bits, never 0) per key.
func FuzzParseCombo(f *testing.F) {
	for _, s := range []string{
		"ctrl+shift+t", "ctrl + alt + Delete", "ctrl++", "+", "ctrl+plus", "super", "Return", "BackSpace", "Page_Up",
		"KP_5", "XF86AudioRaiseVolume", "enter", "esc", "pgdn", "ctrlleft", "win", "command", "f24", "a", "A", "ä", "東",
		"U+263A", "0xff0d", "alt+F4", "shift+Tab",
		"ctlr", "F99", "U+D800", "U+", "0x", "enterr", "", "ctrl+", "ctrl+ctlr+c", " ", "U+110000", "++", "+++",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, combo string) {
		syms, err := parseCombo(combo)
		if err != nil {
			var u *UnknownKeyError
			if !errors.As(err, &u) || !errors.Is(err, ErrUnknownKey) || u.Combo != combo || err.Error() == "" {
				t.Fatalf("parseCombo(%q): %v, want an *UnknownKeyError for the combo", combo, err)
			}
			return
		}
		if len(syms) == 0 {
			t.Fatalf("parseCombo(%q): no keys and no error", combo)
		}
		for _, ks := range syms {
			if ks == 0 || ks > maxKeysym {
				t.Fatalf("parseCombo(%q) = %#x: keysym %#x is none", combo, syms, ks)
			}
		}
	})
}
