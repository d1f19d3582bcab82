package x11

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// restoreDelay is how long remapped spare keycodes stay mapped after the
// last use. Clients translate a keycode with the mapping they fetch when
// they process it, possibly well after the server did: restoring at once
// would turn a just-typed "東" into nothing in a busy client.
const restoreDelay = time.Second

// keyboard is the core keyboard mapping as far as typing needs it, plus the
// spare keycodes borrowed for characters the layout lacks.
type keyboard struct {
	stale    atomic.Bool // a MappingNotify arrived: reload before use
	min, max xproto.Keycode
	perCode  int
	byKeysym map[xproto.Keysym]keyPos // lowest level wins
	spare    []xproto.Keycode         // keycodes with no keysym at all
	borrowed map[xproto.Keycode]xproto.Keysym
	usedAt   map[xproto.Keycode]time.Time // a borrowed keycode's last use
	held     map[xproto.Keycode]bool      // down through KeyDown, not yet up
	timer    *time.Timer
	lastUse  time.Time // of any borrowed keycode
	closed   bool
}

// keyPos is how to produce a keysym: a keycode, with or without shift.
type keyPos struct {
	code  xproto.Keycode
	shift bool
}

func (k *keyboard) load(conn *xgb.Conn, setup *xproto.SetupInfo) error {
	k.min, k.max = setup.MinKeycode, setup.MaxKeycode
	if k.borrowed == nil {
		k.borrowed, k.held = map[xproto.Keycode]xproto.Keysym{}, map[xproto.Keycode]bool{}
		k.usedAt = map[xproto.Keycode]time.Time{}
	}
	r, err := xproto.GetKeyboardMapping(conn, k.min, byte(int(k.max)-int(k.min)+1)).Reply()
	if err != nil {
		return fmt.Errorf("read the keyboard mapping: %w", err)
	}
	k.perCode = int(r.KeysymsPerKeycode)
	k.byKeysym = map[xproto.Keysym]keyPos{}
	k.spare = k.spare[:0]
	for level := range min(2, k.perCode) { // group 1, unshifted then shifted
		for i := 0; i*k.perCode < len(r.Keysyms); i++ {
			code := xproto.Keycode(int(k.min) + i)
			if _, ours := k.borrowed[code]; ours {
				continue
			}
			ks := r.Keysyms[i*k.perCode+level]
			if _, seen := k.byKeysym[ks]; ks != 0 && !seen {
				k.byKeysym[ks] = keyPos{code: code, shift: level == 1}
			}
		}
	}
	// From the top, as xdotool does: low keycodes are the ones layouts and
	// toolkits treat specially.
	for i := len(r.Keysyms)/k.perCode - 1; i >= 0; i-- {
		code := xproto.Keycode(int(k.min) + i)
		empty := true
		for _, ks := range r.Keysyms[i*k.perCode : (i+1)*k.perCode] {
			empty = empty && ks == 0
		}
		if _, ours := k.borrowed[code]; empty || ours {
			k.spare = append(k.spare, code)
		}
	}
	if _, ok := k.byKeysym[ksShiftL]; !ok {
		return fmt.Errorf("the keyboard mapping has no Shift_L key")
	}
	k.stale.Store(false)
	return nil
}

// refreshKeys reloads the mapping after a MappingNotify (someone, maybe
// this Display, changed it). The caller holds inputMu.
func (d *Display) refreshKeys() error {
	if !d.kb.stale.Load() {
		return nil
	}
	return d.kb.load(d.conn, xproto.Setup(d.conn))
}

// keys resolves keysyms to key positions, borrowing spare keycodes for the
// ones the layout lacks. The caller holds inputMu.
func (d *Display) keys(syms []xproto.Keysym) ([]keyPos, error) {
	if err := d.refreshKeys(); err != nil {
		return nil, err
	}
	out := make([]keyPos, len(syms))
	for i, ks := range syms {
		pos, err := d.keyFor(ks)
		if err != nil {
			return nil, err
		}
		out[i] = pos
	}
	return out, nil
}

func (d *Display) keyFor(ks xproto.Keysym) (keyPos, error) {
	k := &d.kb
	if pos, ok := k.byKeysym[ks]; ok {
		return pos, nil
	}
	for code, b := range k.borrowed {
		if b == ks {
			k.usedAt[code] = time.Now()
			d.keepBorrowed()
			return keyPos{code: code}, nil
		}
	}
	var free xproto.Keycode
	for _, c := range k.spare {
		if _, used := k.borrowed[c]; !used {
			free = c
			break
		}
	}
	if free == 0 {
		// Every spare code holds a character: take the one used longest
		// ago (not held down), and not before restoreDelay after that use —
		// the grace the restore timer gives — so a lagging client still
		// reads the keys typed with it with their mapping; then let the
		// screen settle. (Keys of the same combo resolved before would
		// lose their mapping too: it takes more distinct missing
		// characters than spare keycodes.)
		var oldest xproto.Keycode
		for code := range k.borrowed {
			if !k.held[code] && (oldest == 0 || k.usedAt[code].Before(k.usedAt[oldest])) {
				oldest = code
			}
		}
		if oldest == 0 {
			return keyPos{}, fmt.Errorf("keysym 0x%x is not on the keyboard and no keycode is free to map it", ks)
		}
		if err := d.sync(); err != nil {
			return keyPos{}, err
		}
		if wait := restoreDelay - time.Since(k.usedAt[oldest]); wait > 0 {
			time.Sleep(wait)
		}
		d.settle()
		delete(k.borrowed, oldest)
		free = oldest
	}
	syms := make([]xproto.Keysym, k.perCode)
	syms[0] = ks
	if k.perCode > 1 {
		syms[1] = ks // same with shift held, so a held shift does not matter
	}
	xproto.ChangeKeyboardMapping(d.conn, 1, free, byte(k.perCode), syms)
	k.borrowed[free] = ks
	k.usedAt[free] = time.Now()
	d.keepBorrowed()
	return keyPos{code: free}, nil
}

// settle waits until clients have likely drawn the keys sent so far,
// before a borrowed keycode is remapped (keyFor also waits restoreDelay
// after its last use): the screen unchanged for 100 ms, at most 2 s;
// without DAMAGE, 250 ms.
func (d *Display) settle() {
	if !d.Damage() {
		time.Sleep(250 * time.Millisecond)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d.WaitScreenIdle(ctx, 100*time.Millisecond)
}

// keepBorrowed (re)starts the countdown to restoring borrowed keycodes:
// restoreDelay after their last use.
func (d *Display) keepBorrowed() {
	d.kb.lastUse = time.Now()
	if d.kb.timer == nil {
		d.kb.timer = time.AfterFunc(restoreDelay, d.restoreLater)
	} else {
		d.kb.timer.Reset(restoreDelay)
	}
}

func (d *Display) restoreLater() {
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if d.kb.closed {
		return
	}
	// A timer that fired while typing held the lock is stale: keys typed
	// since then are not a restoreDelay old yet (restoring now lost the
	// last characters of a long text in a client that lagged).
	if wait := restoreDelay - time.Since(d.kb.lastUse); wait > 0 {
		d.kb.timer.Reset(wait)
		return
	}
	for code := range d.kb.held {
		if _, ok := d.kb.borrowed[code]; ok {
			// A borrowed key is held down: its KeyUp must find it mapped.
			d.kb.timer.Reset(restoreDelay)
			return
		}
	}
	d.restoreKeys()
	d.sync()
}

// closeKeys restores the mapping for Close and stops further restores.
// The caller holds inputMu.
func (d *Display) closeKeys() {
	if d.kb.timer != nil {
		d.kb.timer.Stop()
	}
	d.restoreKeys()
	d.sync()
	d.kb.closed = true
}

// restoreKeys gives every borrowed keycode back its empty mapping. The
// caller holds inputMu.
func (d *Display) restoreKeys() {
	if d.kb.closed {
		return
	}
	for code := range d.kb.borrowed {
		xproto.ChangeKeyboardMapping(d.conn, 1, code, byte(d.kb.perCode), make([]xproto.Keysym, d.kb.perCode))
	}
	clear(d.kb.borrowed)
	clear(d.kb.usedAt)
}

// press sends the key event for pos going down or up.
func (d *Display) press(pos keyPos, down bool) {
	typ := byte(xproto.KeyRelease)
	if down {
		typ = xproto.KeyPress
	}
	d.fake(typ, byte(pos.code), Point{})
}

func (d *Display) shiftKey() keyPos { return d.kb.byKeysym[ksShiftL] }

// Key presses a combo such as "ctrl+shift+t", "Return", "alt+F4" or "T"
// (which is shift+t): every key down in order, then up in reverse. Names
// are X keysym names (as xdotool takes them) or pyautogui's; a character
// the layout lacks goes through a temporarily remapped spare keycode.
// Nothing is sent when a name is unknown.
func (d *Display) Key(combo string) error {
	syms, err := parseCombo(combo)
	if err != nil {
		return err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	pos, err := d.keys(syms)
	if err != nil {
		return err
	}
	seq := d.withShift(pos)
	for _, p := range seq {
		d.press(p, true)
	}
	for i := len(seq) - 1; i >= 0; i-- {
		d.press(seq[i], false)
	}
	return d.sync()
}

// withShift puts a shift key first when a key needs shift and the combo
// has none.
func (d *Display) withShift(pos []keyPos) []keyPos {
	shift := d.shiftKey()
	need := false
	for _, p := range pos {
		if p.code == shift.code {
			return pos
		}
		need = need || p.shift
	}
	if !need {
		return pos
	}
	return append([]keyPos{shift}, pos...)
}

// KeyDown presses the keys of combo and leaves them down.
func (d *Display) KeyDown(combo string) error { return d.keyHold(combo, true) }

// KeyUp releases the keys of combo, in reverse order.
func (d *Display) KeyUp(combo string) error { return d.keyHold(combo, false) }

func (d *Display) keyHold(combo string, down bool) error {
	syms, err := parseCombo(combo)
	if err != nil {
		return err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	pos, err := d.keys(syms)
	if err != nil {
		return err
	}
	seq := d.withShift(pos)
	for i := range seq {
		if !down {
			i = len(seq) - 1 - i
		}
		d.press(seq[i], down)
		if down {
			d.kb.held[seq[i].code] = true
		} else {
			delete(d.kb.held, seq[i].code)
		}
	}
	return d.sync()
}

// Type types text: any Unicode, with "\n" as Return and "\t" as Tab.
// Characters missing from the keyboard layout are typed through spare
// keycodes remapped for the moment (restored about a second after the last
// use, and on Close). perKeyDelay > 0 waits that long after each
// character, for applications that drop fast input. The whole text is
// checked first: invalid UTF-8 or an untypable control character fails
// with *InvalidTextError before any key is sent.
func (d *Display) Type(text string, perKeyDelay time.Duration) error {
	syms := make([]xproto.Keysym, 0, len(text))
	for off, r := range text {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(text[off:]); size == 1 {
				return &InvalidTextError{Offset: off, Rune: utf8.RuneError}
			}
		}
		if r == '\n' && off > 0 && text[off-1] == '\r' {
			continue // "\r\n" is one Return
		}
		ks, err := runeKeysym(r, off)
		if err != nil {
			return err
		}
		syms = append(syms, ks)
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if err := d.refreshKeys(); err != nil {
		return err
	}
	shift := d.shiftKey()
	for _, ks := range syms {
		// Resolved one by one: when spare keycodes run out, keyFor
		// recycles them, which must not happen to keys resolved earlier.
		p, err := d.keyFor(ks)
		if err != nil {
			return err
		}
		if p.shift {
			d.press(shift, true)
		}
		d.press(p, true)
		d.press(p, false)
		if p.shift {
			d.press(shift, false)
		}
		if perKeyDelay > 0 {
			if err := d.sync(); err != nil {
				return err
			}
			time.Sleep(perKeyDelay)
		}
	}
	return d.sync()
}
