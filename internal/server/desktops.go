package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/inroot"
	"github.com/tine-run/tine/internal/runcli"
	"github.com/tine-run/tine/internal/sandbox"
)

// Where a desktop's sandbox sees the tine binary (bound read-only) and
// where its guest serves the ACI.
const (
	guestBinary = "/tine/bin/tine"
	guestSocket = "/run/tine-aci.sock"
	// desktopMemory is a desktop's memory limit unless the spec says.
	desktopMemory = 1 << 30
	// guestStartTimeout bounds a desktop's start.
	guestStartTimeout = time.Minute
)

// desktop is what a box that is a desktop adds.
type desktop struct {
	display       string // the X display inside the sandbox, ":0"
	width, height int
	readyMs       float64
	guest         Process
	spec          *api.DesktopSpec // what it was made from: its forks are made alike
	osworld       string           // host:port of its OSWorld API, when published
	cdp           string           // host:port of its Chromium DevTools port, when published
}

// desktopNow returns b's desktop, nil for a plain sandbox (or a desktop
// whose guest is not ready yet).
func (b *box) desktopNow() *desktop {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.desktop
}

func (s *Server) desktopInfo(b *box) api.Desktop {
	d := b.desktopNow()
	return api.Desktop{Sandbox: b.info(), Width: d.width, Height: d.height, ReadyMs: d.readyMs, OSWorld: d.osworld, CDP: d.cdp}
}

func (s *Server) createDesktop(w http.ResponseWriter, r *http.Request) error {
	var req api.DesktopSpec
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if req.Width == 0 && req.Height == 0 {
		req.Width, req.Height = 1280, 800
	}
	if req.Width < 64 || req.Height < 64 || req.Width > 8192 || req.Height > 8192 {
		return fmt.Errorf("%w: screen %dx%d: want 64 to 8192 pixels each way", ErrInvalidArgument, req.Width, req.Height)
	}
	for i, app := range req.Apps {
		if len(app) == 0 || app[0] == "" {
			return fmt.Errorf("%w: apps[%d] is empty: want an argv such as [\"xterm\"]", ErrInvalidArgument, i)
		}
	}
	if req.Limits.MemoryBytes == 0 {
		req.Limits.MemoryBytes = desktopMemory
	}
	self, err := s.guestBinary()
	if err != nil {
		return err
	}
	sbReq := api.SandboxSpec{
		Env:    []string{"LANG=C.UTF-8", "HOME=/root"},
		Limits: req.Limits, TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds,
		Binds:   []api.Bind{{Source: self, Target: guestBinary, ReadOnly: true}},
		Network: req.Network, Allow: req.Allow, Deny: req.Deny, Publish: req.Publish, Inject: req.Inject,
	}
	spec, err := specFromAPI(&sbReq)
	if err != nil {
		return err
	}
	t0 := time.Now()
	lease, digest, err := s.useImage(r.Context(), req.Image, spec, image.ApplyOptions{})
	if err != nil {
		return err
	}
	if digest != "" {
		req.Image, sbReq.Image = digest, digest // its snapshots fork from this very image
	}
	spec.User = nil // the guest runs as root, as over the host's root
	spec.Setuid = sessionSetuid(&req)
	b, err := s.startBox(sbReq, spec)
	if err != nil {
		lease.Release()
		return err
	}
	b.mu.Lock()
	b.lease = lease
	b.mu.Unlock()
	if err := s.bootDesktop(b, &req, t0); err != nil {
		s.destroy(b, "its desktop did not start")
		return err
	}
	if err := s.abandoned(r, b); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.desktopInfo(b))
	return nil
}

// OSWorldUser is the account an OSWorld desktop's session runs as (its
// VMs' `user`, password `password`, with sudo).
const OSWorldUser = "user"

// sessionSetuid says whether a desktop's sandbox lets set-user-ID programs
// work: an OSWorld desktop's user has sudo, as on OSWorld's VMs.
func sessionSetuid(req *api.DesktopSpec) bool { return req.OSWorld }

// bootDesktop starts the guest (Xvfb, the window manager, the apps) in b
// and makes b a desktop once it is ready; its ready time counts from t0.
func (s *Server) bootDesktop(b *box, req *api.DesktopSpec, t0 time.Time) error {
	d, err := s.startGuest(b, req)
	if err != nil {
		return err
	}
	if req.OSWorld {
		if d.osworld, err = s.publish(b, guestOSWorldSocket, guestOSWorldPassed, "OSWorld API"); err != nil {
			return err
		}
	}
	if req.OSWorld || req.CDP {
		if d.cdp, err = s.publish(b, guestCDPSocket, "", "DevTools port"); err != nil {
			return err
		}
	}
	d.readyMs = float64(time.Since(t0).Microseconds()) / 1000
	d.spec = req
	b.mu.Lock()
	b.desktop = d
	b.mu.Unlock()
	s.log.Info("desktop ready", "id", b.id, "ms", d.readyMs)
	return nil
}

// GuestSuffix names the guest build next to the tine binary: make build
// writes bin/tine (pure Go, fastest to start: every tine run pays its
// start) and bin/tine-guest (libjpeg-turbo linked in through cgo, which
// costs each process start ≈ 0.6 ms here but encodes JPEG five times
// faster), and desktops run the latter.
const GuestSuffix = "-guest"

// guestBinary is the host path of the binary desktops run as their guest:
// the configured one, the guest build next to this daemon's executable
// (tine-guest beside tine-full, the full program that make build installs
// with the front), or the executable itself.
func (s *Server) guestBinary() (string, error) {
	if s.cfg.GuestBinary != "" {
		return s.cfg.GuestBinary, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the tine binary for the desktop's guest: %w", err)
	}
	guest := strings.TrimSuffix(self, runcli.FullSuffix) + GuestSuffix
	if st, err := os.Stat(guest); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return guest, nil
	}
	return self, nil
}

// startGuest launches `tine guest` in b and waits for its ready line.
func (s *Server) startGuest(b *box, req *api.DesktopSpec) (*desktop, error) {
	args := []string{guestBinary, "guest", "--listen", guestSocket, "--size", fmt.Sprintf("%dx%d", req.Width, req.Height)}
	if req.GLX {
		args = append(args, "--glx")
	}
	// Every desktop is one the memory tier can capture: its screen in a
	// file, no System V shared memory (ADR 0016), and the guest's stdin
	// the sandbox's own /dev/null (a descriptor of the host's would stop
	// criu: "Can't lookup mount").
	args = append(args, "--no-shm")
	stdin, err := os.Open("/proc/" + strconv.Itoa(b.inst.Pid()) + "/root/dev/null")
	if err != nil {
		return nil, fmt.Errorf("open the desktop's /dev/null: %w", err)
	}
	defer stdin.Close()
	if req.OSWorld {
		args = append(args, "--osworld", guestOSWorldSocket, "--osworld-passed", guestOSWorldPassed)
	}
	if req.OSWorld || req.CDP {
		args = append(args, "--cdp", guestCDPSocket)
	}
	if req.A11y || req.OSWorld {
		args = append(args, "--a11y")
	}
	if req.OSWorld {
		args = append(args, "--user", OSWorldUser)
	}
	for _, app := range req.Apps {
		j, _ := json.Marshal(app)
		args = append(args, "--app", string(j))
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	p, err := b.inst.Exec(&sandbox.ExecSpec{Args: args, Stdio: [3]*os.File{stdin, outW, errW}})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start the desktop's guest: %w", err)
	}
	// The read ends stay open, drained, for the guest's whole life: a
	// write to a closed pipe would kill it (SIGPIPE on fd 1 or 2).
	stderr := make(chan string, 1)
	go func() {
		defer errR.Close()
		b, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
		stderr <- strings.TrimSpace(string(b))
		io.Copy(io.Discard, errR)
	}()
	line := make(chan string, 1)
	go func() {
		defer outR.Close()
		br := bufio.NewReader(outR)
		l, _ := br.ReadString('\n')
		line <- l
		io.Copy(io.Discard, br)
	}()
	var ready struct {
		Display       string
		Width, Height int
	}
	select {
	case l := <-line:
		if json.Unmarshal([]byte(l), &ready) == nil && ready.Width > 0 {
			return &desktop{display: ready.Display, width: ready.Width, height: ready.Height, guest: p}, nil
		}
		p.Wait()
		msg := <-stderr
		if strings.Contains(msg, "executable file not found") {
			return nil, fmt.Errorf("%w: the desktop did not start: %s", ErrInvalidArgument, msg)
		}
		return nil, fmt.Errorf("the desktop did not start: %s", msg)
	case <-time.After(guestStartTimeout):
		p.Signal(9)
		return nil, fmt.Errorf("the desktop was not ready after %s", guestStartTimeout)
	}
}

// lookupDesktop finds the running desktop a request names.
func (s *Server) lookupDesktop(r *http.Request) (*box, error) {
	b, err := s.lookup(r)
	if err == nil && b.desktopNow() == nil {
		err = fmt.Errorf("%w %q is a sandbox, not a desktop", ErrNoSandbox, b.id)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (list desktops with GET /v1/desktops)", err)
	}
	return b, nil
}

func (s *Server) listDesktops(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	var boxes []*box
	for _, b := range s.boxes {
		if b.desktopNow() != nil {
			boxes = append(boxes, b)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(boxes, func(x, y *box) int { return x.created.Compare(y.created) })
	out := make([]api.Desktop, 0, len(boxes))
	for _, b := range boxes {
		out = append(out, s.desktopInfo(b))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getDesktop(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookupDesktop(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.desktopInfo(b))
	return nil
}

func (s *Server) deleteDesktop(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookupDesktop(r)
	if err != nil {
		return err
	}
	s.destroy(b, "deleted")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// aci proxies an ACI WebSocket to the desktop's guest, whose socket is in
// the sandbox's own /run (reached through its PID 1's root). The session
// counts as activity for the idle timeout while it lasts.
func (s *Server) aci(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.lookupDesktop(r); err != nil {
		return err
	}
	query := ""
	if r.URL.Query().Has("token") { // a viewer's session (view.go)
		c, ok := s.viewToken(r)
		if !ok {
			return fmt.Errorf("%w: the view token is not valid for this desktop (expired?): ask for a new one", ErrUnauthorized)
		}
		if c.viewOnly {
			query = "view_only=1"
		}
	}
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	defer b.countACI(1)()
	root := b.inst.Root()
	var failed error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "guest"})
			pr.Out.URL.Path = "/aci"
			pr.Out.URL.RawQuery = query
			pr.Out.Header.Del("Authorization") // the guest needs none
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialInRoot(ctx, root, guestSocket)
		}},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { failed = err },
	}
	proxy.ServeHTTP(w, r)
	if failed != nil && !errors.Is(failed, context.Canceled) {
		return fmt.Errorf("%w: the desktop's guest does not answer: %v", ErrNotRunning, failed)
	}
	return nil
}

// dialInRoot connects to the unix socket at path inside a sandbox's root.
// The path is resolved inside the root (openat2 RESOLVE_IN_ROOT): the
// sandbox can replace its socket with a symlink, which must not make the
// daemon, as host root, connect to a socket of the host.
func dialInRoot(ctx context.Context, root, path string) (net.Conn, error) {
	r, err := inroot.Open(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return dialIn(ctx, r, path)
}

// dialIn is dialInRoot in a root already open.
func dialIn(ctx context.Context, r *inroot.Root, path string) (net.Conn, error) {
	fd, err := r.OpenSocket(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return (&net.Dialer{}).DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
