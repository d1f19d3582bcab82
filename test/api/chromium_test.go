package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// Chromium runs in an OSWorld desktop as OSWorld's setup starts it
// (google-chrome through /setup/launch); its DevTools port is published;
// the page's button is found in the accessibility tree, clicked through
// the ACI at the centre of its bounds, and the click's effect read back
// through CDP.
func TestDesktopChromium(t *testing.T) {
	d := startDaemon(t)
	require.Binary(t, "chromium")
	require.Binary(t, "dbus-daemon")
	ctx := context.Background()
	dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1024, Height: 768, OSWorld: true, Limits: api.Limits{MemoryBytes: 2 << 30}})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	if dt.CDP == "" {
		t.Fatal("an osworld desktop has no cdp address")
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	// The page, put there as OSWorld's upload does it.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("file_path", "/tmp/page.html")
	fw, _ := mw.CreateFormFile("file_data", "page.html")
	io.WriteString(fw, `<html><body><button id="b" style="font-size:30px" onclick="document.title='clicked'">Click me</button></body></html>`)
	mw.Close()
	resp, err := hc.Post("http://"+dt.OSWorld+"/setup/upload", mw.FormDataContentType(), &buf)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %v %v", err, resp)
	}
	resp.Body.Close()
	launch, _ := json.Marshal(map[string]any{"command": []string{"google-chrome", "--remote-debugging-port=9222", "--force-renderer-accessibility",
		"--no-first-run", "--user-data-dir=/tmp/chrome-profile", "--window-position=0,0", "--window-size=1000,700", "file:///tmp/page.html"}})
	resp, err = hc.Post("http://"+dt.OSWorld+"/setup/launch", "application/json", bytes.NewReader(launch))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("launch: %v %v", err, resp)
	}
	resp.Body.Close()

	// CDP through the published port: the page target.
	var wsURL string
	if !testbin.Eventually(time.Minute, func() bool {
		resp, err := hc.Get("http://" + dt.CDP + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		json.NewDecoder(resp.Body).Decode(&targets)
		for _, tg := range targets {
			if tg.Type == "page" && strings.HasSuffix(tg.URL, "/tmp/page.html") {
				wsURL = tg.WebSocketDebuggerURL
			}
		}
		return wsURL != ""
	}) {
		t.Fatal("no page target on the published DevTools port")
	}
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("CDP websocket %s: %v", wsURL, err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(16 << 20)
	msgID := 0
	evaluate := func(expr string) string {
		t.Helper()
		msgID++
		req, _ := json.Marshal(map[string]any{"id": msgID, "method": "Runtime.evaluate", "params": map[string]any{"expression": expr, "returnByValue": true}})
		if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
			t.Fatal(err)
		}
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				ID     int `json:"id"`
				Result struct {
					Result struct{ Value any } `json:"result"`
				} `json:"result"`
			}
			if json.Unmarshal(data, &rep) == nil && rep.ID == msgID {
				return fmt.Sprint(rep.Result.Result.Value)
			}
		}
	}
	if got := evaluate("document.title"); got == "clicked" {
		t.Fatal("clicked before the click")
	}

	// The button in the accessibility tree.
	a, err := d.c.DialACI(ctx, dt.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var button *api.ACINode
	var find func([]*api.ACINode)
	find = func(ns []*api.ACINode) {
		for _, n := range ns {
			if n.Role == "push-button" && n.Name == "Click me" && len(n.Bounds) == 4 {
				button = n
			}
			find(n.Children)
		}
	}
	if !testbin.Eventually(time.Minute, func() bool {
		rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "accessibility", Filter: "interactive"})
		if err == nil {
			find(rep.Tree)
		}
		return button != nil
	}) {
		t.Fatal("the page's button never showed in the accessibility tree")
	}
	t.Logf("button %+v", button)
	if err := a.Click(ctx, button.Bounds[0]+button.Bounds[2]/2, button.Bounds[1]+button.Bounds[3]/2, 1); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool { return evaluate("document.title") == "clicked" }) {
		t.Fatalf("the click did not press the button: title %q", evaluate("document.title"))
	}
}
