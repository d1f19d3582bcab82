package x11

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jezek/xgb/xproto"
)

// Keysyms that the keyboard code uses by value.
const (
	ksBackSpace xproto.Keysym = 0xff08
	ksTab       xproto.Keysym = 0xff09
	ksReturn    xproto.Keysym = 0xff0d
	ksEscape    xproto.Keysym = 0xff1b
	ksShiftL    xproto.Keysym = 0xffe1
	// maxKeysym: the X protocol keeps a keysym's top three bits zero.
	maxKeysym xproto.Keysym = 0x1fffffff
)

// keyNames maps normalised key names (lower case, without '_', '-' and
// spaces) to keysyms: the X keysym names xdotool takes, pyautogui's names,
// and the usual short forms. Single characters are not here; they map to
// their own keysym (see runeKeysym).
var keyNames = func() map[string]xproto.Keysym {
	m := map[string]xproto.Keysym{
		// modifiers
		"shift": 0xffe1, "shiftl": 0xffe1, "lshift": 0xffe1, "shiftleft": 0xffe1, "shiftr": 0xffe2, "rshift": 0xffe2, "shiftright": 0xffe2,
		"ctrl": 0xffe3, "control": 0xffe3, "ctrll": 0xffe3, "controll": 0xffe3, "lctrl": 0xffe3, "ctrlleft": 0xffe3,
		"ctrlr": 0xffe4, "controlr": 0xffe4, "rctrl": 0xffe4, "ctrlright": 0xffe4,
		"alt": 0xffe9, "altl": 0xffe9, "lalt": 0xffe9, "altleft": 0xffe9, "option": 0xffe9, "altr": 0xffea, "ralt": 0xffea, "altright": 0xffea,
		"meta": 0xffe7, "metal": 0xffe7, "metar": 0xffe8,
		"super": 0xffeb, "superl": 0xffeb, "win": 0xffeb, "winleft": 0xffeb, "windows": 0xffeb, "cmd": 0xffeb, "command": 0xffeb,
		"superr": 0xffec, "winright": 0xffec, "hyper": 0xffed, "hyperl": 0xffed,
		"altgr": 0xfe03, "isolevel3shift": 0xfe03,
		"capslock": 0xffe5, "numlock": 0xff7f, "scrolllock": 0xff14,
		// editing and navigation
		"return": 0xff0d, "enter": 0xff0d, "tab": 0xff09, "space": 0x20, "spacebar": 0x20,
		"backspace": 0xff08, "delete": 0xffff, "del": 0xffff, "escape": 0xff1b, "esc": 0xff1b,
		"insert": 0xff63, "ins": 0xff63, "home": 0xff50, "end": 0xff57, "begin": 0xff58,
		"pageup": 0xff55, "pgup": 0xff55, "prior": 0xff55, "pagedown": 0xff56, "pgdn": 0xff56, "next": 0xff56,
		"left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
		"print": 0xff61, "printscreen": 0xff61, "prtsc": 0xff61, "prtscr": 0xff61, "prntscrn": 0xff61, "sysreq": 0xff15,
		"pause": 0xff13, "break": 0xff6b, "menu": 0xff67, "apps": 0xff67, "find": 0xff68, "help": 0xff6a,
		"select": 0xff60, "execute": 0xff62, "clear": 0xff0b, "linefeed": 0xff0a,
		// keypad
		"kpenter": 0xff8d, "kpmultiply": 0xffaa, "multiply": 0xffaa, "kpadd": 0xffab, "add": 0xffab,
		"kpseparator": 0xffac, "separator": 0xffac, "kpsubtract": 0xffad, "subtract": 0xffad,
		"kpdecimal": 0xffae, "decimal": 0xffae, "kpdivide": 0xffaf, "divide": 0xffaf, "kpequal": 0xffbd,
		// media (XF86 keysyms)
		"volumemute": 0x1008ff12, "xf86audiomute": 0x1008ff12, "volumedown": 0x1008ff11, "xf86audiolowervolume": 0x1008ff11,
		"volumeup": 0x1008ff13, "xf86audioraisevolume": 0x1008ff13, "playpause": 0x1008ff14, "xf86audioplay": 0x1008ff14,
		"stop": 0x1008ff15, "xf86audiostop": 0x1008ff15, "prevtrack": 0x1008ff16, "xf86audioprev": 0x1008ff16,
		"nexttrack": 0x1008ff17, "xf86audionext": 0x1008ff17,
		// ASCII punctuation by X keysym name
		"exclam": '!', "quotedbl": '"', "numbersign": '#', "dollar": '$', "percent": '%', "ampersand": '&',
		"apostrophe": '\'', "quoteright": '\'', "parenleft": '(', "parenright": ')', "asterisk": '*', "plus": '+',
		"comma": ',', "minus": '-', "period": '.', "slash": '/', "colon": ':', "semicolon": ';', "less": '<',
		"equal": '=', "greater": '>', "question": '?', "at": '@', "bracketleft": '[', "backslash": '\\',
		"bracketright": ']', "asciicircum": '^', "underscore": '_', "grave": '`', "quoteleft": '`',
		"braceleft": '{', "bar": '|', "braceright": '}', "asciitilde": '~',
	}
	for i := range 35 {
		m["f"+strconv.Itoa(i+1)] = xproto.Keysym(0xffbe + i)
	}
	for i := range 10 {
		m["kp"+strconv.Itoa(i)] = xproto.Keysym(0xffb0 + i)
		m["num"+strconv.Itoa(i)] = xproto.Keysym(0xffb0 + i)
	}
	return m
}()

func normalizeKeyName(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', ' ':
			return -1
		}
		return r
	}, strings.ToLower(name))
}

// keysymByName resolves one key name: a single character (case matters:
// "T" is shift+t), a name from keyNames (case does not matter), or
// U+XXXX / 0xXXXX for a Unicode character or a raw keysym.
func keysymByName(name string) (xproto.Keysym, bool) {
	if r, size := utf8.DecodeRuneInString(name); size == len(name) && r != utf8.RuneError {
		ks, err := runeKeysym(r, 0)
		return ks, err == nil
	}
	if ks, ok := keyNames[normalizeKeyName(name)]; ok {
		return ks, true
	}
	for _, p := range []struct {
		prefix  string
		unicode bool
	}{{"U+", true}, {"u+", true}, {"0x", false}, {"0X", false}} {
		if hex, ok := strings.CutPrefix(name, p.prefix); ok {
			v, err := strconv.ParseUint(hex, 16, 32)
			if err != nil || v == 0 {
				return 0, false
			}
			if p.unicode {
				ks, err := runeKeysym(rune(v), 0)
				return ks, err == nil && utf8.ValidRune(rune(v))
			}
			return xproto.Keysym(v), v <= uint64(maxKeysym)
		}
	}
	return 0, false
}

// parseCombo splits "ctrl+shift+t" into keysyms, failing on the first
// unknown name. A '+' key is written "plus" or as a trailing "++"
// ("ctrl++").
func parseCombo(combo string) ([]xproto.Keysym, error) {
	if strings.TrimSpace(combo) == "" {
		return nil, &UnknownKeyError{Name: combo, Combo: combo}
	}
	var parts []string
	switch {
	case combo == "+":
		parts = []string{"+"}
	case strings.HasSuffix(combo, "++"):
		parts = append(strings.Split(combo[:len(combo)-2], "+"), "+")
	default:
		parts = strings.Split(combo, "+")
	}
	syms := make([]xproto.Keysym, 0, len(parts))
	for _, p := range parts {
		if p != " " {
			p = strings.TrimSpace(p)
		}
		ks, ok := keysymByName(p)
		if !ok {
			return nil, &UnknownKeyError{Name: p, Combo: combo}
		}
		syms = append(syms, ks)
	}
	return syms, nil
}

// runeKeysym is the keysym that types r: Latin-1 characters are their own
// keysym, the rest of Unicode is 0x01000000+code point (what Xlib and every
// toolkit translate back to the character). A few control characters have
// keys; the others are an error at byte offset off.
func runeKeysym(r rune, off int) (xproto.Keysym, error) {
	switch {
	case r == '\n' || r == '\r':
		return ksReturn, nil
	case r == '\t':
		return ksTab, nil
	case r == '\b':
		return ksBackSpace, nil
	case r == 0x1b:
		return ksEscape, nil
	case r < 0x20 || (r >= 0x7f && r < 0xa0):
		return 0, &InvalidTextError{Offset: off, Rune: r}
	case r <= 0xff:
		return xproto.Keysym(r), nil
	}
	return xproto.Keysym(0x01000000 | r), nil
}

// KnownKey says whether Key, KeyDown and KeyUp accept name as one key:
// callers with silent-skip semantics (pyautogui's) test it first.
func KnownKey(name string) bool {
	if name == "+" || name == " " {
		return true
	}
	_, ok := keysymByName(strings.TrimSpace(name))
	return ok && strings.TrimSpace(name) != ""
}
