package osworld_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/guest"
	"github.com/tine-run/tine/internal/osworld"
	"github.com/tine-run/tine/internal/require"
)

// desktop is one guest serving OSWorld's API, shared by the subtests.
type desktop struct {
	t       *testing.T
	sock    string
	aciSock string
	client  *http.Client
}

func startDesktop(t *testing.T, apps ...[]string) *desktop {
	t.Helper()
	return startDesktopWith(t, guest.Options{Apps: apps})
}

func startDesktopWith(t *testing.T, o guest.Options) *desktop {
	t.Helper()
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	dir := t.TempDir()
	sock := filepath.Join(dir, "osworld.sock")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan guest.Ready, 1)
	done := make(chan error, 1)
	go func() {
		o.Width, o.Height, o.Listen, o.OSWorld = 800, 600, filepath.Join(dir, "aci.sock"), sock
		done <- guest.Run(ctx, o, func(r guest.Ready) { ready <- r })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("guest: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("guest not ready in 30 s")
	}
	// A fresh connection per request, as OSWorld's client makes them.
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &desktop{t: t, sock: sock, aciSock: o.Listen, client: &http.Client{Transport: tr}}
}

// do sends a request and returns the status, content type and body.
func (d *desktop) do(method, path, ctype string, body io.Reader) (int, string, []byte) {
	d.t.Helper()
	req, err := http.NewRequest(method, "http://guest"+path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

func (d *desktop) postJSON(path string, v any) (int, map[string]any, []byte) {
	d.t.Helper()
	b, _ := json.Marshal(v)
	code, _, body := d.do("POST", path, "application/json", bytes.NewReader(b))
	var m map[string]any
	json.Unmarshal(body, &m)
	return code, m, body
}

func (d *desktop) form(path string, vals url.Values) (int, []byte) {
	d.t.Helper()
	code, _, body := d.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(vals.Encode()))
	return code, body
}

func (d *desktop) cursor() [2]int {
	d.t.Helper()
	code, _, body := d.do("GET", "/cursor_position", "", nil)
	var p [2]int
	if code != 200 || json.Unmarshal(body, &p) != nil {
		d.t.Fatalf("cursor_position: %d %s", code, body)
	}
	return p
}

// execute runs cmd through /execute and returns its JSON answer, with
// how it ran (the X-Tine-Path header) as "_path".
func (d *desktop) execute(cmd any) map[string]any {
	d.t.Helper()
	b, _ := json.Marshal(map[string]any{"command": cmd, "shell": false})
	req, _ := http.NewRequest("POST", "http://guest/execute", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
		d.t.Fatalf("execute %v: %d %s", cmd, resp.StatusCode, body)
	}
	m["_path"] = resp.Header.Get(osworld.PathHeader)
	return m
}

const prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "

// through runs code as OSWorld's client sends it (the fast path), or
// through the interpreter with tine's pyautogui module (python3 -B -c is
// not the shape the fast path takes).
func (d *desktop) through(slow bool, code string) map[string]any {
	d.t.Helper()
	var res map[string]any
	want := "fast"
	if slow {
		res, want = d.execute([]string{"python3", "-B", "-c", prefix + code}), "process"
	} else {
		res = d.execute([]string{"python", "-c", prefix + code})
	}
	if res["_path"] != want {
		d.t.Fatalf("%q ran as %q, want %q", code, res["_path"], want)
	}
	return res
}

// waitFile waits for path to hold want (the xterm's shell writes it).
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	var got []byte
	for range 100 {
		got, _ = os.ReadFile(path)
		if string(got) == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s holds %q, want %q", path, got, want)
}

func TestPyAutoGUIBothPaths(t *testing.T) {
	require.Binary(t, "xterm")
	require.Binary(t, "python3")
	d := startDesktop(t, []string{"xterm", "-geometry", "80x24+0+0"})
	dir := t.TempDir()
	for _, slow := range []bool{false, true} {
		name := map[bool]string{false: "fast", true: "python"}[slow]
		t.Run(name+"/pointer", func(t *testing.T) {
			d.t = t
			res := d.through(slow, "pyautogui.click(123, 234); pyautogui.moveRel(10, -4)")
			if res["status"] != "success" || res["returncode"] != 0.0 || res["error"] != "" {
				t.Fatalf("execute: %v", res)
			}
			if p := d.cursor(); p != [2]int{133, 230} {
				t.Fatalf("cursor at %v, want [133 230]", p)
			}
			// pyautogui truncates floats, tweens a move over its duration and
			// lets the X server clamp to the screen.
			d.through(slow, "pyautogui.moveTo(50.9, 60.2, duration=0.2, tween=pyautogui.easeInOutQuad)")
			if p := d.cursor(); p != [2]int{50, 60} {
				t.Fatalf("cursor at %v, want [50 60]", p)
			}
			d.through(slow, "pyautogui.moveTo(5000, -20)")
			if p := d.cursor(); p != [2]int{799, 0} {
				t.Fatalf("cursor at %v, want [799 0] (clamped)", p)
			}
		})
		t.Run(name+"/keyboard", func(t *testing.T) {
			d.t = t
			out := filepath.Join(dir, name+".txt")
			// Junk typed, then erased with ctrl+u: the hotkey must work for
			// the file to hold only the second line's words. Shifted
			// characters (H, W, !, >) take pyautogui's shift; é is not a key
			// pyautogui has, and is skipped.
			// keyDown of a shifted character releases shift again, as
			// pyautogui's does: "ello" typed while H is down is lower case.
			code := fmt.Sprintf("pyautogui.PAUSE = 0; pyautogui.write('junk'); pyautogui.hotkey('ctrl', 'u'); pyautogui.typewrite('echo '); pyautogui.keyDown('H'); pyautogui.write('ello'); pyautogui.keyUp('H'); pyautogui.typewrite(', World!é %s > %s'); pyautogui.press('enter')", name, out)
			res := d.through(slow, code)
			if res["status"] != "success" || res["returncode"] != 0.0 {
				t.Fatalf("execute: %v", res)
			}
			waitFile(t, out, "Hello, World! "+name+"\n")
		})
	}
	t.Run("python-only", func(t *testing.T) {
		d.t = t
		// A loop and a variable: only the interpreter runs this.
		out := filepath.Join(dir, "loop.txt")
		res := d.execute([]string{"python", "-c", prefix + fmt.Sprintf("w, h = pyautogui.size()\nfor c in 'echo ':\n    pyautogui.press(c)\npyautogui.write(str(w) + 'x' + str(h) + ' > %s\\n')\nprint(pyautogui.position())", out)})
		if res["status"] != "success" || res["returncode"] != 0.0 {
			t.Fatalf("execute: %v", res)
		}
		if !strings.HasPrefix(res["output"].(string), "Point(x=") {
			t.Fatalf("output %q", res["output"])
		}
		waitFile(t, out, "800x600\n")
	})
	t.Run("raises", func(t *testing.T) {
		d.t = t
		// pyautogui raises for a bad button; so must the answer: a
		// traceback, exit code 1, as a real guest returns it.
		res := d.execute([]string{"python", "-c", prefix + "pyautogui.click(10, 10, button='nope')"})
		if res["_path"] != "process" || res["status"] != "success" || res["returncode"] != 1.0 || !strings.Contains(res["error"].(string), "PyAutoGUIException: button argument must be one of") {
			t.Fatalf("execute: %v", res)
		}
		res = d.execute([]string{"python", "-c", prefix + "pyautogui.click(10, 10, bogus=1)"})
		if res["returncode"] != 1.0 || !strings.Contains(res["error"].(string), "TypeError") {
			t.Fatalf("execute: %v", res)
		}
		// FAILSAFE on, pointer in a corner: FailSafeException.
		d.through(false, "pyautogui.moveTo(0, 0)")
		res = d.execute([]string{"python", "-c", "import pyautogui; pyautogui.click(5, 5)"})
		if res["returncode"] != 1.0 || !strings.Contains(res["error"].(string), "FailSafeException") {
			t.Fatalf("execute: %v", res)
		}
		if p := d.cursor(); p != [2]int{0, 0} {
			t.Fatalf("the failsafe let the click through: cursor at %v", p)
		}
	})
}

func TestRoutes(t *testing.T) {
	require.Binary(t, "xterm")
	require.Binary(t, "python3")
	d := startDesktop(t, []string{"xterm", "-title", "term-one", "-geometry", "40x10+0+0"})
	dir := t.TempDir()

	t.Run("simple", func(t *testing.T) {
		d.t = t
		if code, _, body := d.do("GET", "/platform", "", nil); code != 200 || string(body) != "Linux" {
			t.Fatalf("platform: %d %q", code, body)
		}
		code, m, _ := d.postJSON("/screen_size", nil)
		if code != 200 || m["width"] != 800.0 || m["height"] != 600.0 {
			t.Fatalf("screen_size: %d %v", code, m)
		}
		code, ctype, img := d.do("GET", "/screenshot", "", nil)
		if code != 200 || ctype != "image/png" {
			t.Fatalf("screenshot: %d %s", code, ctype)
		}
		if pic, err := png.Decode(bytes.NewReader(img)); err != nil || pic.Bounds().Dx() != 800 {
			t.Fatalf("screenshot png: %v", err)
		}
		// Sent with its length, as Flask's send_file sends it, not chunked.
		resp, err := d.client.Get("http://guest/screenshot")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ContentLength != int64(len(img)) || len(resp.TransferEncoding) != 0 {
			t.Fatalf("screenshot: Content-Length %d for %d bytes, Transfer-Encoding %v", resp.ContentLength, len(img), resp.TransferEncoding)
		}
		// The same screen twice: the same picture (sent again without
		// encoding); the pointer moved: a new one.
		_, _, again := d.do("GET", "/screenshot", "", nil)
		d.execute([]string{"python", "-c", prefix + "pyautogui.moveTo(123, 321)"})
		_, _, moved := d.do("GET", "/screenshot", "", nil)
		if !bytes.Equal(img, again) || bytes.Equal(again, moved) {
			t.Fatalf("screenshots: same screen equal %v, moved pointer differs %v", bytes.Equal(img, again), !bytes.Equal(again, moved))
		}
		code, m, _ = d.postJSON("/terminal", nil)
		if code != 405 {
			t.Fatalf("POST /terminal: %d, want 405 (GET only)", code)
		}
		code, _, body := d.do("GET", "/terminal", "", nil)
		if code != 200 || !strings.Contains(string(body), `"status":"success"`) {
			t.Fatalf("terminal: %d %s", code, body)
		}
	})
	t.Run("execute", func(t *testing.T) {
		d.t = t
		res := d.execute("sh -c 'echo out; echo err >&2; exit 3'")
		if res["status"] != "success" || res["output"] != "out\n" || res["error"] != "err\n" || res["returncode"] != 3.0 {
			t.Fatalf("execute: %v", res)
		}
		code, m, _ := d.postJSON("/setup/execute", map[string]any{"command": "echo $((1+2))", "shell": true})
		if code != 200 || m["output"] != "3\n" {
			t.Fatalf("shell execute: %d %v", code, m)
		}
		code, m, _ = d.postJSON("/execute", map[string]any{"command": []string{"no-such-program-tine"}})
		if code != 500 || m["status"] != "error" || !strings.Contains(m["message"].(string), "No such file or directory") {
			t.Fatalf("missing program: %d %v", code, m)
		}
		if code, _, _ := d.do("POST", "/execute", "application/json", strings.NewReader("{not json")); code != 400 {
			t.Fatalf("bad json: %d", code)
		}
		code, m, _ = d.postJSON("/execute_with_verification", map[string]any{"command": []string{"true"}, "verification": map[string]any{"window_exists": "TERM-ONE", "command_success": "true"}})
		if code != 200 || m["verification"] != "passed" {
			t.Fatalf("verification: %d %v", code, m)
		}
		code, m, _ = d.postJSON("/execute_with_verification", map[string]any{"command": []string{"true"}, "verification": map[string]any{"window_exists": "no such window"}, "max_wait_time": 0.2, "check_interval": 0.1})
		if code != 500 || m["status"] != "verification_failed" || m["verification"] != "failed" {
			t.Fatalf("failed verification: %d %v", code, m)
		}
	})
	t.Run("scripts", func(t *testing.T) {
		d.t = t
		code, m, _ := d.postJSON("/run_bash_script", map[string]any{"script": "echo a; echo b >&2; pwd; exit 4", "working_dir": dir})
		if code != 200 || m["status"] != "error" || m["output"] != "a\nb\n"+dir+"\n" || m["returncode"] != 4.0 || m["error"] != "" {
			t.Fatalf("run_bash_script: %d %v", code, m)
		}
		code, m, _ = d.postJSON("/run_bash_script", map[string]any{"script": "sleep 5", "timeout": 0.3})
		if code != 500 || m["returncode"] != -1.0 || !strings.Contains(m["output"].(string), "timed out after 0.3 seconds") {
			t.Fatalf("run_bash_script timeout: %d %v", code, m)
		}
		if code, m, _ = d.postJSON("/run_bash_script", map[string]any{}); code != 400 || m["output"] != "Script not supplied!" {
			t.Fatalf("run_bash_script empty: %d %v", code, m)
		}
		code, m, _ = d.postJSON("/run_python", map[string]any{"code": "import pyautogui\nprint(pyautogui.size())\nraise SystemExit(2)"})
		if code != 200 || m["status"] != "error" || m["output"] != "Size(width=800, height=600)\n" || m["return_code"] != 2.0 || m["need_more"] != false {
			t.Fatalf("run_python: %d %v", code, m)
		}
		if code, m, _ = d.postJSON("/run_python", map[string]any{}); code != 400 || m["message"] != "Code not supplied!" {
			t.Fatalf("run_python empty: %d %v", code, m)
		}
	})
	t.Run("files", func(t *testing.T) {
		d.t = t
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		target := filepath.Join(dir, "up", "deep", "f.txt")
		mw.WriteField("file_path", target)
		fw, _ := mw.CreateFormFile("file_data", "f.txt")
		fw.Write([]byte("hello upload"))
		mw.Close()
		code, _, body := d.do("POST", "/setup/upload", mw.FormDataContentType(), &buf)
		if code != 200 || string(body) != "File Uploaded: 12 bytes" {
			t.Fatalf("upload: %d %s", code, body)
		}
		code, body = d.form("/file", url.Values{"file_path": {target}})
		if code != 200 || string(body) != "hello upload" {
			t.Fatalf("file: %d %s", code, body)
		}
		if code, body = d.form("/file", url.Values{"file_path": {filepath.Join(dir, "nope")}}); code != 404 || !strings.Contains(string(body), "File not found") {
			t.Fatalf("missing file: %d %s", code, body)
		}
		if code, body = d.form("/file", url.Values{}); code != 400 {
			t.Fatalf("no file_path: %d %s", code, body)
		}
		code, m, _ := d.postJSON("/list_directory", map[string]any{"path": filepath.Join(dir, "up")})
		tree, _ := json.Marshal(m["directory_tree"])
		if code != 200 || string(tree) != `{"children":[{"children":[{"name":"f.txt","type":"file"}],"name":"deep","type":"directory"}],"name":"up","type":"directory"}` {
			t.Fatalf("list_directory: %d %s", code, tree)
		}
		if code, m, _ = d.postJSON("/list_directory", map[string]any{"path": target}); code != 400 || m["error"] != "The provided path is not a directory" {
			t.Fatalf("list_directory of a file: %d %v", code, m)
		}
		if code, m, _ = d.postJSON("/list_directory", map[string]any{}); code != 400 || m["error"] != "Missing 'path' parameter" {
			t.Fatalf("list_directory without path: %d %v", code, m)
		}
		// The wallpaper: set, then served back.
		pic := filepath.Join(dir, "wall.png")
		os.WriteFile(pic, []byte("\x89PNG fake"), 0o644)
		if code, _, body = d.postJSON("/setup/change_wallpaper", map[string]any{"path": pic}); code != 200 {
			t.Fatalf("change_wallpaper: %d %s", code, body)
		}
		if code, _, body = d.do("POST", "/wallpaper", "", nil); code != 200 || string(body) != "\x89PNG fake" {
			t.Fatalf("wallpaper: %d %q", code, body)
		}
		if code, _, body = d.postJSON("/setup/change_wallpaper", map[string]any{"path": filepath.Join(dir, "none.png")}); code != 404 {
			t.Fatalf("change_wallpaper missing: %d %s", code, body)
		}
		// download_file from a server on this machine's loopback.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/missing" {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, "downloaded body")
		})}
		go srv.Serve(ln)
		defer srv.Close()
		dl := filepath.Join(dir, "dl", "x.txt")
		code, _, body = d.postJSON("/setup/download_file", map[string]any{"url": "http://" + ln.Addr().String() + "/x", "path": dl})
		if got, _ := os.ReadFile(dl); code != 200 || string(got) != "downloaded body" || string(body) != "File downloaded successfully: 15 bytes" {
			t.Fatalf("download_file: %d %s, file %q", code, body, got)
		}
		code, _, body = d.postJSON("/setup/download_file", map[string]any{"url": "http://" + ln.Addr().String() + "/missing", "path": dl})
		if _, err := os.Stat(dl); code != 500 || !strings.Contains(string(body), "No retries left") || err == nil {
			t.Fatalf("download_file 404: %d %s (partial file left: %v)", code, body, err == nil)
		}
	})
	t.Run("recording", func(t *testing.T) {
		d.t = t
		require.Binary(t, "ffprobe")
		if code, m, _ := d.postJSON("/end_recording", nil); code != 400 || m["message"] != "No recording in progress to stop." {
			t.Fatalf("end_recording with none: %d %v", code, m)
		}
		if code, m, _ := d.postJSON("/start_recording", nil); code != 200 || m["status"] != "success" {
			t.Fatalf("start_recording: %d %v", code, m)
		}
		if code, m, _ := d.postJSON("/start_recording", nil); code != 400 || m["message"] != "Recording is already in progress." {
			t.Fatalf("second start_recording: %d %v", code, m)
		}
		time.Sleep(700 * time.Millisecond)
		code, ctype, mp4 := d.do("POST", "/end_recording", "", nil)
		if code != 200 || ctype != "video/mp4" {
			t.Fatalf("end_recording: %d %s %.100s", code, ctype, mp4)
		}
		f := filepath.Join(dir, "rec.mp4")
		os.WriteFile(f, mp4, 0o644)
		out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width", "-of", "csv=p=0", f).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "h264,800" {
			t.Fatalf("ffprobe: %v %s", err, out)
		}
	})
	t.Run("windows", func(t *testing.T) {
		d.t = t
		code, body := d.form("/window_size", url.Values{"app_class_name": {"xterm"}})
		var m map[string]any
		json.Unmarshal(body, &m)
		if code != 200 || m["width"].(float64) < 100 {
			t.Fatalf("window_size: %d %s", code, body)
		}
		if code, body = d.form("/window_size", url.Values{}); code != 400 || !strings.Contains(string(body), "app_class_name is required") {
			t.Fatalf("window_size without a class: %d %s", code, body)
		}
		if code, _ = d.form("/window_size", url.Values{"app_class_name": {"nosuchclass"}}); code != 500 {
			t.Fatalf("window_size of no window: %d", code)
		}
		// launch a second xterm, activate the first by title, close the
		// second by class-insensitive title.
		code, _, out := d.postJSON("/setup/launch", map[string]any{"command": []string{"xterm", "-title", "term-two"}})
		if code != 200 || string(out) != "xterm -title term-two launched successfully" {
			t.Fatalf("launch: %d %s", code, out)
		}
		res := d.execute([]string{"sh", "-c", "for i in $(seq 100); do wmctrl -l 2>/dev/null | grep -q term-two && exit 0; sleep 0.05; done; exit 1"})
		if _, err := exec.LookPath("wmctrl"); err == nil && res["returncode"] != 0.0 {
			t.Fatalf("term-two never came: %v", res)
		}
		code, _, out = d.postJSON("/setup/activate_window", map[string]any{"window_name": "term-one", "strict": true})
		if code != 200 || string(out) != "Window activated successfully" {
			t.Fatalf("activate_window: %d %s", code, out)
		}
		code, _, out = d.postJSON("/setup/close_window", map[string]any{"window_name": "TERM-TWO"})
		if code != 200 || string(out) != "Window closed successfully." {
			t.Fatalf("close_window: %d %s", code, out)
		}
		if code, _, _ = d.postJSON("/setup/activate_window", map[string]any{}); code != 400 {
			t.Fatalf("activate_window without a name: %d", code)
		}
		// open_file with a program on PATH: it waits for its window (an
		// xterm is titled "xterm") and focuses it.
		code, _, out = d.postJSON("/setup/open_file", map[string]any{"path": "xterm"})
		if code != 200 || string(out) != "File opened and window activated successfully" {
			t.Fatalf("open_file xterm: %d %s", code, out)
		}
		if code, _, out = d.postJSON("/setup/open_file", map[string]any{"path": "/no/such/file-or-app"}); code != 404 || !strings.Contains(string(out), "Application/file not found") {
			t.Fatalf("open_file missing: %d %s", code, out)
		}
	})
}

// With a11y, a GTK button's name and bounds come back — in OSWorld's XML on
// /accessibility and in the ACI's compact form — and clicking the middle
// of its bounds presses it.
func TestAccessibility(t *testing.T) {
	require.Binary(t, "dbus-daemon")
	require.Binary(t, "/usr/bin/python3")
	if out, err := exec.Command("/usr/bin/python3", "-c", "import pyatspi, gi; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk").CombinedOutput(); err != nil {
		t.Skipf("needs Debian's python3-pyatspi, python3-gi and gir1.2-gtk-3.0 (make deps): %s", bytes.TrimSpace(out))
	}
	pressedFile := filepath.Join(t.TempDir(), "pressed")
	script, _ := filepath.Abs("testdata/button.py")
	d := startDesktopWith(t, guest.Options{A11y: true, Apps: [][]string{{"/usr/bin/python3", script, pressedFile}}})
	ctx := context.Background()
	a, err := client.DialGuest(ctx, d.aciSock)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	// The compact form, filtered as OSWorld filters its linearized tree.
	var button *api.ACINode
	var find func(ns []*api.ACINode)
	find = func(ns []*api.ACINode) {
		for _, n := range ns {
			if n.Role == "push-button" && n.Name == "Press me" {
				button = n
			}
			find(n.Children)
		}
	}
	// The app registers with the bus as it starts: ask until it is there.
	for range 50 {
		rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "accessibility", Filter: "interactive"})
		if err != nil {
			t.Fatal(err)
		}
		if find(rep.Tree); button != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if button == nil || len(button.Bounds) != 4 || button.Bounds[2] <= 0 {
		t.Fatalf("no push-button \"Press me\" with bounds in the tree: %+v", button)
	}
	t.Logf("button %+v", button)

	// OSWorld's XML: the root declares the namespaces, the button carries
	// its name, states and the same bounds as Python tuples.
	code, m, body := d.postJSON("/accessibility", nil)
	if code != 405 {
		t.Fatalf("POST /accessibility: %d (GET only)", code)
	}
	code, _, body = d.do("GET", "/accessibility", "", nil)
	json.Unmarshal(body, &m)
	xml, _ := m["AT"].(string)
	if code != 200 || !strings.HasPrefix(xml, `<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes" xmlns:cp=`) {
		t.Fatalf("accessibility: %d %.300s", code, body)
	}
	want := fmt.Sprintf(`cp:screencoord="(%d, %d)" cp:size="(%d, %d)"`, button.Bounds[0], button.Bounds[1], button.Bounds[2], button.Bounds[3])
	i := strings.Index(xml, `<push-button name="Press me" st:`)
	if i < 0 || !strings.Contains(xml[i:i+strings.Index(xml[i:], ">")], want) || !strings.Contains(xml[i:], `st:enabled="true"`) {
		t.Fatalf("the button in the XML lacks %s: %.600s", want, xml[max(0, i):])
	}
	if rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "accessibility", Format: "xml"}); err != nil || !strings.Contains(rep.XML, `<push-button name="Press me"`) {
		t.Fatalf("accessibility xml over the ACI: %v", err)
	}
	if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "accessibility", Filter: "shiny"}); err == nil || !strings.Contains(err.Error(), "shiny") {
		t.Fatalf("unknown filter: %v", err)
	}

	// Click the middle of its bounds: the button is pressed.
	if _, err := os.Stat(pressedFile); err == nil {
		t.Fatal("pressed before the click")
	}
	cx, cy := button.Bounds[0]+button.Bounds[2]/2, button.Bounds[1]+button.Bounds[3]/2
	if err := a.Click(ctx, cx, cy, 1); err != nil {
		t.Fatal(err)
	}
	waitFile(t, pressedFile, "pressed")
}

// A fast-path call that would run for hours (pyautogui's would too) stops
// when its request goes: keys reach an xterm's raw cat while the request
// lasts, and none after.
func TestFastPathEndsWithItsRequest(t *testing.T) {
	require.Binary(t, "xterm")
	out := filepath.Join(t.TempDir(), "keys")
	d := startDesktop(t, []string{"xterm", "-e", "sh", "-c", "stty -icanon -echo; exec cat > " + out})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"command": []string{"python", "-c", prefix + "pyautogui.press('a', presses=1000000000)"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://guest/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if _, err := d.client.Do(req); err == nil {
		t.Fatal("a billion presses answered in 500 ms")
	}
	size := func() int64 {
		st, _ := os.Stat(out)
		if st == nil {
			return 0
		}
		return st.Size()
	}
	// Let what was sent drain into the file, then watch it stay put.
	prev := int64(-1)
	for range 20 {
		time.Sleep(200 * time.Millisecond)
		if now := size(); now == prev {
			break
		} else {
			prev = now
		}
	}
	time.Sleep(time.Second)
	if prev <= 0 || size() != prev {
		t.Fatalf("keys after the request ended: %d bytes, then %d a second later", prev, size())
	}
	t.Logf("%d keys arrived while the request lasted, none after", prev)
}
