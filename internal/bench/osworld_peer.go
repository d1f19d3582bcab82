package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// osworldServerPort is the port OSWorld's guest server listens on (Flask's
// default; its main.py runs app.run(host="0.0.0.0")).
const osworldServerPort = 5000

// osworldServerFiles are what OSWorld's guest server is made of, under a
// checkout's desktop_env/server.
var osworldServerFiles = []string{"main.py", "pyxcursor.py"}

// osworldPeer is OSWorld's own guest server run in the measured desktop,
// on the same display as the facade: Shinken §7's same-guest protocol.
type osworldPeer struct {
	base string
	// pyautogui says whose pyautogui its python -c commands import.
	pyautogui string
}

// osworldServerSpec adds what the peer needs to the desktop's spec: a
// network with a loopback to listen on, and its port published.
func osworldServerSpec(spec *api.DesktopSpec) {
	spec.Network = "loopback"
	spec.Publish = append(spec.Publish, api.Port{Port: osworldServerPort})
}

// startOSWorldServer copies OSWorld's server from checkout dir into the
// desktop and launches it through the facade's /setup/launch, so it gets
// the environment the facade's commands get (DISPLAY, and tine's pyautogui
// on PYTHONPATH). When the desktop's python3 imports a pyautogui of its
// own without tine's, the server runs without PYTHONPATH and uses it.
func startOSWorldServer(ctx context.Context, c *client.Client, hc *http.Client, dt *api.Desktop, dir string) (*osworldPeer, error) {
	const inside = "/tmp/osworld-server"
	facade := "http://" + dt.OSWorld
	if _, err := postJSON(hc, facade+"/execute", map[string]any{"command": []string{"mkdir", "-p", inside}}); err != nil {
		return nil, fmt.Errorf("make %s in the desktop: %w", inside, err)
	}
	for _, name := range osworldServerFiles {
		b, err := os.ReadFile(filepath.Join(dir, "desktop_env", "server", name))
		if err != nil {
			return nil, fmt.Errorf("--osworld-server %s: %w (want a checkout of OSWorld, github.com/xlang-ai/OSWorld)", dir, err)
		}
		if _, err := c.WriteFile(ctx, dt.ID, inside+"/"+name, bytes.NewReader(b), nil); err != nil {
			return nil, fmt.Errorf("copy OSWorld's %s into the desktop: %w", name, err)
		}
	}
	p := &osworldPeer{pyautogui: "tine's pyautogui module (no other pyautogui in the desktop's python3)"}
	launch := "exec python3 " + inside + "/main.py >" + inside + "/log 2>&1"
	if out, err := postJSON(hc, facade+"/execute", map[string]any{"command": []string{"env", "-u", "PYTHONPATH", "python3", "-c", "import pyautogui"}}); err == nil && succeeded(out) {
		p.pyautogui = "the desktop's own pyautogui"
		launch = "unset PYTHONPATH; " + launch
	}
	if _, err := postJSON(hc, facade+"/setup/launch", map[string]any{"command": launch, "shell": true}); err != nil {
		return nil, fmt.Errorf("launch OSWorld's server: %w", err)
	}
	var host string
	if dt.Network != nil {
		for _, port := range dt.Network.Ports {
			if port.Port == osworldServerPort {
				host = fmt.Sprintf("%s:%d", port.HostIP, port.HostPort)
			}
		}
	}
	if host == "" {
		return nil, fmt.Errorf("the desktop's port %d is not published: %+v", osworldServerPort, dt.Network)
	}
	p.base = "http://" + host
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get(p.base + "/platform")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var log []byte
			if rc, rerr := c.ReadFile(ctx, dt.ID, inside+"/log"); rerr == nil {
				log, _ = io.ReadAll(io.LimitReader(rc, 8<<10))
				rc.Close()
			}
			return nil, fmt.Errorf("OSWorld's server did not answer GET /platform on %s within 60 s (last: %v); its output:\n%s", host, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postJSON posts body as JSON and returns the answer, an error for any
// status but 200.
func postJSON(hc *http.Client, url string, body any) ([]byte, error) {
	b, _ := json.Marshal(body)
	resp, err := hc.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("%s: %d %s", url, resp.StatusCode, out)
	}
	return out, nil
}

// succeeded reads an /execute answer: {status, output, error, returncode}
// (OSWorld's server indents its JSON, the facade does not).
func succeeded(answer []byte) bool {
	var r struct {
		ReturnCode *int `json:"returncode"`
	}
	return json.Unmarshal(answer, &r) == nil && r.ReturnCode != nil && *r.ReturnCode == 0
}
