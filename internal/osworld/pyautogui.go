package osworld

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/internal/desktop/x11"
)

// pyautogui's public mouse and keyboard calls, run natively on a display
// with pyautogui 0.9.54's semantics on X11: int() on coordinates, the
// pointer clamped to the screen (the X server does that to pyautogui's
// fake motion), PAUSE after each call, FAILSAFE's corner check, its key
// names, silently skipping a key it has no mapping for, wheel clicks as
// buttons 4–7, tweened moves with its step rule. The fast path (fast.go)
// calls these for statements it parsed; tine's pyautogui module for a real
// python3 (python/pyautogui) sends each call here over the guest's socket,
// so both paths share one implementation.

// A Value is a Python value a call takes: nil (None), bool, int64,
// float64, string, []Value (a list or tuple) or Tween.
type Value = any

// Tween names one of pyautogui's easing functions (pyautogui.linear,
// pyautogui.easeInQuad, …).
type Tween string

// PyError is an exception the call raises in Python: Type is the class
// name tine's module raises (TypeError, ValueError, PyAutoGUIException,
// FailSafeException).
type PyError struct {
	Type, Message string
}

func (e *PyError) Error() string { return e.Type + ": " + e.Message }

func pyErr(typ, format string, a ...any) error {
	return &PyError{Type: typ, Message: fmt.Sprintf(format, a...)}
}

// pyautogui's timing constants (seconds).
const (
	minimumDuration = 0.1
	minimumSleep    = 0.05
	defaultPause    = 0.1
)

// State is the module state a call sees: pyautogui.PAUSE and
// pyautogui.FAILSAFE.
type State struct {
	Pause    float64
	FailSafe bool
}

// DefaultState is pyautogui's state after import.
var DefaultState = State{Pause: defaultPause, FailSafe: true}

// PyAutoGUI runs calls on a display.
type PyAutoGUI struct {
	D *x11.Display
}

// A call is a bound pyautogui call, ready to run: binding checks every
// argument the way pyautogui would before it sends anything.
type call struct {
	name  string
	pause bool // pyautogui pauses after it (time.sleep does not)
	run   func(ctx context.Context, p *PyAutoGUI) error
}

type signature struct {
	params   []string
	defaults map[string]Value // absent: required
	variadic bool             // hotkey(*args, **kwargs)
	bind     func(a args) (func(ctx context.Context, p *PyAutoGUI) error, error)
}

// args are a call's bound arguments by name; variadic ones in rest.
type args struct {
	fn   string
	v    map[string]Value
	rest []Value
}

const notGiven = "\x00required"

var pointerParams = []string{"x", "y"}

func sig(params string, defaults map[string]Value, bind func(a args) (func(context.Context, *PyAutoGUI) error, error)) signature {
	return signature{params: strings.Fields(params), defaults: defaults, bind: bind}
}

// signatures are pyautogui 0.9.54's, parameter for parameter (logScreenshot
// is accepted and ignored; _pause=False skips the PAUSE).
var signatures map[string]signature

func init() {
	d := func(kv ...any) map[string]Value {
		m := map[string]Value{"logScreenshot": nil, "_pause": true}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	clickDefaults := func(button string) map[string]Value {
		return d("x", nil, "y", nil, "clicks", int64(1), "interval", 0.0, "button", button, "duration", 0.0, "tween", Tween("linear"))
	}
	fixedClick := func(button string, clicks int64) func(a args) (func(context.Context, *PyAutoGUI) error, error) {
		return func(a args) (func(context.Context, *PyAutoGUI) error, error) {
			if button != "" {
				a.v["button"] = button
			}
			a.v["clicks"] = clicks
			return bindClick(a)
		}
	}
	signatures = map[string]signature{
		"moveTo":      sig("x y duration tween logScreenshot _pause", d("x", nil, "y", nil, "duration", 0.0, "tween", Tween("linear")), bindMove(false, false)),
		"moveRel":     sig("xOffset yOffset duration tween logScreenshot _pause", d("xOffset", nil, "yOffset", nil, "duration", 0.0, "tween", Tween("linear")), bindMove(true, false)),
		"dragTo":      sig("x y duration tween button logScreenshot _pause mouseDownUp", d("x", nil, "y", nil, "duration", 0.0, "tween", Tween("linear"), "button", "primary", "mouseDownUp", true), bindMove(false, true)),
		"dragRel":     sig("xOffset yOffset duration tween button logScreenshot _pause mouseDownUp", d("xOffset", int64(0), "yOffset", int64(0), "duration", 0.0, "tween", Tween("linear"), "button", "primary", "mouseDownUp", true), bindMove(true, true)),
		"click":       sig("x y clicks interval button duration tween logScreenshot _pause", clickDefaults("primary"), bindClick),
		"leftClick":   sig("x y interval duration tween logScreenshot _pause", clickDefaults("left"), fixedClick("left", 1)),
		"rightClick":  sig("x y interval duration tween logScreenshot _pause", clickDefaults("right"), fixedClick("right", 1)),
		"middleClick": sig("x y interval duration tween logScreenshot _pause", clickDefaults("middle"), fixedClick("middle", 1)),
		"doubleClick": sig("x y interval button duration tween logScreenshot _pause", clickDefaults("left"), fixedClick("", 2)),
		"tripleClick": sig("x y interval button duration tween logScreenshot _pause", clickDefaults("left"), fixedClick("", 3)),
		"mouseDown":   sig("x y button duration tween logScreenshot _pause", d("x", nil, "y", nil, "button", "primary", "duration", 0.0, "tween", Tween("linear")), bindButton(true)),
		"mouseUp":     sig("x y button duration tween logScreenshot _pause", d("x", nil, "y", nil, "button", "primary", "duration", 0.0, "tween", Tween("linear")), bindButton(false)),
		"scroll":      sig("clicks x y logScreenshot _pause", d("x", nil, "y", nil), bindScroll(false)),
		"vscroll":     sig("clicks x y logScreenshot _pause", d("x", nil, "y", nil), bindScroll(false)),
		"hscroll":     sig("clicks x y logScreenshot _pause", d("x", nil, "y", nil), bindScroll(true)),
		"typewrite":   sig("message interval logScreenshot _pause", d("interval", 0.0), bindTypewrite),
		"press":       sig("keys presses interval logScreenshot _pause", d("presses", int64(1), "interval", 0.0), bindPress),
		"keyDown":     sig("key logScreenshot _pause", d(), bindKey(true)),
		"keyUp":       sig("key logScreenshot _pause", d(), bindKey(false)),
		"hotkey":      {variadic: true, params: []string{"interval", "logScreenshot", "_pause"}, defaults: d("interval", 0.0), bind: bindHotkey},
	}
	// pyautogui's aliases.
	signatures["move"] = signatures["moveRel"]
	signatures["drag"] = signatures["dragRel"]
	signatures["write"] = signatures["typewrite"]
}

// Functions are the names Call takes.
func Functions() []string {
	names := make([]string, 0, len(signatures))
	for n := range signatures {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// bindCall binds a call's arguments the way Python would and checks them
// the way pyautogui does: a mistake is an error before anything runs.
func bindCall(name string, pos []Value, kw map[string]Value) (*call, error) {
	s, ok := signatures[name]
	if !ok {
		return nil, pyErr("AttributeError", "module 'pyautogui' has no attribute %q that tine runs", name)
	}
	a := args{fn: name, v: map[string]Value{}}
	if s.variadic {
		a.rest = pos
	} else {
		if len(pos) > len(s.params) {
			return nil, pyErr("TypeError", "%s() takes at most %d positional arguments (%d given)", name, len(s.params), len(pos))
		}
		for i, v := range pos {
			a.v[s.params[i]] = v
		}
	}
	for k, v := range kw {
		if !slices.Contains(s.params, k) {
			return nil, pyErr("TypeError", "%s() got an unexpected keyword argument %q", name, k)
		}
		if _, dup := a.v[k]; dup {
			return nil, pyErr("TypeError", "%s() got multiple values for argument %q", name, k)
		}
		a.v[k] = v
	}
	for _, p := range s.params {
		if _, ok := a.v[p]; ok {
			continue
		}
		def, ok := s.defaults[p]
		if !ok {
			return nil, pyErr("TypeError", "%s() missing 1 required positional argument: %q", name, p)
		}
		a.v[p] = def
	}
	run, err := s.bind(a)
	if err != nil {
		return nil, err
	}
	pause, _ := a.v["_pause"].(bool)
	return &call{name: name, pause: pause, run: run}, nil
}

// Call binds and runs one call, then pauses st.Pause as pyautogui does
// (before it, FAILSAFE's corner check).
func (p *PyAutoGUI) Call(ctx context.Context, st State, name string, pos []Value, kw map[string]Value) error {
	c, err := bindCall(name, pos, kw)
	if err != nil {
		return err
	}
	return p.run(ctx, st, c, true)
}

func (p *PyAutoGUI) run(ctx context.Context, st State, c *call, pauseAfter bool) error {
	if st.FailSafe {
		if err := p.failSafeCheck(); err != nil {
			return err
		}
	}
	if err := c.run(ctx, p); err != nil {
		return err
	}
	if pauseAfter && c.pause && st.Pause > 0 {
		return sleep(ctx, st.Pause)
	}
	return nil
}

// failSafeCheck raises pyautogui's FailSafeException when the pointer is
// in a corner of the screen.
func (p *PyAutoGUI) failSafeCheck() error {
	pos, err := p.D.CursorPosition()
	if err != nil {
		return err
	}
	w, h := p.D.Size()
	if (pos.X == 0 || pos.X == w-1) && (pos.Y == 0 || pos.Y == h-1) {
		return pyErr("FailSafeException", "PyAutoGUI fail-safe triggered from mouse moving to a corner of the screen. To disable this fail-safe, set pyautogui.FAILSAFE to False. DISABLING FAIL-SAFE IS NOT RECOMMENDED.")
	}
	return nil
}

// sleep waits secs; every loop of a call sleeps between its steps, so a
// call of a billion presses still ends with its request (the check is
// made for a zero sleep too).
func sleep(ctx context.Context, secs float64) error {
	if secs <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Python's int() and float() of the values a call takes.

func pyInt(fn, what string, v Value) (int, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case int64:
		return clampInt(float64(x)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, pyErr("ValueError", "cannot convert float %v to integer", x)
		}
		return clampInt(math.Trunc(x)), nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, pyErr("ValueError", "invalid literal for int() with base 10: %q", x)
		}
		return clampInt(float64(n)), nil
	}
	return 0, pyErr("TypeError", "%s(): %s must be a number, not %s", fn, what, typeName(v))
}

// clampInt keeps huge Python ints within what X coordinates can mean.
func clampInt(f float64) int { return int(max(-1<<30, min(1<<30, f))) }

func pyFloat(fn, what string, v Value) (float64, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case int64:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, pyErr("TypeError", "%s(): %s must be a number, not %s", fn, what, typeName(v))
}

func typeName(v Value) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []Value:
		return "list"
	case Tween:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

// button is pyautogui's _normalizeButton on Linux.
func button(fn string, v Value) (x11.Button, error) {
	switch b := v.(type) {
	case string:
		switch b {
		case "left", "primary":
			return x11.ButtonLeft, nil
		case "middle":
			return x11.ButtonMiddle, nil
		case "right", "secondary":
			return x11.ButtonRight, nil
		}
	case int64:
		switch b {
		case 1:
			return x11.ButtonLeft, nil
		case 2:
			return x11.ButtonMiddle, nil
		case 3:
			return x11.ButtonRight, nil
		}
	}
	return 0, pyErr("PyAutoGUIException", "button argument must be one of ('left', 'middle', 'right', 'primary', 'secondary', 1, 2, 3), not %s", pyRepr(v))
}

func pyRepr(v Value) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return "'" + x + "'"
	}
	return fmt.Sprint(v)
}

// target is where a call points: nil coordinates are the pointer's
// (resolved when it runs), as pyautogui's _normalizeXYArgs.
type target struct {
	x, y *int
}

func optInt(fn, what string, v Value) (*int, error) {
	if v == nil {
		return nil, nil
	}
	n, err := pyInt(fn, what, v)
	return &n, err
}

// xyArgs reads x and y: numbers, None, or a sequence (x, y) in x, or a
// box (left, top, width, height) whose centre is meant.
func xyArgs(fn string, xv, yv Value) (target, error) {
	if seq, ok := xv.([]Value); ok {
		if yv != nil {
			return target{}, pyErr("PyAutoGUIException", "%s(): when passing a sequence for the x argument, the y argument must not be passed (received %s)", fn, pyRepr(yv))
		}
		switch len(seq) {
		case 2:
			return xyArgs(fn, seq[0], seq[1])
		case 4:
			l, err1 := pyInt(fn, "left", seq[0])
			t, err2 := pyInt(fn, "top", seq[1])
			w, err3 := pyInt(fn, "width", seq[2])
			h, err4 := pyInt(fn, "height", seq[3])
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return target{}, err
			}
			cx, cy := l+w/2, t+h/2
			return target{&cx, &cy}, nil
		}
		return target{}, pyErr("PyAutoGUIException", "%s(): the x argument must be a two-integer tuple (x, y) or a four-integer box, not %d items", fn, len(seq))
	}
	if _, ok := xv.(string); ok {
		return target{}, pyErr("PyAutoGUIException", "%s(): locating an image on the screen (x=%s) is not supported by tine's pyautogui", fn, pyRepr(xv))
	}
	x, err := optInt(fn, "x", xv)
	if err != nil {
		return target{}, err
	}
	y, err := optInt(fn, "y", yv)
	return target{x, y}, err
}

// resolve fills in the pointer's position for missing coordinates.
func (t target) resolve(p *PyAutoGUI) (x11.Point, error) {
	pos := x11.Point{}
	if t.x == nil || t.y == nil {
		cur, err := p.D.CursorPosition()
		if err != nil {
			return pos, err
		}
		pos = cur
	}
	if t.x != nil {
		pos.X = *t.x
	}
	if t.y != nil {
		pos.Y = *t.y
	}
	return pos, nil
}

// onScreen is where t points, clamped to the screen as the X server
// clamps a motion.
func (t target) onScreen(p *PyAutoGUI) (x11.Point, error) {
	dest, err := t.resolve(p)
	return p.clamp(dest), err
}

// clamp is what the X server does to a motion off the screen.
func (p *PyAutoGUI) clamp(pt x11.Point) x11.Point {
	w, h := p.D.Size()
	return x11.Point{X: max(0, min(w-1, pt.X)), Y: max(0, min(h-1, pt.Y))}
}

// tweens are pytweening's curves that pyautogui re-exports (Penner's
// public easing formulas; a tween only shapes the path between the start
// and the end of a move). OSWorld's computer_13 moves pick one of
// easeInQuad, easeOutQuad, easeInOutQuad, easeInBounce, easeInElastic.
var tweens = map[Tween]func(float64) float64{
	"linear":         func(n float64) float64 { return n },
	"easeInQuad":     func(n float64) float64 { return n * n },
	"easeOutQuad":    func(n float64) float64 { return -n * (n - 2) },
	"easeInOutQuad":  easeInOutQuad,
	"easeInCubic":    func(n float64) float64 { return n * n * n },
	"easeOutCubic":   func(n float64) float64 { n--; return n*n*n + 1 },
	"easeInOutCubic": easeInOutCubic,
	"easeInSine":     func(n float64) float64 { return -math.Cos(n*math.Pi/2) + 1 },
	"easeOutSine":    func(n float64) float64 { return math.Sin(n * math.Pi / 2) },
	"easeInOutSine":  func(n float64) float64 { return -0.5 * (math.Cos(math.Pi*n) - 1) },
	"easeInQuart":    func(n float64) float64 { return n * n * n * n },
	"easeOutQuart":   func(n float64) float64 { n--; return -(n*n*n*n - 1) },
	"easeInOutQuart": func(n float64) float64 { return inOut(n, func(n float64) float64 { return n * n * n * n }) },
	"easeInQuint":    func(n float64) float64 { return n * n * n * n * n },
	"easeOutQuint":   func(n float64) float64 { n--; return n*n*n*n*n + 1 },
	"easeInOutQuint": func(n float64) float64 { return inOut(n, func(n float64) float64 { return n * n * n * n * n }) },
	"easeInExpo":     easeInExpo,
	"easeOutExpo":    func(n float64) float64 { return 1 - easeInExpo(1-n) },
	"easeInOutExpo":  func(n float64) float64 { return inOut(n, easeInExpo) },
	"easeInCirc":     easeInCirc,
	"easeOutCirc":    func(n float64) float64 { return 1 - easeInCirc(1-n) },
	"easeInOutCirc":  func(n float64) float64 { return inOut(n, easeInCirc) },
	"easeInBack":     easeInBack,
	"easeOutBack":    func(n float64) float64 { return 1 - easeInBack(1-n) },
	"easeInOutBack":  func(n float64) float64 { return inOut(n, easeInBack) },
	"easeInBounce":   func(n float64) float64 { return 1 - easeOutBounce(1-n) },
	"easeOutBounce":  easeOutBounce,
	"easeInOutBounce": func(n float64) float64 {
		return inOut(n, func(n float64) float64 { return 1 - easeOutBounce(1-n) })
	},
	"easeInElastic":    easeInElastic,
	"easeOutElastic":   func(n float64) float64 { return 1 - easeInElastic(1-n) },
	"easeInOutElastic": func(n float64) float64 { return inOut(n, easeInElastic) },
}

// inOut makes an ease-in-out curve of an ease-in one: the first half eased
// in, the second its mirror.
func inOut(n float64, in func(float64) float64) float64 {
	if n < 0.5 {
		return in(2*n) / 2
	}
	return 1 - in(2-2*n)/2
}

func easeInExpo(n float64) float64 {
	if n == 0 {
		return 0
	}
	return math.Pow(2, 10*(n-1))
}

func easeInCirc(n float64) float64 { return 1 - math.Sqrt(1-n*n) }

func easeInBack(n float64) float64 {
	const s = 1.70158
	return n * n * ((s+1)*n - s)
}

func easeOutBounce(n float64) float64 {
	switch {
	case n < 1/2.75:
		return 7.5625 * n * n
	case n < 2/2.75:
		n -= 1.5 / 2.75
		return 7.5625*n*n + 0.75
	case n < 2.5/2.75:
		n -= 2.25 / 2.75
		return 7.5625*n*n + 0.9375
	}
	n -= 2.625 / 2.75
	return 7.5625*n*n + 0.984375
}

// easeInElastic with pytweening's defaults (amplitude 1, period 0.3).
func easeInElastic(n float64) float64 {
	const period = 0.3
	s := period / 4
	n--
	return -math.Pow(2, 10*n) * math.Sin((n-s)*2*math.Pi/period)
}

func easeInOutQuad(n float64) float64 {
	if n < 0.5 {
		return 2 * n * n
	}
	n = n*2 - 1
	return -0.5 * (n*(n-2) - 1)
}

func easeInOutCubic(n float64) float64 {
	n *= 2
	if n < 1 {
		return 0.5 * n * n * n
	}
	n -= 2
	return 0.5 * (n*n*n + 2)
}

// Tweens are the easing names pyautogui exports that tine knows.
func Tweens() []string {
	names := make([]string, 0, len(tweens))
	for n := range tweens {
		names = append(names, string(n))
	}
	slices.Sort(names)
	return names
}

func tweenArg(fn string, v Value) (func(float64) float64, error) {
	if v == nil {
		return tweens["linear"], nil
	}
	if t, ok := v.(Tween); ok {
		if f, ok := tweens[t]; ok {
			return f, nil
		}
	}
	return nil, pyErr("PyAutoGUIException", "%s(): tween %s is not one of tine's pyautogui easing functions (%s)", fn, pyRepr(v), strings.Join(Tweens(), ", "))
}

// glide moves the pointer to dest the way pyautogui's _mouseMoveDrag
// does: at once for a duration up to 0.1 s, else in steps along the tween,
// at least 0.05 s apart.
func (p *PyAutoGUI) glide(ctx context.Context, dest x11.Point, duration float64, tween func(float64) float64) error {
	steps := []x11.Point{dest}
	var pause float64
	if duration > minimumDuration {
		start, err := p.D.CursorPosition()
		if err != nil {
			return err
		}
		w, h := p.D.Size()
		n := max(w, h)
		pause = duration / float64(n)
		if pause < minimumSleep {
			n = int(duration / minimumSleep)
			pause = duration / float64(n)
		}
		steps = steps[:0]
		for i := range n {
			t := tween(float64(i) / float64(n))
			steps = append(steps, x11.Point{
				X: int(math.RoundToEven(float64(start.X) + float64(dest.X-start.X)*t)),
				Y: int(math.RoundToEven(float64(start.Y) + float64(dest.Y-start.Y)*t)),
			})
		}
		steps = append(steps, dest)
	}
	for _, s := range steps {
		if len(steps) > 1 {
			if err := sleep(ctx, pause); err != nil {
				return err
			}
		}
		if err := p.D.Move(p.clamp(s)); err != nil {
			return err
		}
	}
	return nil
}

// bindMove is moveTo/moveRel/dragTo/dragRel.
func bindMove(relative, drag bool) func(a args) (func(context.Context, *PyAutoGUI) error, error) {
	return func(a args) (func(context.Context, *PyAutoGUI) error, error) {
		duration, err := pyFloat(a.fn, "duration", a.v["duration"])
		if err != nil {
			return nil, err
		}
		tween, err := tweenArg(a.fn, a.v["tween"])
		if err != nil {
			return nil, err
		}
		var b x11.Button
		downUp := false
		if drag {
			if b, err = button(a.fn, a.v["button"]); err != nil {
				return nil, err
			}
			downUp, _ = a.v["mouseDownUp"].(bool)
		}
		var to target
		var dx, dy int
		if relative {
			xo, yo := a.v["xOffset"], a.v["yOffset"]
			if seq, ok := xo.([]Value); ok && len(seq) == 2 {
				xo, yo = seq[0], seq[1]
			}
			if xo != nil {
				if dx, err = pyInt(a.fn, "xOffset", xo); err != nil {
					return nil, err
				}
			}
			if yo != nil {
				if dy, err = pyInt(a.fn, "yOffset", yo); err != nil {
					return nil, err
				}
			}
		} else if to, err = xyArgs(a.fn, a.v["x"], a.v["y"]); err != nil {
			return nil, err
		}
		return func(ctx context.Context, p *PyAutoGUI) error {
			if !relative && to.x == nil && to.y == nil && !drag {
				return nil // pyautogui moves nowhere
			}
			dest, err := to.resolve(p)
			if err != nil {
				return err
			}
			dest.X += dx
			dest.Y += dy
			if downUp {
				if err := p.D.Down(nil, b); err != nil {
					return err
				}
			}
			if err := p.glide(ctx, dest, duration, tween); err != nil {
				return err
			}
			if downUp {
				return p.D.Up(nil, b)
			}
			return nil
		}, nil
	}
}

func bindClick(a args) (func(context.Context, *PyAutoGUI) error, error) {
	b, err := button(a.fn, a.v["button"])
	if err != nil {
		return nil, err
	}
	to, err := xyArgs(a.fn, a.v["x"], a.v["y"])
	if err != nil {
		return nil, err
	}
	clicks, err := pyInt(a.fn, "clicks", a.v["clicks"])
	if err != nil {
		return nil, err
	}
	interval, err := pyFloat(a.fn, "interval", a.v["interval"])
	if err != nil {
		return nil, err
	}
	duration, err := pyFloat(a.fn, "duration", a.v["duration"])
	if err != nil {
		return nil, err
	}
	tween, err := tweenArg(a.fn, a.v["tween"])
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, p *PyAutoGUI) error {
		dest, err := to.onScreen(p)
		if err != nil {
			return err
		}
		// Click puts the pointer at dest itself, with the same motion
		// event: a move first would only cost another round trip to the
		// X server. A glide (or no click at all) moves first.
		if clicks < 1 || duration > minimumDuration {
			if err := p.glide(ctx, dest, duration, tween); err != nil {
				return err
			}
		}
		for range clicks {
			if err := p.D.Click(dest, b, 1); err != nil {
				return err
			}
			if err := sleep(ctx, interval); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func bindButton(down bool) func(a args) (func(context.Context, *PyAutoGUI) error, error) {
	return func(a args) (func(context.Context, *PyAutoGUI) error, error) {
		b, err := button(a.fn, a.v["button"])
		if err != nil {
			return nil, err
		}
		to, err := xyArgs(a.fn, a.v["x"], a.v["y"])
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, p *PyAutoGUI) error {
			dest, err := to.onScreen(p)
			if err != nil {
				return err
			}
			if down {
				return p.D.Down(&dest, b)
			}
			return p.D.Up(&dest, b)
		}, nil
	}
}

func bindScroll(horizontal bool) func(a args) (func(context.Context, *PyAutoGUI) error, error) {
	return func(a args) (func(context.Context, *PyAutoGUI) error, error) {
		clicks, err := pyInt(a.fn, "clicks", a.v["clicks"])
		if err != nil {
			return nil, err
		}
		to, err := xyArgs(a.fn, a.v["x"], a.v["y"])
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, p *PyAutoGUI) error {
			dest, err := to.onScreen(p)
			if err != nil {
				return err
			}
			// Positive clicks are up (button 4) and, for hscroll, right
			// (button 7), as pyautogui's X11 backend sends them.
			for clicks != 0 {
				n := max(-1000, min(1000, clicks))
				clicks -= n
				dx, dy := 0, -n
				if horizontal {
					dx, dy = n, 0
				}
				if err := p.D.Scroll(&dest, dx, dy); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
}

// keyboardKeys is pyautogui.KEYBOARD_KEYS: the names press, keyDown,
// keyUp, hotkey and typewrite act on (a name not in it, or one the X
// keymap cannot resolve, is skipped without a word, as pyautogui does).
var keyboardKeys = func() []string {
	keys := []string{"\t", "\n", "\r"}
	for c := ' '; c <= '~'; c++ {
		if c < 'A' || c > 'Z' {
			keys = append(keys, string(c))
		}
	}
	keys = append(keys, strings.Fields(`accept add alt altleft altright apps backspace browserback
		browserfavorites browserforward browserhome browserrefresh browsersearch browserstop capslock
		clear convert ctrl ctrlleft ctrlright decimal del delete divide down end enter esc escape
		execute f1 f2 f3 f4 f5 f6 f7 f8 f9 f10 f11 f12 f13 f14 f15 f16 f17 f18 f19 f20 f21 f22 f23 f24
		final fn hanguel hangul hanja help home insert junja kana kanji launchapp1 launchapp2
		launchmail launchmediaselect left modechange multiply nexttrack nonconvert num0 num1 num2
		num3 num4 num5 num6 num7 num8 num9 numlock pagedown pageup pause pgdn pgup playpause
		prevtrack print printscreen prntscrn prtsc prtscr return right scrolllock select separator
		shift shiftleft shiftright sleep space stop subtract tab up volumedown volumemute volumeup
		win winleft winright yen command option optionleft optionright`)...)
	return keys
}()

// KeyboardKeys is pyautogui.KEYBOARD_KEYS.
func KeyboardKeys() []string { return slices.Clone(keyboardKeys) }

// xKey maps a pyautogui key (already lower-cased when longer than one
// character) to the name x11 takes, or "" for one pyautogui skips.
// Upper-case letters are not in KEYBOARD_KEYS but pyautogui's X11 backend
// maps them (shifted).
func xKey(k string) string {
	if !(len(k) == 1 && k[0] >= 'A' && k[0] <= 'Z') && !slices.Contains(keyboardKeys, k) {
		return ""
	}
	switch k {
	case "\n", "\r":
		k = "Return"
	case "\t":
		k = "Tab"
	case " ":
		k = "space"
	case "+":
		k = "plus"
	}
	if !x11.KnownKey(k) {
		return ""
	}
	return k
}

func lowerKey(k string) string {
	if len([]rune(k)) > 1 {
		return strings.ToLower(k)
	}
	return k
}

func keyString(fn string, v Value) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", pyErr("TypeError", "%s(): a key must be a str, not %s", fn, typeName(v))
	}
	return lowerKey(s), nil
}

// isShiftCharacter is pyautogui's: the characters its X11 backend types
// with shift.
func isShiftCharacter(k string) bool {
	return len(k) == 1 && (k[0] >= 'A' && k[0] <= 'Z' || strings.IndexByte(`~!@#$%^&*()_+{}|:"<>?`, k[0]) >= 0)
}

// keyEvent is pyautogui's keyDown/keyUp: a shifted character's keyDown
// presses shift, the key, and releases shift again, leaving only the key
// down.
func (p *PyAutoGUI) keyEvent(k string, down bool) error {
	x := xKey(k)
	switch {
	case x == "":
		return nil
	case down && isShiftCharacter(k):
		if err := p.D.KeyDown("shift+" + x); err != nil {
			return err
		}
		return p.D.KeyUp("shift")
	case down:
		return p.D.KeyDown(x)
	}
	return p.D.KeyUp(x)
}

// tapEach taps keys in order with interval seconds after each
// (typewrite's and press's loop).
func (p *PyAutoGUI) tapEach(ctx context.Context, keys []string, interval float64) error {
	for _, k := range keys {
		if err := p.tap(k); err != nil {
			return err
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
	return nil
}

func (p *PyAutoGUI) tap(k string) error {
	x := xKey(k)
	if x == "" {
		return nil
	}
	return p.D.Key(x)
}

func bindKey(down bool) func(a args) (func(context.Context, *PyAutoGUI) error, error) {
	return func(a args) (func(context.Context, *PyAutoGUI) error, error) {
		k, err := keyString(a.fn, a.v["key"])
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, p *PyAutoGUI) error { return p.keyEvent(k, down) }, nil
	}
}

// keyList reads a str (one key) or a list of keys.
func keyList(fn string, v Value, split bool) ([]string, error) {
	switch x := v.(type) {
	case string:
		if split {
			var keys []string
			for _, r := range x {
				keys = append(keys, string(r))
			}
			return keys, nil
		}
		return []string{lowerKey(x)}, nil
	case []Value:
		keys := make([]string, len(x))
		for i, k := range x {
			s, err := keyString(fn, k)
			if err != nil {
				return nil, err
			}
			keys[i] = s
		}
		return keys, nil
	}
	return nil, pyErr("TypeError", "%s(): want a str or a list of key names, not %s", fn, typeName(v))
}

func bindTypewrite(a args) (func(context.Context, *PyAutoGUI) error, error) {
	keys, err := keyList(a.fn, a.v["message"], true)
	if err != nil {
		return nil, err
	}
	interval, err := pyFloat(a.fn, "interval", a.v["interval"])
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, p *PyAutoGUI) error { return p.tapEach(ctx, keys, interval) }, nil
}

func bindPress(a args) (func(context.Context, *PyAutoGUI) error, error) {
	keys, err := keyList(a.fn, a.v["keys"], false)
	if err != nil {
		return nil, err
	}
	presses, err := pyInt(a.fn, "presses", a.v["presses"])
	if err != nil {
		return nil, err
	}
	interval, err := pyFloat(a.fn, "interval", a.v["interval"])
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, p *PyAutoGUI) error {
		for range presses {
			if err := p.tapEach(ctx, keys, interval); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func bindHotkey(a args) (func(context.Context, *PyAutoGUI) error, error) {
	rest := a.rest
	if len(rest) == 1 {
		if seq, ok := rest[0].([]Value); ok {
			rest = seq
		}
	}
	keys := make([]string, len(rest))
	for i, k := range rest {
		s, err := keyString(a.fn, k)
		if err != nil {
			return nil, err
		}
		keys[i] = s
	}
	interval, err := pyFloat(a.fn, "interval", a.v["interval"])
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, p *PyAutoGUI) error {
		for _, k := range keys {
			if err := p.keyEvent(k, true); err != nil {
				return err
			}
			if err := sleep(ctx, interval); err != nil {
				return err
			}
		}
		for i := len(keys) - 1; i >= 0; i-- {
			if err := p.keyEvent(keys[i], false); err != nil {
				return err
			}
			if err := sleep(ctx, interval); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
