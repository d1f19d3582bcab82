package aci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/guest"
	"github.com/tine-run/tine/internal/require"
)

// guestSocket is the socket of the guest startGuest ran last.
var guestSocket string

// startGuest runs a guest (Xvfb, openbox, apps) for the test and opens an
// ACI session on it.
func startGuest(t *testing.T, apps ...[]string) *client.ACI {
	t.Helper()
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	sock := filepath.Join(t.TempDir(), "aci.sock")
	guestSocket = sock
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan guest.Ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- guest.Run(ctx, guest.Options{Width: 800, Height: 600, Apps: apps, Listen: sock}, func(r guest.Ready) { ready <- r })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case r := <-ready:
		t.Logf("guest ready on %s in %.1f ms", r.Display, r.ReadyMs)
	case err := <-done:
		t.Fatalf("guest: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("guest not ready in 30 s")
	}
	a, err := client.DialGuest(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestSessionBasics(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-bg", "#ff0000", "-geometry", "40x10+0+0"})
	ctx := context.Background()
	if a.Welcome.Version != api.ACIVersion || a.Welcome.Width != 800 || a.Welcome.Height != 600 || a.Welcome.Capture != "framebuffer" {
		t.Fatalf("welcome %+v", a.Welcome)
	}
	ws, err := a.Windows(ctx)
	if err != nil || len(ws) != 1 || ws[0].Class != "XTerm" || !ws[0].Focused {
		t.Fatalf("windows %+v %v: want the one xterm, focused", ws, err)
	}

	// A screenshot: the backdrop where no window is, the xterm's red in it.
	rep, img, err := a.Screenshot(ctx, &api.ACIScreenshot{})
	if err != nil {
		t.Fatal(err)
	}
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil || rep.Width != 800 || rep.Bytes != len(img) {
		t.Fatalf("png %v, reply %+v", err, rep)
	}
	if r, g, b, _ := pic.At(790, 590).RGBA(); r>>8 != 0x2e || g>>8 != 0x34 || b>>8 != 0x40 {
		t.Errorf("backdrop pixel %02x%02x%02x, want 2e3440", r>>8, g>>8, b>>8)
	}
	w := ws[0]
	if r, g, b, _ := pic.At(w.X+w.Width-3, w.Y+w.Height-3).RGBA(); r>>8 != 0xff || g>>8 != 0 || b>>8 != 0 {
		t.Errorf("xterm background pixel %02x%02x%02x, want ff0000", r>>8, g>>8, b>>8)
	}
	// Unchanged screen: not_modified, no image. Then a change: a new hash.
	again, img2, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
	if err != nil || !again.NotModified || len(img2) != 0 {
		t.Fatalf("same screen: %+v, %d bytes, %v", again, len(img2), err)
	}
	if err := a.Type(ctx, "echo changed\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	changed, _, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
	if err != nil || changed.NotModified || changed.FrameHash == rep.FrameHash {
		t.Fatalf("after typing: %+v %v, want a new hash", changed, err)
	}

	// Typed errors, and the session goes on.
	for _, c := range []struct {
		req  api.ACIRequest
		code string
		says string
	}{
		{api.ACIRequest{Op: "click", X: ptr(5000), Y: ptr(10)}, api.ACIOffScreen, ""},
		{api.ACIRequest{Op: "key", Keys: "ctrl+nosuchkey"}, api.ACIUnknownKey, "nosuchkey"},
		{api.ACIRequest{Op: "focus_window", Window: 0x7ffffff}, api.ACINoWindow, ""},
		{api.ACIRequest{Op: "fly"}, api.ACIBadRequest, "fly"},
	} {
		_, _, err := a.Do(ctx, &c.req)
		var ae *client.ACIError
		if !asACI(err, &ae) || ae.Code != c.code || !strings.Contains(ae.Message, c.says) {
			t.Errorf("%+v: got %v, want %s", c.req, err, c.code)
		}
	}

	// What the Go client cannot send: invalid UTF-8, an oversized message.
	raw := rawSession(t, a)
	for _, c := range []struct {
		msg  []byte
		code string
	}{
		{[]byte("{\"id\":7,\"op\":\"type\",\"text\":\"ok\xffno\"}"), api.ACIBadText},
		{append([]byte(`{"id":8,"op":"type","text":"`), bytes.Repeat([]byte("a"), 2<<20)...), api.ACITooLarge},
		{[]byte(`{"id":9,"op":"click","x":1,"y":1,"colour":"red"}`), api.ACIBadRequest},
		{[]byte(`{"id":10,"op":`), api.ACIBadRequest},
	} {
		got := raw(c.msg)
		if got.Error == nil || got.Error.Code != c.code {
			t.Errorf("%.40q: reply %+v, want %s", c.msg, got, c.code)
		}
		if got.ID != leadingIDOf(c.msg) {
			t.Errorf("%.40q: reply id %d, want the request's", c.msg, got.ID)
		}
	}
	if err := a.Move(ctx, 5, 5); err != nil {
		t.Fatalf("the session after bad input: %v", err)
	}

	// step: ok, error, ok, and still the observation.
	rep, img, err = a.Step(ctx, []api.ACIRequest{
		{Op: "move", X: ptr(10), Y: ptr(10)},
		{Op: "key", Keys: "nosuchkey"},
		{Op: "move", X: ptr(20), Y: ptr(20)},
	}, &api.ACIObserve{Screenshot: &api.ACIScreenshot{Format: "jpeg"}, Cursor: true})
	if err != nil || len(rep.Results) != 3 || rep.Results[0].Status != "ok" || rep.Results[1].Status != "error" ||
		rep.Results[1].Error.Code != api.ACIUnknownKey || rep.Results[2].Status != "ok" || len(img) == 0 || *rep.Cursor != [2]int{20, 20} {
		t.Fatalf("step: %+v (%d bytes) %v", rep, len(img), err)
	}
}

func ptr(v int) *int { return &v }

// leadingIDOf is the id the test messages start with, 0 for one cut off
// before it can be read.
func leadingIDOf(msg []byte) uint64 {
	var id uint64
	fmt.Sscanf(string(msg), `{"id":%d`, &id)
	return id
}

// rawSession opens a second session on a's guest that sends bytes as they
// are and returns the text reply.
func rawSession(t *testing.T, a *client.ACI) func([]byte) api.ACIReply {
	c, _, err := websocket.Dial(context.Background(), "ws://guest/aci", &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", guestSocket)
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	c.Read(context.Background()) // the welcome
	return func(msg []byte) api.ACIReply {
		if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var rep api.ACIReply
		json.Unmarshal(b, &rep)
		return rep
	}
}

func asACI(err error, target **client.ACIError) bool {
	e, ok := err.(*client.ACIError)
	if ok {
		*target = e
	}
	return ok
}
