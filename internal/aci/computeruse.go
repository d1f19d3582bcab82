package aci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"math"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// Computer-use tool actions as the providers' models emit them, run on the
// display: Anthropic's computer tool (computer_20250124, computer_20251124
// with zoom) and OpenAI's computer_call actions. Each answers with what
// the tool loop sends back next: the screenshot (at the model's scale),
// or, for Anthropic's cursor_position, the text. Coordinates are in the
// model's screen (req.Scale), mapped back to the real one here, so an
// agent can show the model the 1024×768 or 1280×800 screen the providers
// recommend.

const (
	maxHold     = 100 * time.Second // Anthropic's hold_key and wait limit
	openAIWait  = time.Second       // OpenAI's wait carries no duration
	settleQuiet = 50 * time.Millisecond
	// scrollPixelsPerClick turns OpenAI's scroll_x/scroll_y (pixels) into
	// wheel clicks, about what one click scrolls in GTK and Chromium.
	scrollPixelsPerClick = 100
)

// unknownAction is an action type the guest does not know.
type unknownAction struct{ msg string }

func (e unknownAction) Error() string { return e.msg }

// scaler maps the model's coordinates to the screen's.
type scaler struct{ sw, sh, mw, mh int }

func (ss *session) scaler(req *api.ACIRequest) (scaler, error) {
	w, h := ss.s.D.Size()
	sc := scaler{w, h, w, h}
	if req.Scale != nil {
		sc.mw, sc.mh = req.Scale[0], req.Scale[1]
		if sc.mw < 16 || sc.mh < 16 || sc.mw > w || sc.mh > h {
			return sc, bad("scale %dx%d: want a size from 16x16 up to the screen's %dx%d", sc.mw, sc.mh, w, h)
		}
		// A screenshot keeps the screen's aspect; the providers' own
		// scaling picks a target within 2 % of it.
		if r := float64(sc.mw*h) / float64(sc.mh*w); r < 0.98 || r > 1.02 {
			return sc, bad("scale %dx%d has not the screen's aspect (%dx%d): pick a size within 2 %% of it, as the providers' scaling does", sc.mw, sc.mh, w, h)
		}
	}
	return sc, nil
}

func (sc scaler) point(x, y float64) (x11.Point, error) {
	if x < 0 || y < 0 || x >= float64(sc.mw) || y >= float64(sc.mh) {
		return x11.Point{}, &x11.OffScreenError{What: "point", X: int(x), Y: int(y), ScreenW: sc.mw, ScreenH: sc.mh}
	}
	return x11.Point{
		X: min(sc.sw-1, int(math.Round(x*float64(sc.sw)/float64(sc.mw)))),
		Y: min(sc.sh-1, int(math.Round(y*float64(sc.sh)/float64(sc.mh)))),
	}, nil
}

func (sc scaler) model(p x11.Point) [2]int {
	return [2]int{int(math.Round(float64(p.X) * float64(sc.mw) / float64(sc.sw))), int(math.Round(float64(p.Y) * float64(sc.mh) / float64(sc.sh)))}
}

// computerUse runs an anthropic or openai request.
func (ss *session) computerUse(ctx context.Context, req *api.ACIRequest) (*api.ACIReply, []byte) {
	rep := &api.ACIReply{ID: req.ID, OK: true}
	sc, err := ss.scaler(req)
	if err != nil {
		return failErr(req.ID, err), nil
	}
	if len(bytes.TrimSpace(req.Input)) == 0 {
		return failErr(req.ID, bad("%s needs input: the tool call's action as the model emitted it", req.Op)), nil
	}
	var shot *api.ACIScreenshot
	if req.Op == "anthropic" {
		shot, err = ss.anthropic(ctx, sc, req.Input, rep)
	} else {
		shot, err = ss.openai(ctx, sc, req.Input)
	}
	if err != nil {
		return failErr(req.ID, err), nil
	}
	if shot == nil {
		return rep, nil
	}
	o := api.ACIScreenshot{}
	if req.Screenshot != nil {
		o = *req.Screenshot // format, quality, cursor
	}
	o.Region, o.MaxLongEdge, o.IfNoneMatch = shot.Region, shot.MaxLongEdge, ""
	if len(o.Region) == 0 {
		// The action's effect should be in the picture: wait until the
		// screen has been quiet a moment (at most a second).
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		ss.s.D.WaitScreenIdle(sctx, settleQuiet)
		cancel()
	}
	img, err := ss.screenshot(&o, rep)
	if err != nil {
		return failErr(req.ID, err), nil
	}
	return rep, img
}

// fullShot is a screenshot at the model's scale.
func (sc scaler) fullShot() *api.ACIScreenshot {
	s := &api.ACIScreenshot{}
	if sc.mw != sc.sw || sc.mh != sc.sh {
		s.MaxLongEdge = max(sc.mw, sc.mh)
	}
	return s
}

// holding runs fn with the modifier combos held down (empty: none).
func (ss *session) holding(mods []string, fn func() error) error {
	d := ss.s.D
	var held []string
	defer func() {
		for i := len(held) - 1; i >= 0; i-- {
			d.KeyUp(held[i])
		}
	}()
	for _, m := range mods {
		if m = strings.TrimSpace(m); m == "" {
			continue
		}
		if err := d.KeyDown(m); err != nil {
			return err
		}
		held = append(held, m)
	}
	return fn()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

type anthropicInput struct {
	Action          string      `json:"action"`
	Coordinate      *[2]float64 `json:"coordinate"`
	StartCoordinate *[2]float64 `json:"start_coordinate"`
	Text            string      `json:"text"`
	Key             string      `json:"key"` // the reference demo reads click modifiers here
	ScrollDirection string      `json:"scroll_direction"`
	ScrollAmount    *int        `json:"scroll_amount"`
	Duration        *float64    `json:"duration"`
	Region          *[4]float64 `json:"region"`
}

// anthropic runs one computer tool input; the screenshot to answer with,
// or nil when the answer is text.
func (ss *session) anthropic(ctx context.Context, sc scaler, raw json.RawMessage, rep *api.ACIReply) (*api.ACIScreenshot, error) {
	var in anthropicInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, bad("anthropic input: %v", err)
	}
	d := ss.s.D
	at := func(c *[2]float64, what string) (*x11.Point, error) {
		if c == nil {
			return nil, nil
		}
		p, err := sc.point(c[0], c[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return &p, nil
	}
	need := func(c *[2]float64, what string) (x11.Point, error) {
		if c == nil {
			return x11.Point{}, bad("anthropic %s needs %s", in.Action, what)
		}
		p, err := at(c, what)
		if err != nil {
			return x11.Point{}, err
		}
		return *p, nil
	}
	mods := in.Text
	if mods == "" {
		mods = in.Key
	}
	seconds := func(limit time.Duration) (time.Duration, error) {
		if in.Duration == nil || *in.Duration < 0 || *in.Duration > limit.Seconds() {
			return 0, bad("anthropic %s needs duration, 0 to %g seconds", in.Action, limit.Seconds())
		}
		return time.Duration(*in.Duration * float64(time.Second)), nil
	}
	switch in.Action {
	case "screenshot":
	case "key":
		if strings.TrimSpace(in.Text) == "" {
			return nil, bad("anthropic key needs text, e.g. \"ctrl+s\" or \"Return\"")
		}
		// xdotool key takes several combos separated by spaces.
		for _, combo := range strings.Fields(in.Text) {
			if err := d.Key(combo); err != nil {
				return nil, err
			}
		}
	case "hold_key":
		dur, err := seconds(maxHold)
		if err != nil {
			return nil, err
		}
		if err := d.KeyDown(in.Text); err != nil {
			return nil, err
		}
		sleepCtx(ctx, dur)
		if err := d.KeyUp(in.Text); err != nil {
			return nil, err
		}
	case "type":
		if err := d.Type(in.Text, 0); err != nil {
			return nil, err
		}
	case "cursor_position":
		p, err := d.CursorPosition()
		if err != nil {
			return nil, err
		}
		m := sc.model(p)
		rep.Cursor = &m
		rep.Output = fmt.Sprintf("X=%d,Y=%d", m[0], m[1])
		return nil, nil
	case "mouse_move":
		p, err := need(in.Coordinate, "coordinate")
		if err != nil {
			return nil, err
		}
		if err := d.Move(p); err != nil {
			return nil, err
		}
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		p, err := at(in.Coordinate, "coordinate")
		if err != nil {
			return nil, err
		}
		if p == nil {
			cur, err := d.CursorPosition()
			if err != nil {
				return nil, err
			}
			p = &cur
		}
		b, n := x11.ButtonLeft, 1
		switch in.Action {
		case "right_click":
			b = x11.ButtonRight
		case "middle_click":
			b = x11.ButtonMiddle
		case "double_click":
			n = 2
		case "triple_click":
			n = 3
		}
		if err := ss.holding([]string{mods}, func() error { return d.Click(*p, b, n) }); err != nil {
			return nil, err
		}
	case "left_click_drag":
		from, err := need(in.StartCoordinate, "start_coordinate")
		if err != nil {
			return nil, err
		}
		to, err := need(in.Coordinate, "coordinate")
		if err != nil {
			return nil, err
		}
		if err := d.Drag([]x11.Point{from, to}, x11.ButtonLeft); err != nil {
			return nil, err
		}
	case "left_mouse_down", "left_mouse_up":
		p, err := at(in.Coordinate, "coordinate")
		if err != nil {
			return nil, err
		}
		if in.Action == "left_mouse_down" {
			err = d.Down(p, x11.ButtonLeft)
		} else {
			err = d.Up(p, x11.ButtonLeft)
		}
		if err != nil {
			return nil, err
		}
	case "scroll":
		p, err := at(in.Coordinate, "coordinate")
		if err != nil {
			return nil, err
		}
		n := 3
		if in.ScrollAmount != nil {
			n = *in.ScrollAmount
		}
		if n < 0 || n > 1000 {
			return nil, bad("anthropic scroll_amount %d: want 0 to 1000 wheel clicks", n)
		}
		var dx, dy int
		switch in.ScrollDirection {
		case "up":
			dy = -n
		case "down":
			dy = n
		case "left":
			dx = -n
		case "right":
			dx = n
		default:
			return nil, bad("anthropic scroll_direction %q: want up, down, left or right", in.ScrollDirection)
		}
		if n > 0 {
			if err := ss.holding([]string{mods}, func() error { return d.Scroll(p, dx, dy) }); err != nil {
				return nil, err
			}
		}
	case "wait":
		dur, err := seconds(maxHold)
		if err != nil {
			return nil, err
		}
		sleepCtx(ctx, dur)
	case "zoom":
		if in.Region == nil {
			return nil, bad("anthropic zoom needs region [x1, y1, x2, y2]")
		}
		r := *in.Region
		p0, err := sc.point(r[0], r[1])
		if err != nil {
			return nil, fmt.Errorf("region: %w", err)
		}
		if r[2] <= r[0] || r[3] <= r[1] || r[2] > float64(sc.mw) || r[3] > float64(sc.mh) {
			return nil, bad("zoom region %v: want x1 < x2 and y1 < y2 within the %dx%d screen", r, sc.mw, sc.mh)
		}
		// (x2, y2) is the region's far edge.
		rect := image.Rect(p0.X, p0.Y,
			min(sc.sw, int(math.Round(r[2]*float64(sc.sw)/float64(sc.mw)))),
			min(sc.sh, int(math.Round(r[3]*float64(sc.sh)/float64(sc.mh)))))
		// Full resolution: the screen's own pixels of the region.
		return &api.ACIScreenshot{Region: []int{rect.Min.X, rect.Min.Y, rect.Dx(), rect.Dy()}}, nil
	case "":
		return nil, bad("anthropic input has no action")
	default:
		return nil, unknownAction{fmt.Sprintf("unknown anthropic computer action %q (want key, hold_key, type, cursor_position, mouse_move, left_click, right_click, middle_click, double_click, triple_click, left_click_drag, left_mouse_down, left_mouse_up, scroll, wait, screenshot, zoom)", in.Action)}
	}
	return sc.fullShot(), nil
}

type openaiPoint struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

type openaiAction struct {
	Type    string        `json:"type"`
	Button  string        `json:"button"`
	X       *float64      `json:"x"`
	Y       *float64      `json:"y"`
	Keys    []string      `json:"keys"`
	Path    []openaiPoint `json:"path"`
	ScrollX float64       `json:"scroll_x"`
	ScrollY float64       `json:"scroll_y"`
	Text    string        `json:"text"`
}

// openai runs a computer_call's action, a batch of them (an array), or a
// whole computer_call ({action} or {actions}); one screenshot after.
func (ss *session) openai(ctx context.Context, sc scaler, raw json.RawMessage) (*api.ACIScreenshot, error) {
	var actions []openaiAction
	trimmed := bytes.TrimSpace(raw)
	if trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &actions); err != nil {
			return nil, bad("openai actions: %v", err)
		}
	} else {
		var call struct {
			openaiAction
			Action  *openaiAction  `json:"action"`
			Actions []openaiAction `json:"actions"`
		}
		if err := json.Unmarshal(trimmed, &call); err != nil {
			return nil, bad("openai action: %v", err)
		}
		switch {
		case len(call.Actions) > 0:
			actions = call.Actions
		case call.Action != nil:
			actions = []openaiAction{*call.Action}
		default:
			actions = []openaiAction{call.openaiAction}
		}
	}
	if len(actions) > maxSteps {
		return nil, bad("openai batch of %d actions is over the %d limit", len(actions), maxSteps)
	}
	for i := range actions {
		if err := ss.openaiAction(ctx, sc, &actions[i]); err != nil {
			if len(actions) > 1 {
				return nil, fmt.Errorf("action %d (%s): %w", i, actions[i].Type, err)
			}
			return nil, err
		}
	}
	return sc.fullShot(), nil
}

// openaiKey maps an OpenAI key name (the browser's: "CTRL", "ARROWDOWN",
// "CMD") to the guest's.
func openaiKey(k string) string {
	switch l := strings.ToLower(k); l {
	case "arrowdown", "arrowup", "arrowleft", "arrowright":
		return strings.TrimPrefix(l, "arrow")
	case "cmd", "command", "meta", "os":
		return "super"
	case "option":
		return "alt"
	case "+":
		return "plus"
	default:
		if len(k) == 1 {
			return k
		}
		return l
	}
}

func (ss *session) openaiAction(ctx context.Context, sc scaler, a *openaiAction) error {
	d := ss.s.D
	xy := func() (x11.Point, error) {
		if a.X == nil || a.Y == nil {
			return x11.Point{}, bad("openai %s needs x and y", a.Type)
		}
		return sc.point(*a.X, *a.Y)
	}
	mods := make([]string, len(a.Keys))
	for i, k := range a.Keys {
		mods[i] = openaiKey(k)
	}
	switch a.Type {
	case "screenshot":
		return nil
	case "click", "double_click":
		p, err := xy()
		if err != nil {
			return err
		}
		b, n := x11.ButtonLeft, 1
		if a.Type == "double_click" {
			n = 2
		} else {
			switch a.Button {
			case "", "left":
			case "right":
				b = x11.ButtonRight
			case "wheel", "middle":
				b = x11.ButtonMiddle
			case "back":
				b = x11.ButtonBack
			case "forward":
				b = x11.ButtonForward
			default:
				return bad("openai click button %q: want left, right, wheel, back or forward", a.Button)
			}
		}
		return ss.holding(mods, func() error { return d.Click(p, b, n) })
	case "drag":
		if len(a.Path) < 2 {
			return bad("openai drag needs a path of at least two points")
		}
		path := make([]x11.Point, len(a.Path))
		for i, q := range a.Path {
			p, err := sc.point(q.X, q.Y)
			if err != nil {
				return err
			}
			path[i] = p
		}
		return ss.holding(mods, func() error { return d.Drag(path, x11.ButtonLeft) })
	case "keypress":
		if len(a.Keys) == 0 {
			return bad("openai keypress needs keys")
		}
		return d.Key(strings.Join(mods, "+"))
	case "move":
		p, err := xy()
		if err != nil {
			return err
		}
		return ss.holding(mods, func() error { return d.Move(p) })
	case "scroll":
		p, err := xy()
		if err != nil {
			return err
		}
		clicks := func(px float64) int {
			if px == 0 {
				return 0
			}
			n := int(math.Round(px / scrollPixelsPerClick))
			if n == 0 {
				n = int(math.Copysign(1, px))
			}
			return max(-1000, min(1000, n))
		}
		dx, dy := clicks(a.ScrollX), clicks(a.ScrollY)
		if dx == 0 && dy == 0 {
			return d.Move(p)
		}
		return ss.holding(mods, func() error { return d.Scroll(&p, dx, dy) })
	case "type":
		return d.Type(a.Text, 0)
	case "wait":
		sleepCtx(ctx, openAIWait)
		return nil
	case "":
		return bad("openai action has no type")
	}
	return unknownAction{fmt.Sprintf("unknown openai computer action %q (want click, double_click, drag, keypress, move, scroll, type, wait, screenshot)", a.Type)}
}
