// Package osworld serves OSWorld's guest API (its desktop_env/server, the
// Flask app a VM runs on port 5000) for a tine desktop: the same routes,
// methods, bodies, response shapes and status codes, as plain HTTP with no
// path prefix, so OSWorld's PythonController and SetupController drive a
// tine desktop unchanged. The daemon publishes it on a loopback TCP port
// per desktop (`"osworld": true`). pyautogui programs run natively when
// they are plain calls (fast.go) and otherwise in a real python3 with
// tine's own pyautogui module (python/), which calls back into this
// server over its unix socket (pyautogui.go holds the one implementation
// both use). docs/osworld.md is the reference.
package osworld

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/tine-run/tine/internal/desktop/a11y"
	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/record"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// OSWorld's timeouts.
const (
	executeTimeout   = 120 * time.Second
	runPythonTimeout = 30 * time.Second
	verifyTimeout    = 5 * time.Second
	openFileTimeout  = 1800 * time.Second
	downloadTimeout  = 300 * time.Second
	maxUpload        = 1 << 30
)

// PathHeader, on /execute's answers, says how the command ran: "fast"
// (natively, fast.go) or "process". OSWorld's client ignores it.
const PathHeader = "X-Tine-Path"

// EnvSocket names the environment variable that tells tine's pyautogui
// module where the guest's OSWorld socket is.
const EnvSocket = "TINE_GUEST_SOCKET"

//go:embed python/pyautogui/__init__.py
var pythonFiles embed.FS

// Server is the OSWorld facade of one display.
type Server struct {
	D *x11.Display
	// Socket is the unix socket this server is reached on inside the
	// desktop: pyautogui programs in python3 call back through it.
	Socket string
	// Env is the base environment of the commands the routes run
	// (default os.Environ()); DISPLAY and tine's Python path are added.
	Env []string
	// A11y, when set, reads the accessibility tree for /accessibility and
	// /terminal.
	A11y func(ctx context.Context) ([]*a11y.Node, error)
	// Cred, when set, is the session account the commands run as, and
	// owns the files the routes write (OSWorld's server runs as `user`).
	Cred *syscall.Credential

	p       *PyAutoGUI
	pyDir   string // tine's python modules and bin/python
	python3 string
	mux     *http.ServeMux

	mu       sync.Mutex
	lastShot struct {
		hash frame.Hash
		png  []byte
	}
	// shotMu holds shotBuf, the pixel memory every screenshot captures
	// into: a fresh 4 MB frame per request cost more in page faults and
	// garbage collection than copying the screen into it.
	shotMu    sync.Mutex
	shotBuf   *frame.Frame
	wallpaper string
	rec       *record.Recorder
}

// New prepares the facade: it writes tine's pyautogui module and a
// `python` for python3 (OSWorld runs `python`) into a temporary directory.
func New(d *x11.Display, socket string) (*Server, error) {
	s := &Server{D: d, Socket: socket, p: &PyAutoGUI{D: d}}
	dir, err := os.MkdirTemp("", "tine-osworld-")
	if err != nil {
		return nil, fmt.Errorf("osworld: %w", err)
	}
	s.pyDir = dir
	os.Chmod(dir, 0o755) // the session account's python3 reads the module
	sub, _ := fs.Sub(pythonFiles, "python")
	if err := os.CopyFS(filepath.Join(dir, "lib"), sub); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("osworld: write tine's pyautogui module: %w", err)
	}
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	if py := lookPath("python3", envPath(os.Environ())); py != "" {
		s.python3 = py
		os.Symlink(py, filepath.Join(bin, "python"))
	}
	if chromium := lookPath("chromium", envPath(os.Environ())); chromium != "" && os.Geteuid() == 0 {
		// OSWorld's tasks launch google-chrome; Debian has chromium, and
		// a desktop's processes run as root, which Chromium's own sandbox
		// refuses: it runs with it off, inside tine's (docs/osworld.md).
		wrapper := "#!/bin/sh\nexec " + chromium + " --no-sandbox --test-type \"$@\"\n"
		for _, name := range []string{"google-chrome", "google-chrome-stable", "chromium"} {
			os.WriteFile(filepath.Join(bin, name), []byte(wrapper), 0o755)
		}
	}
	s.routes()
	return s, nil
}

// Close stops a recording and removes the temporary directory.
func (s *Server) Close() error {
	s.mu.Lock()
	rec := s.rec
	s.rec = nil
	s.mu.Unlock()
	if rec != nil {
		rec.Stop(context.Background())
		os.Remove(rec.Path())
	}
	return os.RemoveAll(s.pyDir)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /execute", s.execute)
	m.HandleFunc("POST /setup/execute", s.execute)
	m.HandleFunc("POST /execute_with_verification", s.executeWithVerification)
	m.HandleFunc("POST /setup/execute_with_verification", s.executeWithVerification)
	m.HandleFunc("POST /setup/launch", s.launch)
	m.HandleFunc("GET /screenshot", s.screenshot)
	m.HandleFunc("GET /accessibility", s.accessibility)
	m.HandleFunc("GET /terminal", s.terminal)
	m.HandleFunc("POST /screen_size", s.screenSize)
	m.HandleFunc("POST /window_size", s.windowSize)
	m.HandleFunc("POST /desktop_path", s.desktopPath)
	m.HandleFunc("POST /wallpaper", s.getWallpaper)
	m.HandleFunc("POST /list_directory", s.listDirectory)
	m.HandleFunc("POST /file", s.file)
	m.HandleFunc("POST /setup/upload", s.upload)
	m.HandleFunc("GET /platform", func(w http.ResponseWriter, r *http.Request) { text(w, 200, "Linux") })
	m.HandleFunc("GET /cursor_position", s.cursorPosition)
	m.HandleFunc("POST /setup/change_wallpaper", s.changeWallpaper)
	m.HandleFunc("POST /setup/download_file", s.downloadFile)
	m.HandleFunc("POST /setup/open_file", s.openFile)
	m.HandleFunc("POST /setup/activate_window", s.windowAction(true))
	m.HandleFunc("POST /setup/close_window", s.windowAction(false))
	m.HandleFunc("POST /start_recording", s.startRecording)
	m.HandleFunc("POST /end_recording", s.endRecording)
	m.HandleFunc("POST /run_python", s.runPython)
	m.HandleFunc("POST /run_bash_script", s.runBashScript)
	// tine's pyautogui module calls back here (python/pyautogui).
	m.HandleFunc("POST /tine/pyautogui", s.pyCall)
	m.HandleFunc("GET /tine/pyautogui", s.pyInfo)
	m.HandleFunc("GET /tine/screenshot", func(w http.ResponseWriter, r *http.Request) { s.sendScreenshot(w, false) })
	s.mux = m
}

// Replies as Flask's: jsonify (sorted keys, a newline), or a str view's
// text/html.
func reply(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func text(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

type obj = map[string]any

// jsonBody decodes a JSON request body into a generic map (request.json);
// a body that is not JSON is Flask's 400.
func jsonBody(w http.ResponseWriter, r *http.Request) (obj, bool) {
	var m obj
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		text(w, http.StatusBadRequest, "Bad Request: the body is not a JSON object ("+errString(err)+")")
		return nil, false
	}
	return m, true
}

func errString(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

func str(m obj, key string) string {
	s, _ := m[key].(string)
	return s
}

func boolean(m obj, key string) bool {
	b, _ := m[key].(bool)
	return b
}

func number(m obj, key string, def float64) float64 {
	if n, ok := m[key].(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	return def
}

// defaultPath is the PATH of commands when the guest has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func envPath(env []string) string {
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			return p
		}
	}
	return defaultPath
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// lookPath finds an executable name in path, "" when there is none.
func lookPath(name, path string) string {
	for _, dir := range filepath.SplitList(path) {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

// env is the environment of the commands the routes run.
func (s *Server) env() []string {
	base := s.Env
	if base == nil {
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+4)
	path, pypath := defaultPath, ""
	for _, kv := range base {
		switch {
		case strings.HasPrefix(kv, "PATH="):
			path = kv[5:]
		case strings.HasPrefix(kv, "PYTHONPATH="):
			pypath = kv[11:]
		case strings.HasPrefix(kv, "DISPLAY="), strings.HasPrefix(kv, EnvSocket+"="):
		default:
			env = append(env, kv)
		}
	}
	lib := filepath.Join(s.pyDir, "lib")
	if pypath != "" {
		lib += ":" + pypath
	}
	return append(env, "PATH="+filepath.Join(s.pyDir, "bin")+":"+path, "PYTHONPATH="+lib,
		"DISPLAY="+s.D.Name(), EnvSocket+"="+s.Socket)
}

// command reads OSWorld's {command, shell}: a list, or a string that
// shlex.split splits unless shell; "~/" arguments expanded.
func command(m obj) (argv []string, shell bool, err error) {
	shell = boolean(m, "shell")
	switch c := m["command"].(type) {
	case string:
		if shell {
			return []string{c}, true, nil
		}
		if argv, err = shlexSplit(c); err != nil {
			return nil, false, err
		}
	case []any:
		for _, a := range c {
			s, ok := a.(string)
			if !ok {
				return nil, false, fmt.Errorf("expected str, bytes or os.PathLike object, not %T", a)
			}
			argv = append(argv, s)
		}
	case nil:
	default:
		return nil, false, fmt.Errorf("'%T' object is not iterable", c)
	}
	home, _ := os.UserHomeDir()
	for i, a := range argv {
		if strings.HasPrefix(a, "~/") && home != "" {
			argv[i] = filepath.Join(home, a[2:])
		}
	}
	if len(argv) == 0 {
		return nil, shell, errors.New("list index out of range: no command")
	}
	return argv, shell, nil
}

// cmd makes the process for argv (shell: sh -c argv[0] with the rest as
// its arguments, as subprocess does) in a process group of its own.
func (s *Server) cmd(ctx context.Context, argv []string, shell bool) *exec.Cmd {
	if shell {
		argv = append([]string{"/bin/sh", "-c"}, argv...)
	}
	env := s.env()
	name := argv[0]
	if !strings.Contains(name, "/") {
		// exec.Command would search the guest's own PATH (a desktop's
		// sandbox may have none), not the command's.
		if p := lookPath(name, envPath(env)); p != "" {
			name = p
		}
	}
	c := exec.CommandContext(ctx, name, argv[1:]...)
	c.Args[0] = argv[0]
	c.Env = env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.Cred}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	// subprocess.run waits for the output to close; a background child
	// holding it must not hold the answer for ever.
	c.WaitDelay = 250 * time.Millisecond
	return c
}

// timeoutError is subprocess's TimeoutExpired: the command ran too long
// and was killed; its message is Python's.
type timeoutError struct{ msg string }

func (e timeoutError) Error() string { return e.msg }

type runResult struct {
	stdout, stderr string
	code           int
}

// run runs a command to its end (or timeout), as subprocess.run with
// text=True; err is what Python would raise (not found, timeout).
func (s *Server) run(ctx context.Context, argv []string, shell bool, timeout time.Duration, mergeStderr bool, dir string) (runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := s.cmd(ctx, argv, shell)
	c.Dir = dir
	var out, errOut bytes.Buffer
	c.Stdout = &out
	c.Stderr = &errOut
	if mergeStderr {
		c.Stderr = &out
	}
	err := c.Run()
	res := runResult{stdout: strings.ToValidUTF8(out.String(), "\uFFFD"), stderr: strings.ToValidUTF8(errOut.String(), "\uFFFD")}
	if ctx.Err() == context.DeadlineExceeded {
		return res, timeoutError{fmt.Sprintf("Command '%s' timed out after %g seconds", pyList(argv, shell), timeout.Seconds())}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.code = -int(ws.Signal()) // Python's returncode for a signal
		}
	case errors.Is(err, exec.ErrWaitDelay):
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return res, fmt.Errorf("[Errno 2] No such file or directory: '%s'", argv[0])
	case errors.Is(err, fs.ErrPermission):
		return res, fmt.Errorf("[Errno 13] Permission denied: '%s'", argv[0])
	default:
		return res, err
	}
	return res, nil
}

func pyList(argv []string, shell bool) string {
	if shell && len(argv) == 1 {
		return argv[0]
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", "\\'") + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// runCommand is /execute's run: the fast path when the command is a
// pyautogui program it understands, a process otherwise.
func (s *Server) runCommand(ctx context.Context, w http.ResponseWriter, argv []string, shell bool) (runResult, error) {
	if !shell {
		if prog, ok := fastProgram(argv); ok {
			w.Header().Set(PathHeader, "fast")
			ctx, cancel := context.WithTimeout(ctx, executeTimeout)
			defer cancel()
			return runResult{}, prog.run(ctx, s.p)
		}
	}
	w.Header().Set(PathHeader, "process")
	return s.run(ctx, argv, shell, executeTimeout, false, "")
}

// runBody runs a request's {command, shell} as /execute does; ok is
// false when it has answered the error (500 {status, message}).
func (s *Server) runBody(w http.ResponseWriter, r *http.Request) (m obj, body obj, ok bool) {
	if m, ok = jsonBody(w, r); !ok {
		return nil, nil, false
	}
	argv, shell, err := command(m)
	var res runResult
	if err == nil {
		res, err = s.runCommand(r.Context(), w, argv, shell)
	}
	if err != nil {
		reply(w, 500, obj{"status": "error", "message": err.Error()})
		return nil, nil, false
	}
	return m, obj{"status": "success", "output": res.stdout, "error": res.stderr, "returncode": res.code}, true
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	if _, body, ok := s.runBody(w, r); ok {
		reply(w, 200, body)
	}
}

func (s *Server) executeWithVerification(w http.ResponseWriter, r *http.Request) {
	m, body, ok := s.runBody(w, r)
	if !ok {
		return
	}
	verification, _ := m["verification"].(map[string]any)
	maxWait := number(m, "max_wait_time", 10)
	interval := number(m, "check_interval", 1)
	if len(verification) == 0 {
		reply(w, 200, body)
		return
	}
	start := time.Now()
	for time.Since(start).Seconds() < maxWait {
		passed := true
		if name, ok := verification["window_exists"].(string); ok {
			passed = s.windowTitled(name)
		}
		if check, ok := verification["command_success"].(string); ok && passed {
			res, err := s.run(r.Context(), []string{check}, true, verifyTimeout, false, "")
			passed = err == nil && res.code == 0
		}
		if passed {
			body["verification"], body["wait_time"] = "passed", time.Since(start).Seconds()
			reply(w, 200, body)
			return
		}
		if sleep(r.Context(), interval) != nil {
			return
		}
	}
	body["status"], body["verification"], body["wait_time"] = "verification_failed", "failed", maxWait
	reply(w, 500, body)
}

// windowTitled is the `wmctrl -l` check: a window whose title contains
// name, ignoring case.
func (s *Server) windowTitled(name string) bool {
	ws, err := s.D.Windows()
	if err != nil {
		return false
	}
	for _, win := range ws {
		if strings.Contains(strings.ToLower(win.Title), strings.ToLower(name)) {
			return true
		}
	}
	return false
}

func (s *Server) launch(w http.ResponseWriter, r *http.Request) {
	m, ok := jsonBody(w, r)
	if !ok {
		return
	}
	argv, shell, err := command(m)
	if err != nil {
		reply(w, 500, obj{"status": "error", "message": err.Error()})
		return
	}
	for i, a := range argv {
		if a == "google-chrome" && lookPath(a, envPath(s.env())) == "" {
			argv[i] = "chromium" // Debian's; OSWorld does the same on ARM
		}
	}
	c := s.cmd(context.Background(), argv, shell)
	c.Stdout, c.Stderr = nil, nil
	if err := c.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("[Errno 2] No such file or directory: '%s'", argv[0])
		}
		reply(w, 500, obj{"status": "error", "message": err.Error()})
		return
	}
	go c.Wait()
	shown := strings.Join(argv, " ")
	if shell {
		shown = argv[0]
	}
	text(w, 200, shown+" launched successfully")
}

func (s *Server) screenshot(w http.ResponseWriter, r *http.Request) {
	s.sendScreenshot(w, true)
}

// sendScreenshot answers with the screen as PNG. A picture equal to the
// last one sent (same frame hash: the same pixels, the cursor drawn in) is
// sent again without encoding it again.
func (s *Server) sendScreenshot(w http.ResponseWriter, cursor bool) {
	png, err := s.screenshotPNG(cursor)
	if err != nil {
		text(w, 500, "Internal Server Error: screenshot: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "image/png")
	// With its length, as Flask's send_file answers, not chunked.
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Write(png)
}

// screenshotPNG captures the screen into shotBuf and encodes it, unless
// its hash is the last picture's.
func (s *Server) screenshotPNG(cursor bool) ([]byte, error) {
	s.shotMu.Lock()
	defer s.shotMu.Unlock()
	f, err := s.D.CaptureInto(s.shotBuf, zeroRect, cursor)
	if err != nil {
		return nil, err
	}
	s.shotBuf = f
	hash := f.Hash()
	s.mu.Lock()
	png := s.lastShot.png
	if s.lastShot.hash != hash {
		png = nil
	}
	s.mu.Unlock()
	if png != nil {
		return png, nil
	}
	if png, err = encode.Encode(f, encode.FormatPNG, 0); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.lastShot.hash, s.lastShot.png = hash, png
	s.mu.Unlock()
	return png, nil
}

func (s *Server) accessibility(w http.ResponseWriter, r *http.Request) {
	if s.A11y == nil {
		text(w, 500, "Internal Server Error: this desktop has no accessibility bus (create it with \"a11y\": true or \"osworld\": true)")
		return
	}
	apps, err := s.A11y(r.Context())
	if err != nil {
		text(w, 500, "Internal Server Error: accessibility tree: "+err.Error())
		return
	}
	reply(w, 200, obj{"AT": a11y.XML(apps)})
}

// terminal is OSWorld's: the text of the one focused terminal in an
// active frame of gnome-terminal-server, read through AT-SPI; null when
// there is none (or the desktop has no accessibility bus).
func (s *Server) terminal(w http.ResponseWriter, r *http.Request) {
	var output any
	if s.A11y != nil {
		apps, err := s.A11y(r.Context())
		if err != nil {
			reply(w, 500, obj{"status": "error", "message": err.Error()})
			return
		}
		var found []*a11y.Node
		for _, app := range apps {
			if app.Role != "application" || app.Name != "gnome-terminal-server" {
				continue
			}
			for _, f := range app.Children {
				if f.Role == "frame" && slices.Contains(f.States, "active") {
					found = append(found, focusedTerminals(f)...)
				}
			}
		}
		if len(found) == 1 && found[0].Text != nil {
			output = strings.TrimRightFunc(*found[0].Text, unicode.IsSpace)
		}
	}
	reply(w, 200, obj{"output": output, "status": "success"})
}

func focusedTerminals(n *a11y.Node) []*a11y.Node {
	var out []*a11y.Node
	for _, c := range n.Children {
		if c.Role == "terminal" && slices.Contains(c.States, "focused") {
			out = append(out, c)
		}
		out = append(out, focusedTerminals(c)...)
	}
	return out
}

func (s *Server) screenSize(w http.ResponseWriter, r *http.Request) {
	wd, ht := s.D.Size()
	reply(w, 200, obj{"width": wd, "height": ht})
}

func (s *Server) windowSize(w http.ResponseWriter, r *http.Request) {
	name := r.FormValue("app_class_name")
	if _, ok := r.Form["app_class_name"]; !ok {
		reply(w, 400, obj{"error": "app_class_name is required"})
		return
	}
	ws, err := s.D.Windows()
	if err == nil {
		for _, win := range ws {
			if strings.EqualFold(win.Class, name) || strings.EqualFold(win.Instance, name) {
				reply(w, 200, obj{"width": win.Width, "height": win.Height})
				return
			}
		}
	}
	// OSWorld's view returns None here, which Flask answers with a 500.
	text(w, 500, "Internal Server Error: no window of class "+name)
}

func (s *Server) desktopPath(w http.ResponseWriter, r *http.Request) {
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, "Desktop")
	if st, err := os.Stat(p); home != "" && err == nil && st.IsDir() {
		reply(w, 200, obj{"desktop_path": p})
		return
	}
	reply(w, 404, obj{"error": "Unsupported operating system or desktop path not found"})
}

func (s *Server) getWallpaper(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p := s.wallpaper
	s.mu.Unlock()
	if p == "" {
		text(w, 404, "Not Found: Wallpaper file not found")
		return
	}
	data, err := os.ReadFile(p)
	if err != nil {
		text(w, 500, "Internal Server Error: Unable to serve the wallpaper file")
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(data)
}

// own gives p to the session account, as if it had written it.
func (s *Server) own(p string) {
	if s.Cred != nil {
		os.Lchown(p, int(s.Cred.Uid), int(s.Cred.Gid))
	}
}

// mkdirAll makes dir and its missing parents, owned by the session
// account (os.makedirs in OSWorld's server, which runs as it).
func (s *Server) mkdirAll(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := s.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	s.own(dir)
	return nil
}

// expand is os.path.expandvars(os.path.expanduser(p)).
func expand(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = home + p[1:]
		}
	}
	return os.Expand(p, func(k string) string {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
		return "$" + k // expandvars leaves unknown variables as they are
	})
}

type dirTree struct {
	Type     string     `json:"type,omitempty"`
	Name     string     `json:"name,omitempty"`
	Children []*dirTree `json:"children,omitempty"`
	Error    string     `json:"error,omitempty"`
}

func listTree(dir string) *dirTree {
	t := &dirTree{Type: "directory", Name: filepath.Base(dir), Children: []*dirTree{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return &dirTree{Error: err.Error()}
	}
	for _, e := range entries {
		full := filepath.Join(dir, e.Name())
		if st, err := os.Stat(full); err == nil && st.IsDir() {
			t.Children = append(t.Children, listTree(full))
		} else {
			t.Children = append(t.Children, &dirTree{Type: "file", Name: e.Name()})
		}
	}
	return t
}

func (t *dirTree) MarshalJSON() ([]byte, error) {
	switch {
	case t.Error != "":
		return json.Marshal(obj{"error": t.Error})
	case t.Type == "file":
		return json.Marshal(obj{"name": t.Name, "type": "file"})
	}
	return json.Marshal(obj{"children": t.Children, "name": t.Name, "type": "directory"})
}

func (s *Server) listDirectory(w http.ResponseWriter, r *http.Request) {
	m, ok := jsonBody(w, r)
	if !ok {
		return
	}
	p, has := m["path"].(string)
	if _, present := m["path"]; !present {
		reply(w, 400, obj{"error": "Missing 'path' parameter"})
		return
	}
	if st, err := os.Stat(p); !has || err != nil || !st.IsDir() {
		reply(w, 400, obj{"error": "The provided path is not a directory"})
		return
	}
	reply(w, 200, obj{"directory_tree": listTree(p)})
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	r.ParseMultipartForm(32 << 20)
	if _, ok := r.Form["file_path"]; !ok {
		reply(w, 400, obj{"error": "file_path is required"})
		return
	}
	p := expand(r.FormValue("file_path"))
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			reply(w, 404, obj{"error": "File not found"})
			return
		}
		reply(w, 500, obj{"error": "Failed to serve file: " + err.Error()})
		return
	}
	defer f.Close()
	ctype := mime.TypeByExtension(filepath.Ext(p))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	io.Copy(w, f)
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	if err := r.ParseMultipartForm(32 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		reply(w, 400, obj{"error": "file_path and file_data are required"})
		return
	}
	file, _, ferr := r.FormFile("file_data")
	if _, ok := r.Form["file_path"]; !ok || ferr != nil {
		reply(w, 400, obj{"error": "file_path and file_data are required"})
		return
	}
	defer file.Close()
	p := expand(r.FormValue("file_path"))
	n, err := s.saveFile(p, file)
	if err != nil {
		os.Remove(p)
		reply(w, 500, obj{"error": "Failed to upload file: " + err.Error()})
		return
	}
	text(w, 200, fmt.Sprintf("File Uploaded: %d bytes", n))
}

func (s *Server) saveFile(p string, src io.Reader) (int64, error) {
	if err := s.mkdirAll(filepath.Dir(p)); err != nil {
		return 0, err
	}
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	s.own(p)
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (s *Server) cursorPosition(w http.ResponseWriter, r *http.Request) {
	p, err := s.D.CursorPosition()
	if err != nil {
		text(w, 500, "Internal Server Error: "+err.Error())
		return
	}
	reply(w, 200, []int{p.X, p.Y})
}

// pathBody reads a {path} body; ok is false when it has answered (400
// without a path).
func pathBody(w http.ResponseWriter, r *http.Request) (path string, ok bool) {
	m, ok := jsonBody(w, r)
	if !ok {
		return "", false
	}
	if path = str(m, "path"); path == "" {
		text(w, 400, "Path not supplied!")
		return "", false
	}
	return path, true
}

func (s *Server) changeWallpaper(w http.ResponseWriter, r *http.Request) {
	path, ok := pathBody(w, r)
	if !ok {
		return
	}
	p := expand(path)
	if _, err := os.Stat(p); err != nil {
		text(w, 404, "File not found: "+p)
		return
	}
	// What gsettings' picture-uri would hold: /wallpaper serves it, and
	// the root window shows it (tine's desktops have no GNOME to draw it).
	// A file that is no picture is kept but not drawn, as GNOME would.
	s.mu.Lock()
	s.wallpaper = p
	s.mu.Unlock()
	if err := s.paintWallpaper(p); err != nil {
		fmt.Fprintf(os.Stderr, "tine guest: wallpaper not drawn: %v\n", err)
	}
	text(w, 200, "Wallpaper changed successfully")
}

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request) {
	m, ok := jsonBody(w, r)
	if !ok {
		return
	}
	url, p := str(m, "url"), str(m, "path")
	if url == "" || p == "" {
		text(w, 400, "Path or URL not supplied!")
		return
	}
	p = expand(p)
	s.mkdirAll(filepath.Dir(p))
	var lastErr error
	for range 3 {
		n, err := s.download(r.Context(), url, p)
		if err == nil {
			text(w, 200, fmt.Sprintf("File downloaded successfully: %d bytes", n))
			return
		}
		lastErr = err
		os.Remove(p)
		if r.Context().Err() != nil {
			return
		}
	}
	text(w, 500, fmt.Sprintf("Failed to download %s. No retries left. Error: %v", url, lastErr))
}

func (s *Server) download(ctx context.Context, url, p string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return 0, fmt.Errorf("%d %s for url: %s", resp.StatusCode, http.StatusText(resp.StatusCode), url)
	}
	n, err := s.saveFile(p, resp.Body)
	if err != nil {
		return n, err
	}
	if resp.ContentLength > 0 && n != resp.ContentLength {
		return n, fmt.Errorf("Download incomplete. Expected %d bytes, got %d bytes", resp.ContentLength, n)
	}
	return n, nil
}

func (s *Server) openFile(w http.ResponseWriter, r *http.Request) {
	path, ok := pathBody(w, r)
	if !ok {
		return
	}
	p := expand(path)
	var argv []string
	name, stem := filepath.Base(p), strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
	if _, err := os.Stat(p); err == nil {
		argv = []string{"xdg-open", p}
	} else if lookPath(path, envPath(s.env())) != "" || (strings.Contains(path, "/") && isExecutable(path)) {
		argv, name, stem = []string{path}, path, path
	} else {
		text(w, 404, "Application/file not found: "+path)
		return
	}
	c := s.cmd(context.Background(), argv, false)
	if err := c.Start(); err != nil {
		text(w, 500, fmt.Sprintf("Failed to open %s. Error: %v", path, err))
		return
	}
	go c.Wait()
	ctx, cancel := context.WithTimeout(r.Context(), openFileTimeout)
	defer cancel()
	win, err := s.D.WaitForWindow(ctx, func(x x11.Window) bool {
		return strings.Contains(x.Title, name) || strings.Contains(x.Title, stem)
	})
	if err != nil {
		text(w, 500, fmt.Sprintf("Failed to find window for %s within %d seconds.", name, int(openFileTimeout.Seconds())))
		return
	}
	s.D.FocusWindow(win.ID)
	text(w, 200, "File opened and window activated successfully")
}

// windowAction is activate_window and close_window: wmctrl -a / -c with
// -x (match WM_CLASS, "instance.Class") and -F (exact, case-sensitive)
// as OSWorld passes them; the answer is 200 whether a window matched.
func (s *Server) windowAction(activate bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := jsonBody(w, r)
		if !ok {
			return
		}
		name, has := m["window_name"].(string)
		if !has || (activate && name == "") {
			text(w, 400, "window_name required")
			return
		}
		strict, byClass := boolean(m, "strict"), boolean(m, "by_class")
		if ws, err := s.D.Windows(); err == nil {
			for _, win := range ws {
				field := win.Title
				if byClass {
					field = win.Instance + "." + win.Class
				}
				if (strict && field == name) || (!strict && strings.Contains(strings.ToLower(field), strings.ToLower(name))) {
					if activate {
						s.D.FocusWindow(win.ID)
					} else {
						s.D.CloseWindow(win.ID)
					}
					break
				}
			}
		}
		if activate {
			text(w, 200, "Window activated successfully")
		} else {
			text(w, 200, "Window closed successfully.")
		}
	}
}

func (s *Server) startRecording(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec != nil && s.rec.Running() {
		reply(w, 400, obj{"status": "error", "message": "Recording is already in progress."})
		return
	}
	if s.rec != nil {
		s.rec.Stop(r.Context())
		s.rec = nil
	}
	p := filepath.Join(os.TempDir(), "osworld_recording.mp4")
	os.Remove(p)
	rec, err := record.Start(s.D, record.Options{FPS: 30, Path: p, Cursor: true})
	if err != nil {
		reply(w, 500, obj{"status": "error", "message": "Failed to start recording. " + err.Error()})
		return
	}
	s.rec = rec
	reply(w, 200, obj{"status": "success", "message": "Started recording successfully."})
}

func (s *Server) endRecording(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	rec := s.rec
	s.rec = nil
	s.mu.Unlock()
	if rec == nil {
		reply(w, 400, obj{"status": "error", "message": "No recording in progress to stop."})
		return
	}
	if err := rec.Stop(r.Context()); err != nil {
		text(w, 500, "Internal Server Error: Recording failed. "+err.Error())
		return
	}
	f, err := os.Open(rec.Path())
	if err != nil {
		text(w, 500, "Internal Server Error: Recording failed. The output file is missing or empty.")
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "video/mp4")
	w.Header().Set("Content-Disposition", `attachment; filename=osworld_recording.mp4`)
	io.Copy(w, f)
}

func randomHex() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) runPython(w http.ResponseWriter, r *http.Request) {
	m, ok := jsonBody(w, r)
	if !ok {
		return
	}
	code := str(m, "code")
	if code == "" {
		reply(w, 400, obj{"status": "error", "message": "Code not supplied!"})
		return
	}
	p := filepath.Join(os.TempDir(), "python_exec_"+randomHex()+".py")
	defer os.Remove(p)
	if err := os.WriteFile(p, []byte(code), 0o600); err != nil {
		reply(w, 500, obj{"status": "error", "message": "Execution error: " + err.Error(), "error": err.Error(), "need_more": false, "output": nil})
		return
	}
	s.own(p)
	py := "/usr/bin/python3" // OSWorld's, when there is one
	if !isExecutable(py) {
		py = cmp.Or(s.python3, "python3")
	}
	res, err := s.run(r.Context(), []string{py, p}, false, runPythonTimeout, false, "")
	if err != nil {
		if errors.As(err, new(timeoutError)) {
			reply(w, 500, obj{"status": "error", "message": "Execution timeout: Code took too long to execute", "error": "TimeoutExpired", "need_more": false, "output": nil})
			return
		}
		reply(w, 500, obj{"status": "error", "message": "Execution error: " + err.Error(), "error": err.Error(), "need_more": false, "output": nil})
		return
	}
	message, errOut, status := res.stdout, res.stderr, "success"
	if errOut != "" {
		if message != "" {
			message += "\n"
		}
		message += errOut
	}
	if res.code != 0 {
		status = "error"
		if errOut == "" {
			errOut = fmt.Sprintf("Process exited with code %d", res.code)
			if message != "" {
				message += "\n"
			}
			message += errOut
		}
	}
	reply(w, 200, obj{"status": status, "message": message, "need_more": false, "output": res.stdout, "error": errOut, "return_code": res.code})
}

func (s *Server) runBashScript(w http.ResponseWriter, r *http.Request) {
	m, ok := jsonBody(w, r)
	if !ok {
		return
	}
	script := str(m, "script")
	timeout := number(m, "timeout", 100)
	dir := str(m, "working_dir")
	fail := func(code int, out string) {
		reply(w, code, obj{"status": "error", "output": out, "error": "", "returncode": -1})
	}
	if script == "" {
		fail(400, "Script not supplied!")
		return
	}
	if dir != "" {
		dir = expand(dir)
		if _, err := os.Stat(dir); err != nil {
			fail(400, "Working directory does not exist: "+dir)
			return
		}
	}
	if !strings.Contains(script, "#!/bin/bash") {
		script = "#!/bin/bash\n\n" + script
	}
	p := filepath.Join(os.TempDir(), "tmp"+randomHex()[:8]+".sh")
	defer os.Remove(p)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		fail(500, err.Error())
		return
	}
	s.own(p)
	res, err := s.run(r.Context(), []string{"/bin/bash", p}, false, time.Duration(timeout*float64(time.Second)), true, dir)
	if err != nil {
		if errors.As(err, new(timeoutError)) {
			fail(500, fmt.Sprintf("Script execution timed out after %g seconds", timeout))
			return
		}
		fail(500, err.Error())
		return
	}
	status := "success"
	if res.code != 0 {
		status = "error"
	}
	reply(w, 200, obj{"status": status, "output": res.stdout, "error": "", "returncode": res.code})
}
