package aci

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
)

// FuzzMessage sends fuzzed ACI messages, text and binary, through a
// session's decoder and handler on a real (throwaway, per fuzz worker)
// Xvfb. Every message gets one reply that is well-formed and encodes:
// the request's id when it has one, ok without an error or an error with
// a known code and a message; malformed requests are bad_request, never
// internal; the limits the protocol states (wait, scroll, step length)
// are enforced. Requests that would touch the fuzzing host or take long
// are not run: launch, exec, read_file and write_file (host processes and
// files), close_window (it may kill the session's own X client), and
// waits, typing delays and settles beyond a few milliseconds.
func FuzzMessage(f *testing.F) {
	texts := []string{
		`{"id":1,"op":"hello"}`, `{"id":2,"op":"screen"}`, `{"id":3,"op":"cursor"}`, `{"id":4,"op":"windows"}`,
		`{"id":5,"op":"move","x":10,"y":20}`, `{"id":6,"op":"click","x":5,"y":5,"button":"right","count":2}`,
		`{"id":7,"op":"mouse_down","button":"left"}`, `{"id":8,"op":"mouse_up","x":1,"y":1}`,
		`{"id":9,"op":"drag","path":[[1,1],[50,50],[100,60]]}`, `{"id":10,"op":"scroll","dy":3,"dx":-2,"x":40,"y":40}`,
		`{"id":11,"op":"key","keys":"ctrl+shift+t"}`, `{"id":12,"op":"key_down","keys":"shift"}`, `{"id":13,"op":"key_up","keys":"shift"}`,
		`{"id":14,"op":"type","text":"héllo\n東\t"}`, `{"id":15,"op":"wait","ms":1}`,
		`{"id":16,"op":"screenshot","screenshot":{"format":"jpeg","quality":50,"max_long_edge":64,"region":[0,0,32,32],"cursor":true}}`,
		`{"id":17,"op":"screenshot","screenshot":{"if_none_match":"x"}}`,
		`{"id":18,"op":"step","actions":[{"op":"move","x":3,"y":3},{"op":"key","keys":"a"},{"op":"screenshot"}],"observe":{"windows":true,"cursor":true,"screenshot":{"max_long_edge":16}}}`,
		`{"id":19,"op":"focus_window","window":12345}`,
		`{"id":20,"op":"anthropic","input":{"action":"left_click","coordinate":[10,10],"text":"shift"},"scale":[32,24]}`,
		`{"id":21,"op":"anthropic","input":{"action":"zoom","region":[0,0,8,8]}}`,
		`{"id":22,"op":"openai","input":[{"type":"move","x":3,"y":4},{"type":"keypress","keys":["CTRL","A"]}]}`,
		`{"id":23,"op":"openai","input":{"type":"teleport"}}`,
		`{"id":24,"op":"accessibility","filter":"interactive"}`,
		// wrong ones
		`{"id":20,"op":"move","x":-1,"y":0}`, `{"id":22,"op":"key","keys":"ctlr+c"}`,
		`{"id":23,"op":"type","text":"\u0001"}`, `{"id":24,"op":"wait","ms":-1}`,
		`{"id":27,"op":"screenshot","screenshot":{"region":[0,0,0,5]}}`,
		`{"id":28,"op":"screenshot","screenshot":{"format":"gif"}}`, `{"id":29,"op":"bogus"}`, `{"id":30}`, `{"id":31,"op":"move","colour":1}`,
		`{"id":32,"op":"write_file","file":"/tmp/x"}`, `{"id":33,"op":"step","actions":[{"op":"step"},{"op":"read_file"}]}`,
		`{"id":34,"op":"type","text":"a","delay_ms":5000}`, `{"id":35`, `not json`, "\xff\xfe", ``,
	}
	for _, s := range texts {
		f.Add([]byte(s), false)
	}
	for _, m := range [][]byte{
		api.ACIJoin([]byte(`{"id":40,"op":"hello"}`), []byte("content")),
		api.ACIJoin([]byte(`{"id":41,"op":"write_file","file":"rel"}`), []byte("x")),
		{0, 0, 0, 9, '{'}, {0xff, 0xff, 0xff, 0xff}, {},
	} {
		f.Add(m, true)
	}
	display := xvfbtest.Start(f, 160, 120)
	d, err := x11.Connect(display, x11.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	sess := &session{s: &Server{D: d}}
	f.Fuzz(func(t *testing.T, msg []byte, binary bool) {
		header, framed := msg, true
		if binary {
			header, _, framed = api.ACISplit(msg)
		}
		// Read the request as the handler does (its first JSON value; the
		// handler also refuses unknown fields, so what fails here fails
		// there), so that nothing unsafe runs. A binary message whose
		// framing is broken has no request to read.
		var req api.ACIRequest
		decodes := framed && json.NewDecoder(bytes.NewReader(header)).Decode(&req) == nil
		if decodes && !safe(&req) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rep *api.ACIReply
		var img []byte
		if binary {
			rep, img = sess.handleBinary(ctx, msg)
		} else {
			rep, img = sess.handle(ctx, msg, nil)
		}
		if !framed {
			header = nil
		}
		checkReply(t, msg, header, rep, img)
		if !decodes || rep.Error == nil {
			return
		}
		if rep.ID != req.ID && len(header) <= MaxMessage && utf8.Valid(header) {
			t.Fatalf("%q: reply id %d, request id %d", msg, rep.ID, req.ID)
		}
	})
}

// safe says whether a request (with its step actions) may run on the
// fuzzing host, quickly.
func safe(req *api.ACIRequest) bool {
	switch req.Op {
	case "launch", "exec", "read_file", "write_file", "close_window", "record_start", "record_stop":
		return false
	case "anthropic", "openai":
		// Their waits are in the input (up to 100 s).
		if bytes.Contains(req.Input, []byte("wait")) || bytes.Contains(req.Input, []byte("hold")) {
			return false
		}
	case "wait":
		if req.Ms > 5 && req.Ms <= int(maxWait.Milliseconds()) {
			return false
		}
	case "type":
		if req.DelayMs > 0 && req.DelayMs <= 1000 && utf8.RuneCountInString(req.Text)*req.DelayMs > 20 {
			return false
		}
	}
	if len(req.Text) > 512 || len(req.Path) > 256 {
		return false
	}
	if o := req.Observe; o != nil && o.SettleMs > 5 {
		return false
	}
	return !slices.ContainsFunc(req.Actions, func(a api.ACIRequest) bool { return !safe(&a) })
}

// aciCodes are the error codes of docs/aci.md.
var aciCodes = []string{api.ACIBadRequest, api.ACIOffScreen, api.ACIUnknownKey, api.ACIBadText, api.ACINoWindow,
	api.ACINotFound, api.ACITooLarge, api.ACITimeout, api.ACIInternal, api.ACIUnknownAction}

// checkReply fails t when a reply is not one the protocol allows for msg.
// header is msg's request: msg itself, or a binary message's header (nil
// when its framing is broken).
func checkReply(t *testing.T, msg, header []byte, rep *api.ACIReply, img []byte) {
	t.Helper()
	if rep == nil {
		t.Fatalf("%q: no reply", msg)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("%q: the reply does not encode: %v", msg, err)
	}
	errs := []*api.ACIError{rep.Error}
	for _, r := range rep.Results {
		if r.Status != "ok" && r.Error == nil || r.Status == "ok" && r.Error != nil {
			t.Fatalf("%q: step result %+v", msg, r)
		}
		errs = append(errs, r.Error)
	}
	if rep.OK == (rep.Error != nil) && rep.Results == nil {
		t.Fatalf("%q: reply ok=%v with error %+v", msg, rep.OK, rep.Error)
	}
	for _, e := range errs {
		if e == nil {
			continue
		}
		if !slices.Contains(aciCodes, e.Code) || e.Message == "" {
			t.Fatalf("%q: error %+v", msg, e)
		}
		if e.Code == api.ACIInternal {
			t.Fatalf("%q: internal error %q: a bad request must not be the server's failure", msg, e.Message)
		}
	}
	if img != nil && (rep.NotModified || rep.Bytes != len(img) ||
		!bytes.HasPrefix(img, []byte("\x89PNG")) && !bytes.HasPrefix(img, []byte{0xff, 0xd8})) {
		t.Fatalf("%q: reply %+v with %d bytes of image %q...", msg, rep, len(img), img[:min(len(img), 8)])
	}
	// The stated limits, for a request that decodes.
	refused := rep.Error != nil
	dec := json.NewDecoder(bytes.NewReader(header))
	var req api.ACIRequest
	if dec.Decode(&req) != nil {
		return
	}
	if _, err := dec.Token(); err != io.EOF && !refused {
		t.Fatalf("%q: data after the request not refused: %+v", msg, rep)
	}
	switch {
	case req.Op == "wait" && (req.Ms < 0 || req.Ms > int(maxWait.Milliseconds())) && !refused:
		t.Fatalf("%q: wait of %d ms not refused: %+v", msg, req.Ms, rep)
	case req.Op == "step" && len(req.Actions) > maxSteps && !refused:
		t.Fatalf("%q: a step of %d actions not refused", msg, len(req.Actions))
	case req.Op == "scroll" && (req.DX < -1000 || req.DX > 1000 || req.DY < -1000 || req.DY > 1000) && rep.Error == nil:
		t.Fatalf("%q: a scroll of (%d,%d) clicks not refused", msg, req.DX, req.DY)
	}
}

// TestExecTimeoutOverflow: an exec timeout whose nanoseconds do not fit a
// Duration is refused, not wrapped around to a timeout that kills the
// command at once (or never).
func TestExecTimeoutOverflow(t *testing.T) {
	ss := &session{s: &Server{}} // refused before the display is needed
	for _, ms := range []int{-1, int(maxExecTimeout.Milliseconds()) + 1, 9223372036854776, 18446744073709} {
		err := ss.execCommand(context.Background(), &api.ACIRequest{Op: "exec", Cmd: []string{"true"}, TimeoutMs: ms}, &api.ACIReply{})
		if code, _ := wireError(err); err == nil || code != api.ACIBadRequest {
			t.Errorf("timeout_ms %d: got %v, want bad_request", ms, err)
		}
	}
}
