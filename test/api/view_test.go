package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// The viewer page in a real browser (headless Chromium, driven over the
// DevTools protocol): it draws what the desktop shows, and a click on its
// canvas reaches the desktop. Its token opens only that desktop's page and
// ACI, and a view-only one refuses input.
func TestDesktopViewer(t *testing.T) {
	require.Binary(t, "chromium")
	addr := freePort(t)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(tokFile, []byte("viewer-test-token"), 0o600)
	d := startDaemon(t, "--listen", addr, "--token-file", tokFile)
	dt, a := startDesktop(t, d, []string{"xterm", "-geometry", "40x10+0+0"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	tcp := client.NewTCP(addr, "viewer-test-token")

	t.Run("TokenScope", func(t *testing.T) {
		v, u, err := tcp.DesktopView(ctx, dt.ID, &api.ViewSpec{ViewOnly: true, TTLSeconds: 60})
		if err != nil || !strings.HasPrefix(u, "http://"+addr+"/v1/desktops/"+dt.ID+"/view?token=") || !v.ViewOnly {
			t.Fatalf("view %+v %q %v", v, u, err)
		}
		get := func(path string) int {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get(v.Path); code != 200 {
			t.Fatalf("the page with its token: %d", code)
		}
		// Negative controls: no token, a forged one, another route.
		forged := v.Token[:len(v.Token)-2] + "AA"
		for path, want := range map[string]int{
			"/v1/desktops/" + dt.ID + "/view":                 401,
			"/v1/desktops/" + dt.ID + "/view?token=" + forged: 401,
			"/v1/desktops/" + dt.ID + "?token=" + v.Token:     401,
			"/v1/sandboxes?token=" + v.Token:                  401,
		} {
			if code := get(path); code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
		}
		// The view-only session observes and refuses input.
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/desktops/"+dt.ID+"/aci?token="+url.QueryEscape(v.Token), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		c.Read(ctx) // the welcome
		for req, code := range map[string]string{`{"id":1,"op":"screen"}`: "", `{"id":2,"op":"click","x":5,"y":5}`: api.ACIForbidden} {
			c.Write(ctx, websocket.MessageText, []byte(req))
			_, b, err := c.Read(ctx)
			var rep api.ACIReply
			if err != nil || json.Unmarshal(b, &rep) != nil {
				t.Fatalf("%s: %s %v", req, b, err)
			}
			if got := ""; rep.Error != nil {
				got = rep.Error.Code
				if got != code {
					t.Errorf("%s: %s, want %q", req, b, code)
				}
			} else if code != "" {
				t.Errorf("%s: %s, want %q", req, b, code)
			}
		}
	})

	t.Run("Chromium", func(t *testing.T) {
		_, u, err := tcp.DesktopView(ctx, dt.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		const px, py = 700, 500 // inside the window launched below
		tab := openChromium(ctx, t, u+fmt.Sprintf("&probe=%d,%d", px, py))
		status := func() map[string]any {
			var st map[string]any
			json.Unmarshal([]byte(tab.eval(`document.getElementById("status").textContent`)), &st)
			return st
		}
		if !testbin.Eventually(patience, func() bool { st := status(); return st != nil && st["frames"].(float64) > 0 }) {
			t.Fatalf("the page drew no frame: %v", status())
		}
		// Change the desktop: a green window where the probe looks.
		if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "launch", Cmd: []string{"xterm", "-bg", "#00ff00", "-geometry", "20x5+650+450"}}); err != nil {
			t.Fatal(err)
		}
		var want [3]float64
		if !testbin.Eventually(patience, func() bool {
			_, img, err := a.Screenshot(ctx, &api.ACIScreenshot{Region: []int{px, py, 1, 1}})
			if err != nil {
				return false
			}
			p, _ := png.Decode(bytes.NewReader(img))
			r, g, b, _ := p.At(0, 0).RGBA()
			want = [3]float64{float64(r >> 8), float64(g >> 8), float64(b >> 8)}
			return want == [3]float64{0, 255, 0}
		}) {
			t.Fatalf("the green window never showed at %d,%d (%v)", px, py, want)
		}
		var got []any
		if !testbin.Eventually(patience, func() bool {
			got, _ = status()["probe"].([]any)
			return len(got) == 3 && got[0] == want[0] && got[1] == want[1] && got[2] == want[2]
		}) {
			t.Fatalf("the page's pixel at %d,%d is %v, the desktop's %v", px, py, got, want)
		}
		// A real click on the canvas (drawn scaled to fit the window, so
		// the point goes through the page's mapping) reaches the desktop:
		// the pointer goes there.
		zero := 0
		a.Do(ctx, &api.ACIRequest{Op: "move", X: &zero, Y: &zero})
		var rect struct{ Left, Top, Width, Height float64 }
		json.Unmarshal([]byte(tab.eval(`JSON.stringify((r => ({left: r.left, top: r.top, width: r.width, height: r.height}))(document.getElementById("screen").getBoundingClientRect()))`)), &rect)
		// Browsers deliver whole CSS pixels: click at one, and expect the
		// screen pixel under it.
		clientX, clientY := math.Round(rect.Left+rect.Width/3), math.Round(rect.Top+rect.Height/3)
		cx := int((clientX - rect.Left) * float64(dt.Width) / rect.Width)
		cy := int((clientY - rect.Top) * float64(dt.Height) / rect.Height)
		tab.click(clientX, clientY)
		var pos [2]int
		if !testbin.Eventually(patience, func() bool {
			rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "cursor"})
			if err == nil && rep.Cursor != nil {
				pos = *rep.Cursor
			}
			return pos == [2]int{cx, cy}
		}) {
			t.Fatalf("after a click on the canvas at %d,%d the pointer is at %v", cx, cy, pos)
		}
	})
}

// tab is a Chromium page driven over the DevTools protocol.
type tab struct {
	t   *testing.T
	ctx context.Context
	c   *websocket.Conn
	id  int
}

// openChromium starts headless Chromium on u and connects to its page.
func openChromium(ctx context.Context, t *testing.T, u string) *tab {
	t.Helper()
	prof := t.TempDir()
	cmd := exec.Command("chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+prof, "--remote-debugging-port=0", "--window-size=1100,900", u)
	// A group of its own: Chromium's renderer and GPU processes write to
	// the profile until they die too, and the profile is removed after.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		testbin.Eventually(patience, func() bool { return syscall.Kill(-cmd.Process.Pid, 0) != nil })
	})
	var port string
	if !testbin.Eventually(patience, func() bool {
		b, err := os.ReadFile(filepath.Join(prof, "DevToolsActivePort"))
		port, _, _ = strings.Cut(string(b), "\n")
		return err == nil && port != ""
	}) {
		t.Fatal("chromium wrote no DevToolsActivePort")
	}
	var targets []struct{ Type, URL, WebSocketDebuggerURL string }
	if !testbin.Eventually(patience, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&targets)
		for _, tg := range targets {
			if tg.Type == "page" && strings.Contains(tg.URL, "/view?") {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no page target: %+v", targets)
	}
	for _, tg := range targets {
		if tg.Type == "page" && strings.Contains(tg.URL, "/view?") {
			c, _, err := websocket.Dial(ctx, tg.WebSocketDebuggerURL, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.SetReadLimit(16 << 20)
			t.Cleanup(func() { c.CloseNow() })
			return &tab{t: t, ctx: ctx, c: c}
		}
	}
	panic("unreachable")
}

// call sends a DevTools command and returns its result.
func (tb *tab) call(method string, params any) json.RawMessage {
	tb.id++
	msg, _ := json.Marshal(map[string]any{"id": tb.id, "method": method, "params": params})
	if err := tb.c.Write(tb.ctx, websocket.MessageText, msg); err != nil {
		tb.t.Fatal(err)
	}
	for {
		_, b, err := tb.c.Read(tb.ctx)
		if err != nil {
			tb.t.Fatal(err)
		}
		var rep struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		json.Unmarshal(b, &rep)
		if rep.ID != tb.id {
			continue // an event
		}
		if rep.Error != nil {
			tb.t.Fatalf("%s: %s", method, rep.Error.Message)
		}
		return rep.Result
	}
}

// eval evaluates a JavaScript expression that yields a string.
func (tb *tab) eval(expr string) string {
	var r struct{ Result struct{ Value string } }
	json.Unmarshal(tb.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r)
	return r.Result.Value
}

// click presses and releases the left button at viewport point x, y.
func (tb *tab) click(x, y float64) {
	for _, typ := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		tb.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1})
	}
}
