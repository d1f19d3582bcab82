package security

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
)

// rawClient speaks plain HTTP to the daemon's socket, to send what the Go
// client never would.
func rawClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// typedError sends one request and returns the status and the error code
// of the answer, failing unless the body is the API's typed error.
func typedError(t *testing.T, hc *http.Client, method, path string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://tine"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.Error
	if resp.StatusCode < 400 || json.Unmarshal(raw, &e) != nil || e.Code == "" || e.Message == "" {
		t.Errorf("%s %s: status %d, body %.200q: want a typed error {code, message}", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, string(e.Code)
}

// TestHostileAPIInput sends the daemon what a confused or hostile client
// might: bodies past the limit, broken JSON, unknown fields, negative and
// absurd limits, ids and names that climb paths, a NUL in a file path,
// argv and env past the kernel's limits. Each gets a typed error of the
// right kind and the daemon keeps serving. The control: a well-formed
// create and exec succeed on the same daemon, before and after.
func TestHostileAPIInput(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	hc := rawClient(d.sock)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatalf("control: a plain create fails: %v", err)
	}
	big := `{"env": ["X=` + strings.Repeat("a", 64<<20) + `"]}`
	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"body past the limit", "POST", "/v1/sandboxes", big, 413},
		{"broken JSON", "POST", "/v1/sandboxes", `{"limits": {`, 400},
		{"JSON of the wrong type", "POST", "/v1/sandboxes", `["not", "an", "object"]`, 400},
		{"unknown field", "POST", "/v1/sandboxes", `{"privileged": true}`, 400},
		{"negative memory", "POST", "/v1/sandboxes", `{"limits": {"memory_bytes": -1}}`, 400},
		{"negative pids", "POST", "/v1/sandboxes", `{"limits": {"pids": -5}}`, 400},
		{"absurd memory", "POST", "/v1/sandboxes", `{"limits": {"memory_bytes": 9223372036854775807}}`, 400},
		{"negative disk", "POST", "/v1/sandboxes", `{"disk_bytes": -1}`, 400},
		{"absurd ttl", "POST", "/v1/sandboxes", `{"ttl_seconds": 1e30}`, 400},
		{"relative rootfs", "POST", "/v1/sandboxes", `{"rootfs": "../../"}`, 400},
		{"unknown seccomp", "POST", "/v1/sandboxes", `{"seccomp": "off"}`, 400},
		{"id climbing", "GET", "/v1/sandboxes/..%2F..%2Fetc%2Fpasswd", "", 404},
		{"id dot-dot", "DELETE", "/v1/sandboxes/%2E%2E", "", 404},
		{"exec in a climbing id", "POST", "/v1/sandboxes/..%2F" + sb.ID + "/exec", `{"argv": ["true"]}`, 404},
		{"function name climbing", "GET", "/v1/functions/..%2F..%2Fetc%2Fpasswd", "", 404},
		{"script digest climbing", "POST", "/v1/scripts/..%2F..%2Fetc%2Fpasswd/invoke", "1", 404},
		{"NUL in a file path", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/etc/passwd%00.txt", "", 400},
		{"empty file path", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=", "", 400},
		{"absurd file mode", "PUT", "/v1/sandboxes/" + sb.ID + "/files?path=/tmp/x&mode=99999999999", "x", 400},
		{"exec without argv", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{}`, 400},
		{"exec with a negative timeout", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"argv": ["true"], "timeout_ms": -1}`, 400},
		{"exec with absurd output cap", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"argv": ["true"], "max_output_bytes": 9223372036854775807}`, 400},
	}
	for _, c := range cases {
		status, code := typedError(t, hc, c.method, c.path, strings.NewReader(c.body))
		if status != c.status {
			t.Errorf("%s: status %d (%s), want %d", c.name, status, code, c.status)
		}
		d.healthy(c.name)
	}

	// Past the kernel's limits on argv and env (one string over
	// MAX_ARG_STRLEN, 128 KiB; 4 MiB in all): a typed error, or a result
	// saying the command could not run — never a hang or a dead daemon.
	huge := strings.Repeat("a", 256<<10)
	many := make([]string, 40000)
	for i := range many {
		many[i] = strings.Repeat("b", 100)
	}
	for name, req := range map[string]*api.ExecRequest{
		"one huge argument":     {Argv: []string{"echo", huge}},
		"a huge argv":           {Argv: append([]string{"echo"}, many...)},
		"a huge env":            {Argv: []string{"true"}, Env: []string{"X=" + huge}},
		"an env without equals": {Argv: []string{"true"}, Env: []string{"=", "NOEQUALS"}},
	} {
		res, err := d.c.Exec(ctx, sb.ID, req)
		switch {
		case err != nil:
			if client.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("exec with %s: %v, want an invalid_argument error", name, err)
			}
		case res.ExitCode == 0 && name != "an env without equals":
			t.Errorf("exec with %s: ran with exit 0", name)
		}
		d.healthy("exec with " + name)
	}
	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "still-serving"}}); err != nil || !bytes.Contains(res.Stdout, []byte("still-serving")) {
		t.Errorf("control: a plain exec after the hostile input: %v %+v", err, res)
	}
}

// dialRaw opens a WebSocket on the daemon's path.
func dialRaw(t *testing.T, d *daemon, path string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://tine"+path, &websocket.DialOptions{HTTPClient: rawClient(d.sock)})
	if err != nil {
		t.Fatalf("control: dial %s: %v", path, err)
	}
	conn.SetReadLimit(16 << 20)
	return conn
}

// readUntilClosed reads messages until the daemon closes, returning the
// text ones and the close status; it fails the test if the connection
// stays open.
func readUntilClosed(t *testing.T, conn *websocket.Conn, what string) ([]string, websocket.StatusCode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var texts []string
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Errorf("%s: the daemon kept the connection open", what)
			}
			return texts, websocket.CloseStatus(err)
		}
		if typ == websocket.MessageText {
			texts = append(texts, string(msg))
		}
	}
}

// TestHostileWebSockets sends malformed frames to the streamed exec and
// to a desktop's ACI: binary junk where a JSON request belongs, a text
// frame of 32 MiB, JSON of the wrong shape. Each ends that session (with a
// typed error where the protocol has one) and the daemon, the sandbox and
// the desktop keep serving. The control: a proper session works on the
// same sandbox and desktop afterwards.
func TestHostileWebSockets(t *testing.T) {
	gate(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 320, Height: 240})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	hugeText := `{"argv": ["` + strings.Repeat("x", 32<<20) + `"]}`
	frames := []struct {
		name string
		typ  websocket.MessageType
		msg  []byte
	}{
		{"binary junk", websocket.MessageBinary, []byte{0xff, 0x00, 0xde, 0xad, 0xbe, 0xef}},
		{"a 32 MiB text frame", websocket.MessageText, []byte(hugeText)},
		{"JSON of the wrong shape", websocket.MessageText, []byte(`[1, 2, {"op": null}]`)},
		{"not JSON", websocket.MessageText, []byte("\x00\x01 not json {")},
	}
	for _, path := range []string{"/v1/sandboxes/" + sb.ID + "/exec/ws", "/v1/desktops/" + dt.ID + "/aci"} {
		for _, f := range frames {
			what := fmt.Sprintf("%s on %s", f.name, path)
			conn := dialRaw(t, d, path)
			if strings.HasSuffix(path, "/aci") {
				welcome(t, conn)
			}
			wctx, cancel := context.WithTimeout(ctx, patience)
			err := conn.Write(wctx, f.typ, f.msg)
			cancel()
			if err == nil && strings.HasSuffix(path, "/exec/ws") {
				// A typed error message, or for a frame past the read
				// limit the protocol's own "message too big" close.
				texts, status := readUntilClosed(t, conn, what)
				typed := len(texts) > 0 && strings.Contains(texts[len(texts)-1], `"error"`)
				if !typed && status != websocket.StatusMessageTooBig {
					t.Errorf("%s: want a typed error message or close 1009 before the close, got %q and close %d", what, texts, status)
				}
			} else if err == nil {
				// The ACI answers a bad request with an error reply and
				// keeps the session, or closes it; either way no crash.
				rctx, cancel := context.WithTimeout(ctx, patience)
				typ, msg, rerr := conn.Read(rctx)
				cancel()
				if rerr == nil && (typ != websocket.MessageText || !strings.Contains(string(msg), "error")) {
					t.Errorf("%s: answered %.200q, want an error", what, msg)
				}
			}
			conn.CloseNow()
			d.healthy(what)
		}
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "ok"}})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("control: the sandbox does not serve execs after the junk: %v %+v", err, res)
	}
	a, err := d.c.DialACI(ctx, dt.ID)
	if err != nil {
		t.Fatalf("control: the desktop's ACI does not open after the junk: %v", err)
	}
	defer a.Close()
	if _, err := a.Windows(ctx); err != nil {
		t.Errorf("control: the desktop's ACI does not answer after the junk: %v", err)
	}
}

// welcome reads the ACI's first message, its welcome.
func welcome(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), `"welcome"`) {
		t.Fatalf("control: the ACI did not welcome: %v %.100q", err, msg)
	}
}
