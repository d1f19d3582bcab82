package osworld

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"strings"
)

var zeroRect image.Rectangle

// The routes tine's pyautogui module (python/pyautogui) calls over the
// guest's socket: one call each, with the module's PAUSE and FAILSAFE.

type pyRequest struct {
	Fn       string                     `json:"fn"`
	Args     []json.RawMessage          `json:"args"`
	Kwargs   map[string]json.RawMessage `json:"kwargs"`
	Pause    float64                    `json:"pause"`
	FailSafe bool                       `json:"failsafe"`
}

// pyValue decodes the module's JSON for a Python value: numbers keep
// whether they were ints, {"tween": name} is an easing function.
func pyValue(raw json.RawMessage) (Value, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return fromJSON(v)
}

func fromJSON(v any) (Value, error) {
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case json.Number:
		if n, err := x.Int64(); err == nil && !strings.ContainsAny(string(x), ".eE") {
			return n, nil
		}
		return x.Float64()
	case []any:
		out := make([]Value, len(x))
		for i, e := range x {
			var err error
			if out[i], err = fromJSON(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		if t, ok := x["tween"].(string); ok && len(x) == 1 {
			return Tween(t), nil
		}
	}
	return nil, fmt.Errorf("a %T is not a value pyautogui takes", v)
}

func (s *Server) pyCall(w http.ResponseWriter, r *http.Request) {
	var req pyRequest
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err := json.Unmarshal(body, &req); err != nil {
		reply(w, 400, obj{"error": obj{"type": "PyAutoGUIException", "message": "tine: bad call: " + err.Error()}})
		return
	}
	pos := make([]Value, len(req.Args))
	kw := make(map[string]Value, len(req.Kwargs))
	var err error
	for i, a := range req.Args {
		if pos[i], err = pyValue(a); err != nil {
			break
		}
	}
	for k, a := range req.Kwargs {
		if err != nil {
			break
		}
		kw[k], err = pyValue(a)
	}
	if err == nil {
		err = s.p.Call(r.Context(), State{Pause: req.Pause, FailSafe: req.FailSafe}, req.Fn, pos, kw)
	}
	var pe *PyError
	switch {
	case err == nil:
		reply(w, 200, obj{"ok": true})
	case errors.As(err, &pe):
		reply(w, 200, obj{"error": obj{"type": pe.Type, "message": pe.Message}})
	default:
		reply(w, 200, obj{"error": obj{"type": "PyAutoGUIException", "message": err.Error()}})
	}
}

// pyInfo is what the module asks when it needs the screen: its size, the
// pointer, and, at import, the key names, functions and easings it
// forwards.
func (s *Server) pyInfo(w http.ResponseWriter, r *http.Request) {
	p, err := s.D.CursorPosition()
	if err != nil {
		reply(w, 500, obj{"error": obj{"type": "PyAutoGUIException", "message": err.Error()}})
		return
	}
	wd, ht := s.D.Size()
	info := obj{"size": []int{wd, ht}, "position": []int{p.X, p.Y}}
	if r.URL.Query().Get("all") != "" {
		info["keys"], info["functions"], info["tweens"] = KeyboardKeys(), Functions(), Tweens()
	}
	reply(w, 200, info)
}
