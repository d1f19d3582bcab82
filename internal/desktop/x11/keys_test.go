package x11

import (
	"errors"
	"slices"
	"testing"

	"github.com/jezek/xgb/xproto"
)

func TestKeyNames(t *testing.T) {
	for name, want := range map[string]xproto.Keysym{
		// xdotool / X keysym names
		"Return": 0xff0d, "BackSpace": 0xff08, "Page_Up": 0xff55, "Next": 0xff56, "Control_L": 0xffe3,
		"Super_L": 0xffeb, "F12": 0xffc9, "KP_5": 0xffb5, "XF86AudioRaiseVolume": 0x1008ff13, "bracketleft": '[',
		// pyautogui names
		"enter": 0xff0d, "esc": 0xff1b, "pgdn": 0xff56, "ctrlleft": 0xffe3, "win": 0xffeb, "command": 0xffeb,
		"printscreen": 0xff61, "volumemute": 0x1008ff12, "num0": 0xffb0, "f24": 0xffd5, "option": 0xffe9,
		// characters, case kept
		"a": 'a', "A": 'A', "ä": 0xe4, "é": 0xe9, "東": 0x1006771, "€": 0x10020ac,
		// code points and raw keysyms
		"U+263A": 0x100263a, "0xff0d": 0xff0d,
	} {
		got, ok := keysymByName(name)
		if !ok || got != want {
			t.Errorf("keysymByName(%q) = 0x%x, %v; want 0x%x", name, got, ok, want)
		}
	}
	for _, bad := range []string{"ctlr", "F99", "U+D800", "U+", "0x", "enterr", ""} {
		if ks, ok := keysymByName(bad); ok {
			t.Errorf("keysymByName(%q) = 0x%x, want unknown", bad, ks)
		}
	}
}

func TestParseCombo(t *testing.T) {
	for combo, want := range map[string][]xproto.Keysym{
		"ctrl+shift+t":        {0xffe3, 0xffe1, 't'},
		"ctrl + alt + Delete": {0xffe3, 0xffe9, 0xffff},
		"ctrl++":              {0xffe3, '+'},
		"+":                   {'+'},
		"ctrl+plus":           {0xffe3, '+'},
		"super":               {0xffeb},
	} {
		got, err := parseCombo(combo)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCombo(%q) = %x, %v; want %x", combo, got, err, want)
		}
	}
	for combo, name := range map[string]string{"ctrl+ctlr+c": "ctlr", "ctrl+": "", "": ""} {
		_, err := parseCombo(combo)
		var u *UnknownKeyError
		if !errors.As(err, &u) || u.Name != name || !errors.Is(err, ErrUnknownKey) {
			t.Errorf("parseCombo(%q): err = %v, want an unknown key %q", combo, err, name)
		}
	}
}
