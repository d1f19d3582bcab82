package aci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/frame"
)

// One desktop for every screencast case: an xterm to type into.
func TestScreencast(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-geometry", "60x12+20+20"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("RefusesBadOptions", func(t *testing.T) {
		for _, o := range []api.ACIScreencast{{FPS: 1000}, {Format: "gif"}, {Quality: 101}, {MaxLongEdge: -1}, {KeyframeIntervalMs: 5}} {
			_, err := a.StartScreencast(ctx, &o)
			var ae *client.ACIError
			if !errors.As(err, &ae) || ae.Code != api.ACIBadRequest {
				t.Errorf("%+v: %v, want bad_request", o, err)
			}
		}
		for _, op := range []string{"screencast_stop", "screencast_keyframe"} {
			_, _, err := a.Do(ctx, &api.ACIRequest{Op: op})
			var ae *client.ACIError
			if !errors.As(err, &ae) || ae.Code != api.ACIBadRequest {
				t.Errorf("%s without a screencast: %v, want bad_request", op, err)
			}
		}
	})

	t.Run("DeltaPNGCompositesToTheScreenshot", func(t *testing.T) {
		s, err := a.StartScreencast(ctx, &api.ACIScreencast{FPS: 30, Delta: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "screencast_start"}); err == nil {
			t.Error("a second screencast on the session was accepted")
		}
		h, _, err := s.Next(ctx)
		if err != nil || h.Seq != 1 || h.Kind != "key" || len(h.Rects) != 1 || h.Rects[0].W != 800 {
			t.Fatalf("first message %+v, %v: want keyframe 1 of the whole screen", h, err)
		}
		keyBytes := h.Rects[0].Bytes
		// Type while the stream runs, one key at a time.
		// Type while the stream runs, ~12 keys a second.
		if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "type", Text: "echo streaming works\n", DelayMs: 80}); err != nil {
			t.Fatal(err)
		}
		shot := quietScreenshot(ctx, t, a, &api.ACIScreenshot{})
		seq, deltas, deltaBytes := h.Seq, 0, 0
		var pic *image.RGBA
		for h.FrameHash != shot.FrameHash {
			if h, pic, err = s.Next(ctx); err != nil {
				t.Fatalf("after message %d: %v", seq, err)
			}
			if h.Seq != seq+1 {
				t.Fatalf("message %d after %d: a gap", h.Seq, seq)
			}
			seq = h.Seq
			if h.Kind == "delta" {
				deltas++
				for _, r := range h.Rects {
					deltaBytes += r.Bytes
				}
			}
		}
		if deltas == 0 {
			t.Fatal("typing came as no delta at all")
		}
		t.Logf("keyframe %d B; %d deltas, %d B on average", keyBytes, deltas, deltaBytes/deltas)
		if deltaBytes/deltas >= keyBytes/4 {
			t.Errorf("deltas average %d B against a %d B keyframe: not deltas", deltaBytes/deltas, keyBytes)
		}
		samePixels(t, pic, shot.png)

		// A still screen sends nothing; a keyframe comes on request.
		if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "wait", Ms: 400}); err != nil {
			t.Fatal(err)
		}
		quiet, qcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		h2, _, err := s.Next(quiet)
		qcancel()
		if err == nil {
			t.Fatalf("a still screen sent message %+v", h2)
		}
		if err := s.Keyframe(ctx); err != nil {
			t.Fatal(err)
		}
		if h, pic, err = s.Next(ctx); err != nil || h.Kind != "key" || h.Seq != seq+1 || h.FrameHash != shot.FrameHash {
			t.Fatalf("after asking for a keyframe: %+v %v", h, err)
		}
		samePixels(t, pic, shot.png)
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if h, _, err := s.Next(ctx); err == nil {
			t.Fatalf("a message after stop: %+v", h)
		}
	})

	// A scaled screenshot reads the framebuffer through the scaler; it is
	// the full screenshot scaled, exactly (region too).
	t.Run("ScaledScreenshotIsTheFullOneScaled", func(t *testing.T) {
		for _, region := range [][]int{nil, {10, 20, 333, 222}} {
			full := quietScreenshot(ctx, t, a, &api.ACIScreenshot{Region: region})
			rep, img, err := a.Screenshot(ctx, &api.ACIScreenshot{Region: region, MaxLongEdge: 200})
			if err != nil {
				t.Fatal(err)
			}
			want := frame.FromImage(full.png).Downscale(200)
			if rep.Width != want.Width || rep.Height != want.Height || rep.FrameHash != want.Hash().String() {
				t.Fatalf("region %v: scaled %dx%d %s, the full one scaled %dx%d %s", region, rep.Width, rep.Height, rep.FrameHash,
					want.Width, want.Height, want.Hash())
			}
			if _, err := png.Decode(bytes.NewReader(img)); err != nil {
				t.Fatal(err)
			}
		}
	})

	// Polling (the baseline, and what a server without DAMAGE gets) and
	// a scaled JPEG stream with the cursor drawn in: the guest's picture
	// hashes as the screenshot with the same options does, and the
	// composite is that picture, exactly (PNG) or nearly (JPEG).
	for _, c := range []struct {
		name string
		o    api.ACIScreencast
		shot api.ACIScreenshot
	}{
		{"PollPNG", api.ACIScreencast{FPS: 30, Delta: true, Poll: true}, api.ACIScreenshot{}},
		{"ScaledJPEGWithCursor", api.ACIScreencast{FPS: 30, Delta: true, Format: "jpeg", MaxLongEdge: 640, Cursor: true},
			api.ACIScreenshot{MaxLongEdge: 640, Cursor: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := a.StartScreencast(ctx, &c.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop(ctx)
			if _, _, err := s.Next(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Move(ctx, 300, 200); err != nil {
				t.Fatal(err)
			}
			if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "type", Text: "ls\n", DelayMs: 50}); err != nil {
				t.Fatal(err)
			}
			want := quietScreenshot(ctx, t, a, &c.shot)
			var h *api.ACIFrame
			var pic *image.RGBA
			for h == nil || h.FrameHash != want.FrameHash {
				if h, pic, err = s.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if pic.Rect.Dx() != want.Width || pic.Rect.Dy() != want.Height {
				t.Fatalf("composited %v, screenshot %dx%d", pic.Rect, want.Width, want.Height)
			}
			if c.o.Format != "jpeg" {
				samePixels(t, pic, want.png)
				return
			}
			var diff, n float64
			for y := range pic.Rect.Dy() {
				for x := range pic.Rect.Dx() {
					r, g, b, _ := want.png.At(x, y).RGBA()
					p := pic.RGBAAt(x, y)
					diff += abs(float64(p.R)-float64(r>>8)) + abs(float64(p.G)-float64(g>>8)) + abs(float64(p.B)-float64(b>>8))
					n += 3
				}
			}
			if diff/n > 4 {
				t.Fatalf("JPEG composite is off by %.1f levels on average", diff/n)
			}
		})
	}
}

// A client that stops reading its stream holds up neither its own
// requests nor another session: the guest goes on reading and running
// them while frames wait for the socket. (Run last: it leaves a window
// that never stops drawing.)
func TestScreencastStalledClient(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-geometry", "40x5+0+0"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", guestSocket)
	}}}
	raw, _, err := websocket.Dial(ctx, "ws://guest/aci", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	raw.SetReadLimit(64 << 20)
	raw.Read(ctx) // the welcome
	raw.Write(ctx, websocket.MessageText, []byte(`{"id":1,"op":"screencast_start","screencast":{"fps":30}}`))
	if _, b, err := raw.Read(ctx); err != nil || !strings.Contains(string(b), `"ok":true`) {
		t.Fatalf("start: %s %v", b, err)
	}
	// A window that draws all the time fills the stalled socket with frames.
	if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "launch", Cmd: []string{"xterm", "-geometry", "80x20+100+100", "-e", "sh", "-c", "while :; do date +%N; done"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // not an assertion: time for the frames to fill the socket
	dir := t.TempDir()
	for i, name := range []string{"first", "second", "third"} {
		req := fmt.Sprintf(`{"id":%d,"op":"exec","cmd":["touch",%q]}`, 10+i, filepath.Join(dir, name))
		if err := raw.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"first", "second", "third"} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stalled session never ran its %s request", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Another session is not held up either.
	if _, err := a.Windows(ctx); err != nil {
		t.Fatal(err)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

type shot struct {
	*api.ACIReply
	png image.Image
}

// quietScreenshot waits until the screen has been still for 300 ms and
// takes a screenshot.
func quietScreenshot(ctx context.Context, t *testing.T, a *client.ACI, o *api.ACIScreenshot) shot {
	t.Helper()
	rep, img, err := a.Step(ctx, nil, &api.ACIObserve{Screenshot: o, SettleMs: 300})
	if err != nil {
		t.Fatal(err)
	}
	var pic image.Image
	if rep.Format == "png" {
		if pic, err = png.Decode(bytes.NewReader(img)); err != nil {
			t.Fatal(err)
		}
	}
	return shot{rep, pic}
}

func samePixels(t *testing.T, got *image.RGBA, want image.Image) {
	t.Helper()
	if got.Bounds() != want.Bounds() {
		t.Fatalf("composited %v, screenshot %v", got.Bounds(), want.Bounds())
	}
	for y := range got.Rect.Dy() {
		for x := range got.Rect.Dx() {
			r, g, b, _ := want.At(x, y).RGBA()
			c := got.RGBAAt(x, y)
			if c.R != uint8(r>>8) || c.G != uint8(g>>8) || c.B != uint8(b>>8) {
				t.Fatalf("pixel (%d,%d): composited %v, screenshot %02x%02x%02x", x, y, c, r>>8, g>>8, b>>8)
			}
		}
	}
}
