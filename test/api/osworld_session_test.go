package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// osworldClient calls a desktop's OSWorld API as OSWorld's controllers do:
// a fresh connection per request.
type osworldClient struct {
	t    *testing.T
	addr string
	hc   *http.Client
}

func newOSWorldClient(t *testing.T, addr string) *osworldClient {
	return &osworldClient{t: t, addr: addr, hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}}
}

func (c *osworldClient) do(method, path, contentType string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, _ := http.NewRequest(method, "http://"+c.addr+path, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *osworldClient) json(method, path string, body any) (int, []byte) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	return c.do(method, path, "application/json", bytes.NewReader(b))
}

// sh runs a shell command through /execute and returns its output and
// exit code.
func (c *osworldClient) sh(script string) (string, int) {
	c.t.Helper()
	code, b := c.json("POST", "/execute", map[string]any{"command": script, "shell": true})
	var res struct {
		Output, Error string
		Returncode    int
	}
	if err := json.Unmarshal(b, &res); code != 200 || err != nil {
		c.t.Fatalf("execute %q: %d %s", script, code, b)
	}
	return strings.TrimSpace(res.Output + res.Error), res.Returncode
}

func (c *osworldClient) upload(path string, data []byte) {
	c.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("file_path", path)
	fw, _ := mw.CreateFormFile("file_data", "f")
	fw.Write(data)
	mw.Close()
	if code, b := c.do("POST", "/setup/upload", mw.FormDataContentType(), &buf); code != 200 {
		c.t.Fatalf("upload %s: %d %s", path, code, b)
	}
}

// An OSWorld desktop's session is OSWorld's VM's: commands run as `user`,
// whose `sudo -S` takes `password`, and `python` is python3. sudo makes
// the sandbox's root, nothing more: the same capabilities, seccomp still
// on, and what root outside could do (mount) is refused.
func TestDesktopOSWorldAccount(t *testing.T) {
	d := startDaemon(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "sudo")
	hostEtc := map[string][]byte{}
	for _, f := range []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/sudoers", "/etc/hosts"} {
		hostEtc[f], _ = os.ReadFile(f)
	}
	dt, err := d.c.CreateDesktop(context.Background(), &api.DesktopSpec{Width: 800, Height: 600, OSWorld: true})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	c := newOSWorldClient(t, dt.OSWorld)
	if out, rc := c.sh(`id -un; id -Gn; echo "$HOME"; python --version`); rc != 0 || !strings.HasPrefix(out, "user\n") ||
		!strings.Contains(out, "sudo") || !strings.Contains(out, "\n/home/user\nPython 3.") {
		t.Fatalf("the session: %d %q, want user, in group sudo, home /home/user, python 3", rc, out)
	}
	// python is python3 for the whole desktop, not only the facade's PATH.
	if out, rc := c.sh(`PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; python --version`); rc != 0 || !strings.HasPrefix(out, "Python 3.") {
		t.Fatalf("python on the system's PATH: %d %q", rc, out)
	}
	if code, b := c.json("POST", "/desktop_path", nil); code != 200 || !bytes.Contains(b, []byte(`"/home/user/Desktop"`)) {
		t.Fatalf("desktop_path: %d %s", code, b)
	}
	// Unprivileged as user: the shadow file is root's (the control for
	// what sudo then gives).
	if out, rc := c.sh(`cat /etc/shadow`); rc == 0 {
		t.Fatalf("user read /etc/shadow without sudo: %q", out)
	}
	if out, rc := c.sh(`echo wrong | sudo -S -p '' true`); rc == 0 {
		t.Fatalf("sudo took a wrong password: %q", out)
	}
	out, rc := c.sh(`echo password | sudo -S -p '' sh -c 'id -u; grep -c "^user:" /etc/shadow'`)
	if rc != 0 || out != "0\n1" {
		t.Fatalf("sudo -S with the password: %d %q, want uid 0 reading /etc/shadow", rc, out)
	}
	// What sudo gives is the sandbox's root: the capabilities the guest
	// (root in the sandbox) has, no more, and seccomp still filtering.
	status := func(prefix string) map[string]string {
		out, rc := c.sh(prefix + `grep -E '^(CapEff|CapBnd|CapPrm|Seccomp):' /proc/self/status`)
		if rc != 0 {
			t.Fatalf("%sstatus: %d %q", prefix, rc, out)
		}
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			k, v, _ := strings.Cut(l, ":")
			m[k] = strings.TrimSpace(v)
		}
		return m
	}
	// The reference: a process of the sandbox's root (an exec through the
	// daemon, as the guest itself runs).
	res, err := d.c.Exec(context.Background(), dt.ID, &api.ExecRequest{Argv: []string{"cat", "/proc/self/status"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec as the sandbox's root: %v %+v", err, res)
	}
	root := string(res.Stdout)
	sudo := status(`echo password | sudo -S -p '' `)
	for _, k := range []string{"CapEff", "CapBnd"} {
		want := ""
		for _, l := range strings.Split(root, "\n") {
			if v, ok := strings.CutPrefix(l, k+":"); ok {
				want = strings.TrimSpace(v)
			}
		}
		if want == "" || sudo[k] != want {
			t.Errorf("%s under sudo %q, the sandbox's root %q", k, sudo[k], want)
		}
	}
	if caps, _ := strconv.ParseUint(sudo["CapEff"], 16, 64); caps&(1<<21) != 0 || sudo["Seccomp"] != "2" {
		t.Errorf("sudo gave CAP_SYS_ADMIN or no seccomp filter: %v", sudo)
	}
	if out, rc := c.sh(`echo password | sudo -S -p '' mount -t tmpfs none /mnt && echo mounted`); rc == 0 || strings.Contains(out, "mounted") {
		t.Errorf("root through sudo mounted a filesystem: %q", out)
	}
	// Root through sudo writes the desktop's root, which is its own upper
	// over the host's read-only one: the file is there inside, not on the
	// host.
	const probe = "/usr/bin/tine-sudo-probe"
	if out, rc := c.sh(`echo password | sudo -S -p '' touch ` + probe + ` && ls ` + probe); rc != 0 || out != probe {
		t.Fatalf("sudo touch %s: %d %q", probe, rc, out)
	}
	if _, err := os.Lstat(probe); err == nil {
		t.Errorf("root through sudo in the desktop wrote the host's %s", probe)
	}
	// The host's /etc is the read-only base: the account is the desktop's.
	for _, f := range []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/sudoers", "/etc/hosts"} {
		if now, _ := os.ReadFile(f); !bytes.Equal(now, hostEtc[f]) {
			t.Errorf("the host's %s changed", f)
		}
	}
}

// /wallpaper answers the desktop's backdrop at first and, after
// change_wallpaper, that very file, whose picture the root window shows.
func TestDesktopOSWorldWallpaper(t *testing.T) {
	d := startDaemon(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	dt, err := d.c.CreateDesktop(context.Background(), &api.DesktopSpec{Width: 640, Height: 480, OSWorld: true})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	c := newOSWorldClient(t, dt.OSWorld)
	pixel := func(png []byte, x, y int) color.RGBA {
		t.Helper()
		img, _, err := image.Decode(bytes.NewReader(png))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		r, g, b, _ := img.At(x, y).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}
	}
	code, def := c.do("POST", "/wallpaper", "", nil)
	if code != 200 || pixel(def, 10, 10) != (color.RGBA{0x2E, 0x34, 0x40, 255}) {
		t.Fatalf("default wallpaper: %d, %d bytes", code, len(def))
	}
	// A picture half red, half blue (left, right), 64x32: zoomed over
	// 640x480 the screen's left edge is red and its right edge blue.
	img := image.NewRGBA(image.Rect(0, 0, 64, 32))
	for y := 0; y < 32; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, map[bool]color.RGBA{true: {255, 0, 0, 255}, false: {0, 0, 255, 255}}[x < 32])
		}
	}
	var pic bytes.Buffer
	png.Encode(&pic, img)
	c.upload("/home/user/Pictures/w.png", pic.Bytes())
	if code, b := c.json("POST", "/setup/change_wallpaper", map[string]string{"path": "~/Pictures/w.png"}); code != 200 {
		t.Fatalf("change_wallpaper: %d %s", code, b)
	}
	if code, b := c.do("POST", "/wallpaper", "", nil); code != 200 || !bytes.Equal(b, pic.Bytes()) {
		t.Fatalf("wallpaper after the change: %d, %d bytes, want the %d uploaded", code, len(b), pic.Len())
	}
	code, shot := c.do("GET", "/screenshot", "", nil)
	if code != 200 {
		t.Fatalf("screenshot: %d", code)
	}
	if l, r := pixel(shot, 5, 240), pixel(shot, 634, 240); l != (color.RGBA{255, 0, 0, 255}) || r != (color.RGBA{0, 0, 255, 255}) {
		t.Fatalf("the screen's edges are %v and %v, want the wallpaper's red and blue", l, r)
	}
	if out, _ := c.sh(`stat -c %U ~/Pictures/w.png ~/Pictures`); out != "user\nuser" {
		t.Fatalf("the uploaded file and its new directory are owned by %q, want user's", out)
	}
}

// /terminal reads what gnome-terminal shows, through the accessibility
// tree as OSWorld's server does, after a command was typed into it.
func TestDesktopOSWorldTerminal(t *testing.T) {
	d := startDaemon(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "gnome-terminal")
	require.Binary(t, "dbus-daemon")
	dt, err := d.c.CreateDesktop(context.Background(), &api.DesktopSpec{Width: 1024, Height: 768, OSWorld: true})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	c := newOSWorldClient(t, dt.OSWorld)
	if code, b := c.json("GET", "/terminal", nil); code != 200 || !bytes.Contains(b, []byte(`"output":null`)) {
		t.Fatalf("terminal before one runs: %d %s, want output null", code, b)
	}
	if code, b := c.json("POST", "/setup/launch", map[string]any{"command": []string{"gnome-terminal"}}); code != 200 {
		t.Fatalf("launch gnome-terminal: %d %s", code, b)
	}
	terminal := func() string {
		code, b := c.json("GET", "/terminal", nil)
		var res struct{ Output *string }
		if code != 200 || json.Unmarshal(b, &res) != nil {
			t.Fatalf("terminal: %d %s", code, b)
		}
		if res.Output == nil {
			return ""
		}
		return *res.Output
	}
	if !testbin.Eventually(patience, func() bool { return strings.Contains(terminal(), "$") }) {
		out, _ := c.sh("ps -eo user,args")
		t.Fatalf("no gnome-terminal prompt on /terminal: %q; processes:\n%s", terminal(), out)
	}
	const prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
	if code, b := c.json("POST", "/execute", map[string]any{"command": []string{"python", "-c", prefix + "pyautogui.write('echo tine-$((6*7))'); pyautogui.press('enter')"}}); code != 200 {
		t.Fatalf("type: %d %s", code, b)
	}
	// The typed line and its output, which only the shell could print.
	if !testbin.Eventually(patience, func() bool {
		s := terminal()
		return strings.Contains(s, "echo tine-$((6*7))") && strings.Contains(s, "\ntine-42")
	}) {
		t.Fatalf("terminal after typing: %q", terminal())
	}
}
