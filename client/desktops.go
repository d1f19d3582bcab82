package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
)

// CreateDesktop starts a desktop (Xvfb, a window manager, the spec's apps
// and the guest, in a sandbox) and returns once it is ready: every app has
// mapped a window and the last one holds the focus.
func (c *Client) CreateDesktop(ctx context.Context, spec *api.DesktopSpec) (*api.Desktop, error) {
	if spec == nil {
		spec = &api.DesktopSpec{}
	}
	var d api.Desktop
	if err := c.call(ctx, "POST", "/v1/desktops", nil, spec, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Desktops lists the live desktops.
func (c *Client) Desktops(ctx context.Context) ([]api.Desktop, error) {
	var l []api.Desktop
	if err := c.call(ctx, "GET", "/v1/desktops", nil, nil, &l); err != nil {
		return nil, err
	}
	return l, nil
}

// Desktop describes one desktop.
func (c *Client) Desktop(ctx context.Context, id string) (*api.Desktop, error) {
	var d api.Desktop
	if err := c.call(ctx, "GET", desktopPath(id), nil, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DeleteDesktop destroys a desktop and its sandbox.
func (c *Client) DeleteDesktop(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", desktopPath(id), nil, nil, nil)
}

func desktopPath(id string) string { return "/v1/desktops/" + url.PathEscape(id) }

// ACI is a session of the agent-computer interface (docs/aci.md). Its
// methods may be called from many goroutines: requests are pipelined and
// the guest runs them in the order they were sent.
type ACI struct {
	Welcome api.ACIWelcome

	conn *websocket.Conn
	wmu  sync.Mutex // one write at a time, in id order

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan aciAnswer
	err     error       // why the session ended
	cast    *Screencast // the running screencast (screencast.go)
	frames  *FrameCache // shared with a fleet's other sessions (frames.go)

	received atomic.Int64 // bytes of the messages the guest sent
}

type aciAnswer struct {
	rep   *api.ACIReply
	image []byte
}

// ACIError is a request the guest refused; the session goes on.
type ACIError struct{ api.ACIError }

func (e *ACIError) Error() string { return fmt.Sprintf("aci: %s (%s)", e.Message, e.Code) }

// DialACI opens an ACI session on desktop id through the daemon.
func (c *Client) DialACI(ctx context.Context, id string) (*ACI, error) {
	hdr := http.Header{}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	u := strings.Replace(c.base, "http", "ws", 1) + desktopPath(id) + "/aci"
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFrom(resp)
		}
		return nil, fmt.Errorf("tine daemon: aci: %w", err)
	}
	return startACI(ctx, conn)
}

// DialGuest opens an ACI session straight on a guest's unix socket (`tine
// guest --listen`), without a daemon.
func DialGuest(ctx context.Context, socket string) (*ACI, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	conn, _, err := websocket.Dial(ctx, "ws://guest/aci", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("aci on %s: %w", socket, err)
	}
	return startACI(ctx, conn)
}

func startACI(ctx context.Context, conn *websocket.Conn) (*ACI, error) {
	conn.SetReadLimit(256 << 20)
	_, b, err := conn.Read(ctx)
	if err == nil {
		a := &ACI{conn: conn, pending: map[uint64]chan aciAnswer{}}
		if err = json.Unmarshal(b, &a.Welcome); err == nil && a.Welcome.Type == "welcome" {
			go a.read()
			return a, nil
		}
		err = fmt.Errorf("expected a welcome, got %q", b)
	}
	conn.CloseNow()
	return nil, fmt.Errorf("aci: %w", err)
}

// read hands each reply to its request.
func (a *ACI) read() {
	for {
		typ, b, err := a.conn.Read(context.Background())
		if err != nil {
			a.fail(fmt.Errorf("aci session ended: %w", err))
			return
		}
		a.received.Add(int64(len(b)))
		ans := aciAnswer{rep: &api.ACIReply{}}
		head := b
		if typ == websocket.MessageBinary {
			var ok bool
			if head, ans.image, ok = api.ACISplit(b); !ok {
				a.fail(errors.New("aci: malformed binary reply"))
				return
			}
			if f := screencastFrame(head); f != nil {
				a.mu.Lock()
				cast := a.cast
				a.mu.Unlock()
				if cast != nil {
					cast.deliver(f, ans.image)
				}
				continue
			}
		}
		if err := json.Unmarshal(head, ans.rep); err != nil {
			a.fail(fmt.Errorf("aci: malformed reply: %w", err))
			return
		}
		a.mu.Lock()
		id := ans.rep.ID
		if _, ok := a.pending[id]; !ok && id == 0 {
			// A request the guest could not read an id from: it answers
			// in order, so this is the oldest one waiting.
			for p := range a.pending {
				if id == 0 || p < id {
					id = p
				}
			}
		}
		ch := a.pending[id]
		delete(a.pending, id)
		a.mu.Unlock()
		if ch != nil {
			ch <- ans
		}
	}
}

func (a *ACI) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
	for id, ch := range a.pending {
		close(ch)
		delete(a.pending, id)
	}
	if a.cast != nil {
		go a.cast.end()
	}
}

// Do sends req (its ID is set here) and waits for its reply and image.
// A refused request is an *ACIError; the reply is returned with it.
func (a *ACI) Do(ctx context.Context, req *api.ACIRequest) (*api.ACIReply, []byte, error) {
	return a.DoWithContent(ctx, req, nil)
}

// DoWithContent is Do for a request that carries content (write_file): it
// goes as a binary message, the header and then content.
func (a *ACI) DoWithContent(ctx context.Context, req *api.ACIRequest, content []byte) (*api.ACIReply, []byte, error) {
	ch := make(chan aciAnswer, 1)
	a.wmu.Lock()
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		a.wmu.Unlock()
		return nil, nil, a.err
	}
	a.nextID++
	req.ID = a.nextID
	a.pending[req.ID] = ch
	a.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil && content == nil {
		err = a.conn.Write(ctx, websocket.MessageText, b)
	} else if err == nil {
		err = a.conn.Write(ctx, websocket.MessageBinary, api.ACIJoin(b, content))
	}
	a.wmu.Unlock()
	if err != nil {
		a.mu.Lock()
		delete(a.pending, req.ID)
		a.mu.Unlock()
		return nil, nil, fmt.Errorf("aci: send: %w", err)
	}
	select {
	case ans, ok := <-ch:
		if !ok {
			a.mu.Lock()
			defer a.mu.Unlock()
			return nil, nil, a.err
		}
		if ans.rep.Error != nil {
			return ans.rep, ans.image, &ACIError{*ans.rep.Error}
		}
		return ans.rep, ans.image, nil
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.pending, req.ID)
		a.mu.Unlock()
		return nil, nil, ctx.Err()
	}
}

func (a *ACI) do(ctx context.Context, req api.ACIRequest) error {
	_, _, err := a.Do(ctx, &req)
	return err
}

// Click clicks the left button count times at x, y.
func (a *ACI) Click(ctx context.Context, x, y, count int) error {
	return a.do(ctx, api.ACIRequest{Op: "click", X: &x, Y: &y, Count: count})
}

// Move moves the pointer to x, y.
func (a *ACI) Move(ctx context.Context, x, y int) error {
	return a.do(ctx, api.ACIRequest{Op: "move", X: &x, Y: &y})
}

// Key presses a combination such as "ctrl+shift+t" or "Return".
func (a *ACI) Key(ctx context.Context, keys string) error {
	return a.do(ctx, api.ACIRequest{Op: "key", Keys: keys})
}

// Type types text (any Unicode).
func (a *ACI) Type(ctx context.Context, text string) error {
	return a.do(ctx, api.ACIRequest{Op: "type", Text: text})
}

// Windows lists the top-level windows.
func (a *ACI) Windows(ctx context.Context) ([]api.ACIWindow, error) {
	rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "windows"})
	if err != nil {
		return nil, err
	}
	return rep.Windows, nil
}

// Screenshot takes a screenshot; the reply carries its frame hash and
// size, the bytes are the encoded image (none when not modified). With a
// shared FrameCache (ShareFrames) the image may come from the cache.
func (a *ACI) Screenshot(ctx context.Context, o *api.ACIScreenshot) (*api.ACIReply, []byte, error) {
	if fc := a.sharedFrames(); fc != nil {
		return fc.screenshot(ctx, a, o)
	}
	return a.Do(ctx, &api.ACIRequest{Op: "screenshot", Screenshot: o})
}

// Step runs actions in order and observes once; the reply's Results hold
// each action's outcome (a failed action does not stop the next). With a
// shared FrameCache, the observation's image may come from the cache.
func (a *ACI) Step(ctx context.Context, actions []api.ACIRequest, observe *api.ACIObserve) (*api.ACIReply, []byte, error) {
	fc := a.sharedFrames()
	if fc == nil || observe == nil || observe.Screenshot == nil {
		return a.Do(ctx, &api.ACIRequest{Op: "step", Actions: actions, Observe: observe})
	}
	probe, shot := *observe, *observe.Screenshot
	shot.IfNoneMatch = api.ACIAnyFrame
	probe.Screenshot = &shot
	rep, img, err := a.Do(ctx, &api.ACIRequest{Op: "step", Actions: actions, Observe: &probe})
	if err != nil {
		return rep, img, err
	}
	img, err = fc.fill(ctx, a, observe.Screenshot, rep, img)
	return rep, img, err
}

// ShareFrames makes the session's screenshots and step observations go
// through fc, shared with other sessions (nil: no longer).
func (a *ACI) ShareFrames(fc *FrameCache) {
	a.mu.Lock()
	a.frames = fc
	a.mu.Unlock()
}

func (a *ACI) sharedFrames() *FrameCache {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.frames
}

// Received is how many bytes of messages (replies, images, screencast
// frames) the guest has sent on this session.
func (a *ACI) Received() int64 { return a.received.Load() }

// Exec runs argv on the desktop (its DISPLAY set) and waits for it, up to
// timeout (0: the guest's 30 s); how it ended is the result, not an error.
func (a *ACI) Exec(ctx context.Context, argv []string, stdin []byte, timeout time.Duration) (*api.ExecResult, error) {
	rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "exec", Cmd: argv, Stdin: stdin, TimeoutMs: int(timeout.Milliseconds())})
	if err != nil {
		return nil, err
	}
	if rep.Exec == nil {
		return nil, errors.New("aci: exec reply without a result")
	}
	return rep.Exec, nil
}

// ReadFile returns a file of the desktop (at most 32 MiB).
func (a *ACI) ReadFile(ctx context.Context, path string) ([]byte, error) {
	_, data, err := a.Do(ctx, &api.ACIRequest{Op: "read_file", File: path})
	if data == nil && err == nil {
		data = []byte{}
	}
	return data, err
}

// WriteFile creates or replaces a file of the desktop with data (mode 0:
// 0644); its directory must exist.
func (a *ACI) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	if data == nil {
		data = []byte{}
	}
	_, _, err := a.DoWithContent(ctx, &api.ACIRequest{Op: "write_file", File: path, Mode: uint32(mode.Perm())}, data)
	return err
}

// Close ends the session.
func (a *ACI) Close() error { return a.conn.Close(websocket.StatusNormalClosure, "") }
