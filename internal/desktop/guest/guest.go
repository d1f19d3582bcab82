// Package guest is the desktop runtime that runs inside a desktop sandbox
// (`tine guest`, the same binary as the daemon): it starts Xvfb, a window
// manager and the requested apps, in that order, waits until each is
// really there, and serves the ACI on a unix socket. Pointed at a display
// that already exists (Options.Display), it only serves, so the ACI works
// in any Linux desktop tine did not start.
package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/aci"
	"github.com/tine-run/tine/internal/connpass"
	"github.com/tine-run/tine/internal/desktop/a11y"
	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfb"
	"github.com/tine-run/tine/internal/osworld"
)

// Backdrop is the root window's colour: a known pixel for tests and a
// quiet background for agents.
const Backdrop = 0x2E3440

// Options say what to start and where to serve.
type Options struct {
	// Display attaches to an existing X display instead of starting Xvfb.
	Display       string
	Width, Height int
	// WindowManager is the command started before the apps (default
	// openbox); "none" starts none.
	WindowManager []string
	Apps          [][]string
	// GLX keeps Xvfb's GLX extension (software OpenGL). Off by default:
	// it costs about 54 MiB of memory per desktop here, and browsers
	// render without it.
	GLX bool
	// NoSHM uses no System V shared memory at all (an X server keeping its
	// screen in its own memory, captures with GetImage): slower
	// screenshots, but the desktop can be checkpointed (ADR 0016).
	NoSHM bool
	// Listen is the unix socket the ACI is served on.
	Listen string
	// A11y starts a session bus so applications export their accessibility
	// trees (AT-SPI), read by the ACI's accessibility op and OSWorld's
	// /accessibility.
	A11y bool
	// CDP, when set, is a unix socket forwarded to 127.0.0.1:9222 inside
	// the desktop: Chromium's DevTools port, as OSWorld's setup reaches it.
	CDP string
	// OSWorld, when set, is a unix socket to serve OSWorld's guest API on
	// (internal/osworld).
	OSWorld string
	// OSWorldPassed, when set with OSWorld, is a unix socket on which the
	// daemon passes the connections it accepted on the desktop's
	// published port (internal/connpass): the API is served on them
	// directly.
	OSWorldPassed string
	// User, when set, is the account the session runs as (EnsureAccount
	// makes it in the desktop's /etc): the window manager, the apps, the
	// session bus, and OSWorld's commands; the guest itself, the X server
	// and the ACI's exec stay root. Only inside a sandbox (Run refuses it
	// over a root that is not an overlay).
	User string
	// Timeout bounds the start (default 30 s).
	Timeout time.Duration
}

// Ready is what Run reports once the desktop is up.
type Ready struct {
	Display string  `json:"display"`
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	ReadyMs float64 `json:"ready_ms"`
	Capture string  `json:"capture"` // x11.CaptureFramebuffer, CaptureSHM or CaptureGetImage
}

// Run starts the desktop and serves the ACI until ctx ends; ready is
// called once, when the desktop is ready and the socket listens.
func Run(ctx context.Context, o Options, ready func(Ready)) error {
	t0 := time.Now()
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	start, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var children []*exec.Cmd
	defer func() {
		for _, c := range children {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			c.Process.Kill()
			c.Wait()
		}
	}()
	var acct *Account
	var cred *syscall.Credential // the session's processes', nil: the guest's own
	if o.User != "" {
		var err error
		if acct, err = sessionAccount(o); err != nil {
			return err
		}
		cred = acct.Credential()
		// Every process the guest starts sees the account's home (OSWorld's
		// `~`, desktop_path) and starts in it (a terminal's first prompt is
		// `user@host:~$`); restored when the guest ends.
		defer setenv(acct.Env())()
		if err := os.Chdir(acct.Home); err != nil {
			return fmt.Errorf("session user %s: %w", o.User, err)
		}
	}
	display := o.Display
	framebuffer := -1
	var framebufferFile string
	if display == "" {
		cfg := xvfb.Config{Width: o.Width, Height: o.Height, GLX: o.GLX, NoSHM: o.NoSHM}
		if o.NoSHM {
			// The screen in a file of the sandbox's own /run, which the
			// memory tier carries with the images (ADR 0016).
			dir, err := framebufferDir()
			if err != nil {
				return fmt.Errorf("framebuffer directory: %w", err)
			}
			// Removed at the end, maybe before Xvfb is killed: its mapping
			// keeps the file until it exits.
			defer os.RemoveAll(dir)
			cfg.FBDir = dir
		}
		x, err := xvfb.Start(start, cfg)
		if err != nil {
			return err
		}
		children = append(children, x.Cmd)
		display, framebuffer, framebufferFile = x.Display, x.Framebuffer, x.FramebufferFile
	}
	// The bus starts once the display is known: what it activates (the
	// AT-SPI registry, gnome-terminal-server) needs DISPLAY.
	var bus *a11y.Bus
	if o.A11y {
		var err error
		bus, err = a11y.Start(start, cred, display)
		switch {
		case err != nil && o.OSWorld == "":
			return err
		case err != nil:
			// OSWorld's API works without the tree; /accessibility says why.
			fmt.Fprintf(os.Stderr, "tine guest: no accessibility tree: %v\n", err)
		}
	}
	if bus != nil {
		defer bus.Close()
		// Every process the desktop starts (apps, launch, exec, OSWorld's
		// commands) inherits the bus; restored when the guest ends, for
		// guests run inside a test binary.
		defer setenv(bus.Env)()
	}
	d, err := x11.Connect(display, x11.Options{NoSHM: o.NoSHM})
	if err != nil {
		return err
	}
	defer d.Close()
	if framebuffer >= 0 || framebufferFile != "" {
		// Captures then skip the X server's copy; when it fails they go
		// through MIT-SHM as before, so the error only costs speed.
		var err error
		if framebuffer >= 0 {
			err = d.UseFramebuffer(framebuffer)
		} else {
			err = d.UseFramebufferFile(framebufferFile)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tine guest: captures go through the X server: %v\n", err)
		}
	}
	if o.Display == "" {
		if err := d.PaintRoot(Backdrop); err != nil {
			return err
		}
	}
	wm := o.WindowManager
	if len(wm) == 0 {
		wm = []string{"openbox", "--sm-disable"}
	}
	if wm[0] != "none" {
		c, err := launch(display, wm, cred)
		if err != nil {
			return err
		}
		children = append(children, c)
		// Apps start only once the manager manages windows: one mapped
		// earlier can stay unmapped.
		if err := d.WaitWindowManager(start); err != nil {
			return err
		}
	}
	for _, app := range o.Apps {
		before, err := d.Windows()
		if err != nil {
			return err
		}
		known := map[uint32]bool{}
		for _, w := range before {
			known[w.ID] = true
		}
		c, err := launch(display, app, cred)
		if err != nil {
			return err
		}
		children = append(children, c)
		w, err := d.WaitForWindow(start, func(w x11.Window) bool { return !known[w.ID] })
		if err != nil {
			return fmt.Errorf("%s mapped no window: %w", app[0], err)
		}
		if err := d.FocusWindow(w.ID); err != nil {
			return fmt.Errorf("focus %s's window: %w", app[0], err)
		}
		if _, err := d.WaitForWindow(start, func(x x11.Window) bool { return x.ID == w.ID && x.Focused }); err != nil {
			return fmt.Errorf("%s's window never took the focus: %w", app[0], err)
		}
	}
	if len(o.Apps) > 0 && d.Damage() {
		// Mapped and focused is not drawn: the first screenshot an agent
		// takes should show the apps. Quiet for 50 ms, at most a second.
		idle, cancel := context.WithTimeout(start, time.Second)
		d.WaitScreenIdle(idle, 50*time.Millisecond)
		cancel()
	}
	os.Remove(o.Listen)
	l, err := net.Listen("unix", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Listen, err)
	}
	as := &aci.Server{D: d}
	var tree func(ctx context.Context) ([]*a11y.Node, error)
	if bus != nil {
		tree = func(ctx context.Context) ([]*a11y.Node, error) { return bus.Dump(ctx, display) }
		as.A11y = tree
	}
	d.SetLaunchCredential(cred)
	srv := &http.Server{Handler: as}
	if o.OSWorld != "" {
		stop, err := serveOSWorld(d, o.OSWorld, o.OSWorldPassed, tree, cred, o.Display == "")
		if err != nil {
			l.Close()
			return err
		}
		defer stop()
	}
	if o.CDP != "" {
		stop, err := forward(o.CDP, CDPAddr)
		if err != nil {
			l.Close()
			return err
		}
		defer stop()
	}
	w, h := d.Size()
	ready(Ready{Display: display, Width: w, Height: h, ReadyMs: float64(time.Since(t0).Microseconds()) / 1000,
		Capture: d.CaptureMethod()})
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// sessionAccount makes o.User's account, refusing where / is not a
// sandbox's overlay: on a host it would write the host's /etc.
func sessionAccount(o Options) (*Account, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return nil, fmt.Errorf("session user %s: %w", o.User, err)
	}
	if st.Type != unix.OVERLAYFS_SUPER_MAGIC || o.Display != "" {
		return nil, fmt.Errorf("session user %s: the guest makes accounts only in a desktop sandbox of its own (its root an overlay, no --display): here it would write this machine's /etc", o.User)
	}
	return EnsureAccount("/", o.User)
}

// launch starts argv on display in a process group of its own, as cred
// (nil: as the guest).
func launch(display string, argv []string, cred *syscall.Credential) (*exec.Cmd, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(os.Environ(), "DISPLAY="+display)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return c, nil
}

// serveOSWorld serves OSWorld's guest API on a unix socket, and on the
// connections passed to a second one when passed is set, until stop.
func serveOSWorld(d *x11.Display, socket, passed string, tree func(context.Context) ([]*a11y.Node, error), cred *syscall.Credential, painted bool) (stop func(), err error) {
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if cred != nil {
		// tine's pyautogui module, in the session user's python3, calls
		// back through it.
		if err := os.Chmod(socket, 0o666); err != nil {
			l.Close()
			return nil, fmt.Errorf("open %s to the session user: %w", socket, err)
		}
	}
	ow, err := osworld.New(d, socket)
	if err != nil {
		l.Close()
		return nil, err
	}
	ow.A11y = tree
	ow.Cred = cred
	if painted {
		if err := ow.DefaultWallpaper(Backdrop); err != nil {
			ow.Close()
			l.Close()
			return nil, err
		}
	}
	var pl *connpass.Listener
	if passed != "" {
		if pl, err = connpass.Listen(passed); err != nil {
			ow.Close()
			l.Close()
			return nil, err
		}
	}
	srv := &http.Server{Handler: ow}
	go srv.Serve(l)
	if pl != nil {
		go srv.Serve(pl)
	}
	return func() {
		srv.Close()
		ow.Close()
	}, nil
}

// setenv sets the KEY=VALUE pairs in this process and returns what puts
// the old values back.
func setenv(kvs []string) (restore func()) {
	var undo []func()
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		undo = append(undo, func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// CDPAddr is where Chromium's DevTools listen in a desktop (OSWorld
// launches Chrome with --remote-debugging-port and forwards 9222 to it).
const CDPAddr = "127.0.0.1:9222"

// forward accepts connections on a unix socket and splices each to addr
// inside the desktop, until stop.
func forward(socket, addr string) (stop func(), err error) {
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				t, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nnothing listens on "+addr+" in the desktop (start Chromium with --remote-debugging-port=9222)\n")
					return
				}
				defer t.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(t, c); t.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, t); c.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return func() { l.Close() }, nil
}
