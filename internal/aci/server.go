// Package aci serves the agent-computer interface over a WebSocket: one
// session per connection, requests handled in order (a client pipelines
// as many as it likes), replies as text messages or, with an image, as
// binary messages (a 4-byte length, the JSON reply, the image). It drives
// one X display through internal/desktop/x11 and encodes through
// internal/desktop/encode. docs/aci.md is the protocol's reference.
package aci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/a11y"
	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/record"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// Limits of a session.
const (
	// MaxMessage is the largest request accepted; a larger one is
	// answered with too_large, and the session goes on.
	MaxMessage = 1 << 20
	// readLimit lets a too-large message be read (and refused) rather
	// than cut the connection.
	readLimit = 64 << 20
	maxWait   = time.Minute
	maxSteps  = 64
)

// Capabilities the welcome announces.
var Capabilities = []string{"input", "screenshot", "png", "jpeg", "step", "windows", "launch", "not_modified", "cursor", "exec", "files", "screencast", "anthropic", "openai", "record", "accessibility", "frame_probe"}

// Server serves the ACI for one display.
type Server struct {
	D *x11.Display

	mu   sync.Mutex
	apps []*exec.Cmd // launched apps, reaped as they exit
	rec  *record.Recorder
	// A11y reads the accessibility tree (nil: the desktop has none).
	A11y func(ctx context.Context) ([]*a11y.Node, error)
}

// ServeHTTP accepts a WebSocket and serves a session on it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	s.serve(r.Context(), c, r.URL.Query().Get("view_only") == "1")
}

// Serve runs one session until the client goes away.
func (s *Server) Serve(ctx context.Context, c *websocket.Conn) error { return s.serve(ctx, c, false) }

// serve runs a session; a view-only one refuses input (view.go).
func (s *Server) serve(ctx context.Context, c *websocket.Conn, viewOnly bool) error {
	c.SetReadLimit(readLimit)
	w, h := s.D.Size()
	welcome, _ := json.Marshal(api.ACIWelcome{Type: "welcome", Version: api.ACIVersion, Capabilities: Capabilities, Width: w, Height: h,
		Capture: s.D.CaptureMethod(), JPEG: encode.JPEGBackend})
	if err := c.Write(ctx, websocket.MessageText, welcome); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := startReplies(ctx, c, cancel)
	sess := &session{s: s, c: c, ctx: ctx, viewOnly: viewOnly}
	defer func() { sess.stopScreencast(); out.close() }()
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var rep *api.ACIReply
		var img []byte
		if typ == websocket.MessageBinary {
			rep, img = sess.handleBinary(ctx, data)
		} else {
			rep, img = sess.handle(ctx, data, nil)
		}
		r, err := encodeReply(rep, img)
		if err != nil {
			return err
		}
		r.after, sess.afterReply = sess.afterReply, nil
		if err := out.send(r); err != nil {
			return err
		}
	}
}

// session is one connection's state: the buffers it reuses.
type session struct {
	s      *Server
	c      *websocket.Conn
	ctx    context.Context
	buf    *frame.Frame // the last full-size capture, reused
	scaled *frame.Frame // the last scaled one, reused (screenshot_scaled.go)

	viewOnly   bool        // observe only (a view-only viewer's session)
	cast       *screencast // the running screencast (screencast.go)
	afterReply func()      // run once the current reply is written
}

// encodeReply lays out a reply: text, or binary with its image.
func encodeReply(rep *api.ACIReply, img []byte) (reply, error) {
	head, err := json.Marshal(rep)
	if err != nil {
		return reply{}, err
	}
	if img == nil {
		return reply{typ: websocket.MessageText, msg: head}, nil
	}
	return reply{typ: websocket.MessageBinary, msg: api.ACIJoin(head, img)}, nil
}

// handleBinary splits a binary request — a 4-byte big-endian header
// length, the JSON header, then content (write_file's) — and runs it.
func (ss *session) handleBinary(ctx context.Context, data []byte) (*api.ACIReply, []byte) {
	header, content, ok := api.ACISplit(data)
	if !ok {
		return fail(0, api.ACIBadRequest, "binary message: want a 4-byte header length, the JSON header, then the content"), nil
	}
	if len(content) > maxFile {
		return fail(leadingID(header), api.ACITooLarge, fmt.Sprintf("content of %d bytes is over the %d-byte limit", len(content), maxFile)), nil
	}
	return ss.handle(ctx, header, content)
}

// handle decodes and runs one request; content is what followed the
// header of a binary request (nil for a text message).
func (ss *session) handle(ctx context.Context, data, content []byte) (*api.ACIReply, []byte) {
	if len(data) > MaxMessage {
		return fail(leadingID(data), api.ACITooLarge, fmt.Sprintf("message of %d bytes is over the %d-byte limit", len(data), MaxMessage)), nil
	}
	if !utf8.Valid(data) {
		// JSON decoding would quietly turn it into U+FFFD.
		return fail(leadingID(data), api.ACIBadText, "the request is not valid UTF-8"), nil
	}
	var req api.ACIRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if _, tail := dec.Token(); err == nil && tail != io.EOF {
		// Two requests in one message would lose the second without a word.
		return fail(req.ID, api.ACIBadRequest, "malformed request: data after the JSON request; send one request per message"), nil
	}
	if err != nil {
		// Still answer the request's id when it can be read.
		id := leadingID(data)
		if id == 0 {
			var idOnly struct {
				ID uint64 `json:"id"`
			}
			json.Unmarshal(data, &idOnly)
			id = idOnly.ID
		}
		return fail(id, api.ACIBadRequest, "malformed request: "+err.Error()), nil
	}
	rep := &api.ACIReply{ID: req.ID, OK: true}
	if ss.viewOnly && !observeOnly[req.Op] {
		return fail(req.ID, api.ACIForbidden, req.Op+" is refused: this session is view-only"), nil
	}
	if (content != nil) != (req.Op == "write_file") {
		if content != nil {
			return fail(req.ID, api.ACIBadRequest, req.Op+" carries no content: send it as a text message"), nil
		}
		return fail(req.ID, api.ACIBadRequest, "write_file carries its content: send a binary message (4-byte header length, the JSON header, the content; docs/aci.md)"), nil
	}
	switch req.Op {
	case "write_file":
		if err := writeFile(&req, content, rep); err != nil {
			return failErr(req.ID, err), nil
		}
		return rep, nil
	case "read_file":
		data, err := readFile(&req, rep)
		if err != nil {
			return failErr(req.ID, err), nil
		}
		return rep, data
	case "screenshot":
		img, err := ss.screenshot(req.Screenshot, rep)
		if err != nil {
			return failErr(req.ID, err), nil
		}
		return rep, img
	case "step":
		return ss.step(ctx, &req)
	case "screencast_start", "screencast_stop", "screencast_keyframe":
		if err := ss.screencastOp(&req, rep); err != nil {
			return failErr(req.ID, err), nil
		}
		return rep, nil
	case "anthropic", "openai":
		return ss.computerUse(ctx, &req)
	case "record_start", "record_stop":
		return ss.record(ctx, &req)
	case "accessibility":
		if err := ss.accessibility(ctx, &req, rep); err != nil {
			return failErr(req.ID, err), nil
		}
		return rep, nil
	}
	if err := ss.act(ctx, &req, rep); err != nil {
		return failErr(req.ID, err), nil
	}
	return rep, nil
}

// leadingID reads the id of a request too large to decode whole, when it
// comes first ({"id":N,...}, as clients write it); 0 otherwise.
func leadingID(data []byte) uint64 {
	dec := json.NewDecoder(strings.NewReader(string(data[:min(len(data), 64)])))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	if k, err := dec.Token(); err != nil || k != "id" {
		return 0
	}
	var id uint64
	if dec.Decode(&id) != nil {
		return 0
	}
	return id
}

// badRequest is a request the protocol refuses (code bad_request).
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func bad(format string, a ...any) error { return badRequest{fmt.Sprintf(format, a...)} }

// act runs one action or query; step runs its actions through it too.
func (ss *session) act(ctx context.Context, req *api.ACIRequest, rep *api.ACIReply) error {
	d := ss.s.D
	point := func() (x11.Point, error) {
		if req.X == nil || req.Y == nil {
			return x11.Point{}, bad("%s needs x and y", req.Op)
		}
		return x11.Point{X: *req.X, Y: *req.Y}, nil
	}
	optPoint := func() (*x11.Point, error) {
		if req.X == nil && req.Y == nil {
			return nil, nil
		}
		p, err := point()
		return &p, err
	}
	button := func() (x11.Button, error) {
		if req.Button == "" {
			return x11.ButtonLeft, nil
		}
		b, err := x11.ParseButton(req.Button)
		if err != nil {
			return 0, bad("%v", err)
		}
		return b, nil
	}
	switch req.Op {
	case "hello":
		return nil
	case "move":
		p, err := point()
		if err != nil {
			return err
		}
		return d.Move(p)
	case "click":
		p, err := point()
		if err != nil {
			return err
		}
		b, err := button()
		if err != nil {
			return err
		}
		n := req.Count
		if n == 0 {
			n = 1
		}
		return d.Click(p, b, n)
	case "mouse_down", "mouse_up":
		p, err := optPoint()
		if err != nil {
			return err
		}
		b, err := button()
		if err != nil {
			return err
		}
		if req.Op == "mouse_down" {
			return d.Down(p, b)
		}
		return d.Up(p, b)
	case "drag":
		if len(req.Path) < 2 {
			return bad("drag needs a path of at least two points")
		}
		b, err := button()
		if err != nil {
			return err
		}
		path := make([]x11.Point, len(req.Path))
		for i, p := range req.Path {
			path[i] = x11.Point{X: p[0], Y: p[1]}
		}
		return d.Drag(path, b)
	case "scroll":
		p, err := optPoint()
		if err != nil {
			return err
		}
		if req.DX == 0 && req.DY == 0 {
			return bad("scroll needs dx or dy")
		}
		return d.Scroll(p, req.DX, req.DY)
	case "key", "key_down", "key_up":
		if req.Keys == "" {
			return bad("%s needs keys, e.g. \"ctrl+shift+t\"", req.Op)
		}
		switch req.Op {
		case "key_down":
			return d.KeyDown(req.Keys)
		case "key_up":
			return d.KeyUp(req.Keys)
		}
		return d.Key(req.Keys)
	case "type":
		if !utf8.ValidString(req.Text) {
			return fmt.Errorf("%w: text is not valid UTF-8", x11.ErrInvalidText)
		}
		if req.DelayMs < 0 || req.DelayMs > 1000 {
			return bad("delay_ms %d: want 0 to 1000", req.DelayMs)
		}
		return d.Type(req.Text, time.Duration(req.DelayMs)*time.Millisecond)
	case "cursor":
		p, err := d.CursorPosition()
		if err != nil {
			return err
		}
		rep.Cursor = &[2]int{p.X, p.Y}
		return nil
	case "screen":
		rep.Width, rep.Height = d.Size()
		return nil
	case "windows":
		ws, err := d.Windows()
		if err != nil {
			return err
		}
		rep.Windows = windowsOf(ws)
		return nil
	case "focus_window", "close_window":
		if req.Window == 0 {
			return bad("%s needs window, an id from windows", req.Op)
		}
		if req.Op == "focus_window" {
			return d.FocusWindow(req.Window)
		}
		return d.CloseWindow(req.Window)
	case "launch":
		if len(req.Cmd) == 0 || req.Cmd[0] == "" {
			return bad("launch needs cmd, e.g. [\"xterm\"]")
		}
		cmd, err := d.Launch(req.Cmd[0], req.Cmd[1:]...)
		if err != nil {
			return err
		}
		go cmd.Wait()
		rep.Pid = cmd.Process.Pid
		return nil
	case "exec":
		return ss.execCommand(ctx, req, rep)
	case "wait":
		if req.Ms < 0 || req.Ms > int(maxWait.Milliseconds()) { // in ms: a Duration product can wrap
			return bad("wait ms %d: want 0 to %d", req.Ms, maxWait.Milliseconds())
		}
		select {
		case <-time.After(time.Duration(req.Ms) * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	case "":
		return bad("request has no op")
	}
	return bad("unknown op %q (see docs/aci.md)", req.Op)
}

func windowsOf(ws []x11.Window) []api.ACIWindow {
	out := make([]api.ACIWindow, len(ws))
	for i, w := range ws {
		out[i] = api.ACIWindow{ID: w.ID, Title: w.Title, Class: w.Class, Instance: w.Instance, Pid: w.PID,
			X: w.X, Y: w.Y, Width: w.Width, Height: w.Height, Focused: w.Focused}
	}
	return out
}

// screenshot captures, scales and hashes; encodes unless the hash is the
// one the client has.
func (ss *session) screenshot(o *api.ACIScreenshot, rep *api.ACIReply) ([]byte, error) {
	if o == nil {
		o = &api.ACIScreenshot{}
	}
	var region image.Rectangle
	switch len(o.Region) {
	case 0:
	case 4:
		region = image.Rect(o.Region[0], o.Region[1], o.Region[0]+o.Region[2], o.Region[1]+o.Region[3])
		if o.Region[2] <= 0 || o.Region[3] <= 0 {
			return nil, bad("region %v: width and height must be positive", o.Region)
		}
	default:
		return nil, bad("region %v: want [x, y, width, height]", o.Region)
	}
	format := encode.Format(o.Format)
	switch format {
	case "":
		format = encode.FormatPNG
	case encode.FormatPNG, encode.FormatJPEG:
	default:
		return nil, bad("format %q: want png or jpeg", o.Format)
	}
	if o.Quality < 0 || o.Quality > 100 || o.MaxLongEdge < 0 {
		return nil, bad("quality wants 1–100, max_long_edge 0 or more")
	}
	f, err := ss.capture(region, o)
	if err != nil {
		return nil, err
	}
	rep.Width, rep.Height, rep.Format = f.Width, f.Height, string(format)
	if o.IfNoneMatch == "" {
		// Nothing to compare: the hash runs beside the encode, whose
		// bands leave a core idle at their ends.
		hashed := make(chan string, 1)
		go func() { hashed <- f.Hash().String() }()
		img, err := encode.Encode(f, format, o.Quality)
		rep.FrameHash = <-hashed
		if err != nil {
			return nil, err
		}
		rep.Bytes = len(img)
		return img, nil
	}
	hash := f.Hash().String()
	rep.FrameHash = hash
	// "*" matches any frame, as in HTTP: the hash without the image, which
	// a fleet's frame cache may already hold (docs/aci.md).
	if o.IfNoneMatch == api.ACIAnyFrame || o.IfNoneMatch == hash {
		rep.NotModified = true
		return nil, nil
	}
	img, err := encode.Encode(f, format, o.Quality)
	if err != nil {
		return nil, err
	}
	rep.Bytes = len(img)
	return img, nil
}

// step runs the actions in order (each one's failure is its result; the
// next still runs), then observes once.
func (ss *session) step(ctx context.Context, req *api.ACIRequest) (*api.ACIReply, []byte) {
	if len(req.Actions) > maxSteps {
		return fail(req.ID, api.ACIBadRequest, fmt.Sprintf("step has %d actions, over the %d limit", len(req.Actions), maxSteps)), nil
	}
	rep := &api.ACIReply{ID: req.ID, OK: true, Results: make([]api.ACIResult, len(req.Actions))}
	for i := range req.Actions {
		a := &req.Actions[i]
		switch a.Op {
		case "step", "screenshot", "screencast_start", "screencast_stop", "screencast_keyframe":
			rep.Results[i] = api.ACIResult{Status: "error", Error: &api.ACIError{Code: api.ACIBadRequest, Message: a.Op + " cannot be a step action; use observe"}}
			continue
		case "read_file", "write_file", "anthropic", "openai", "record_start", "record_stop":
			rep.Results[i] = api.ACIResult{Status: "error", Error: &api.ACIError{Code: api.ACIBadRequest, Message: a.Op + " cannot be a step action (it answers with content of its own)"}}
			continue
		}
		var scratch api.ACIReply
		if err := ss.act(ctx, a, &scratch); err != nil {
			_, e := wireError(err)
			status := "error"
			if e.Code == api.ACITimeout {
				status = "timeout"
			}
			rep.Results[i] = api.ACIResult{Status: status, Error: e}
			continue
		}
		rep.Results[i] = api.ACIResult{Status: "ok"}
	}
	o := req.Observe
	if o == nil {
		return rep, nil
	}
	if o.SettleMs > 0 {
		quiet := time.Duration(min(o.SettleMs, 1000)) * time.Millisecond
		sctx, cancel := context.WithTimeout(ctx, time.Second+quiet)
		ss.s.D.WaitScreenIdle(sctx, quiet)
		cancel()
	}
	if o.Windows {
		if ws, err := ss.s.D.Windows(); err == nil {
			rep.Windows = windowsOf(ws)
		}
	}
	if o.Cursor {
		if p, err := ss.s.D.CursorPosition(); err == nil {
			rep.Cursor = &[2]int{p.X, p.Y}
		}
	}
	if o.Screenshot != nil {
		img, err := ss.screenshot(o.Screenshot, rep)
		if err != nil {
			_, rep.Error = wireError(err)
			rep.OK = false
		}
		return rep, img
	}
	return rep, nil
}

func fail(id uint64, code, msg string) *api.ACIReply {
	return &api.ACIReply{ID: id, Error: &api.ACIError{Code: code, Message: msg}}
}

func failErr(id uint64, err error) *api.ACIReply {
	_, e := wireError(err)
	return &api.ACIReply{ID: id, Error: e}
}

// wireError maps an error to its ACI code: the one place that does.
func wireError(err error) (string, *api.ACIError) {
	var br badRequest
	code := api.ACIInternal
	switch {
	case errors.As(err, &br):
		code = api.ACIBadRequest
	case errors.Is(err, x11.ErrOffScreen):
		code = api.ACIOffScreen
	case errors.Is(err, x11.ErrUnknownKey):
		code = api.ACIUnknownKey
	case errors.Is(err, x11.ErrInvalidText):
		code = api.ACIBadText
	case errors.Is(err, x11.ErrNoWindow):
		code = api.ACINoWindow
	case errors.Is(err, x11.ErrInvalidArgument):
		code = api.ACIBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		code = api.ACITimeout
	case errors.Is(err, errNotFound):
		code = api.ACINotFound
	case errors.As(err, new(tooLarge)):
		code = api.ACITooLarge
	case errors.As(err, new(unknownAction)):
		code = api.ACIUnknownAction
	}
	return code, &api.ACIError{Code: code, Message: err.Error()}
}
