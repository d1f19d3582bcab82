package aci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/guest"
	"github.com/tine-run/tine/internal/require"
)

// guestSocket is the socket of the guest startGuest ran last.
var guestSocket, guestDisplay string

// startGuest runs a guest (Xvfb, openbox, apps) for the test and opens an
// ACI session on it.
func startGuest(t *testing.T, apps ...[]string) *client.ACI {
	t.Helper()
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	sock := filepath.Join(t.TempDir(), "aci.sock")
	guestSocket = sock
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan guest.Ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- guest.Run(ctx, guest.Options{Width: 800, Height: 600, Apps: apps, Listen: sock}, func(r guest.Ready) { ready <- r })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case r := <-ready:
		t.Logf("guest ready on %s in %.1f ms", r.Display, r.ReadyMs)
		guestDisplay = r.Display
	case err := <-done:
		t.Fatalf("guest: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("guest not ready in 30 s")
	}
	a, err := client.DialGuest(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestSessionBasics(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-bg", "#ff0000", "-geometry", "40x10+0+0"})
	ctx := context.Background()
	if a.Welcome.Version != api.ACIVersion || a.Welcome.Width != 800 || a.Welcome.Height != 600 || a.Welcome.Capture != "framebuffer" {
		t.Fatalf("welcome %+v", a.Welcome)
	}
	ws, err := a.Windows(ctx)
	if err != nil || len(ws) != 1 || ws[0].Class != "XTerm" || !ws[0].Focused {
		t.Fatalf("windows %+v %v: want the one xterm, focused", ws, err)
	}

	// A screenshot: the backdrop where no window is, the xterm's red in it.
	rep, img, err := a.Screenshot(ctx, &api.ACIScreenshot{})
	if err != nil {
		t.Fatal(err)
	}
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil || rep.Width != 800 || rep.Bytes != len(img) {
		t.Fatalf("png %v, reply %+v", err, rep)
	}
	if r, g, b, _ := pic.At(790, 590).RGBA(); r>>8 != 0x2e || g>>8 != 0x34 || b>>8 != 0x40 {
		t.Errorf("backdrop pixel %02x%02x%02x, want 2e3440", r>>8, g>>8, b>>8)
	}
	w := ws[0]
	if r, g, b, _ := pic.At(w.X+w.Width-3, w.Y+w.Height-3).RGBA(); r>>8 != 0xff || g>>8 != 0 || b>>8 != 0 {
		t.Errorf("xterm background pixel %02x%02x%02x, want ff0000", r>>8, g>>8, b>>8)
	}
	// Unchanged screen: not_modified, no image. Then a change: a new hash.
	again, img2, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
	if err != nil || !again.NotModified || len(img2) != 0 {
		t.Fatalf("same screen: %+v, %d bytes, %v", again, len(img2), err)
	}
	if err := a.Type(ctx, "echo changed\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	changed, _, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
	if err != nil || changed.NotModified || changed.FrameHash == rep.FrameHash {
		t.Fatalf("after typing: %+v %v, want a new hash", changed, err)
	}

	// Typed errors, and the session goes on.
	for _, c := range []struct {
		req  api.ACIRequest
		code string
		says string
	}{
		{api.ACIRequest{Op: "click", X: ptr(5000), Y: ptr(10)}, api.ACIOffScreen, ""},
		{api.ACIRequest{Op: "key", Keys: "ctrl+nosuchkey"}, api.ACIUnknownKey, "nosuchkey"},
		{api.ACIRequest{Op: "focus_window", Window: 0x7ffffff}, api.ACINoWindow, ""},
		{api.ACIRequest{Op: "fly"}, api.ACIBadRequest, "fly"},
	} {
		_, _, err := a.Do(ctx, &c.req)
		var ae *client.ACIError
		if !asACI(err, &ae) || ae.Code != c.code || !strings.Contains(ae.Message, c.says) {
			t.Errorf("%+v: got %v, want %s", c.req, err, c.code)
		}
	}

	// What the Go client cannot send: invalid UTF-8, an oversized message.
	raw := rawSession(t, a)
	for _, c := range []struct {
		msg  []byte
		code string
	}{
		{[]byte("{\"id\":7,\"op\":\"type\",\"text\":\"ok\xffno\"}"), api.ACIBadText},
		{append([]byte(`{"id":8,"op":"type","text":"`), bytes.Repeat([]byte("a"), 2<<20)...), api.ACITooLarge},
		{[]byte(`{"id":9,"op":"click","x":1,"y":1,"colour":"red"}`), api.ACIBadRequest},
		{[]byte(`{"id":10,"op":`), api.ACIBadRequest},
	} {
		got := raw(c.msg)
		if got.Error == nil || got.Error.Code != c.code {
			t.Errorf("%.40q: reply %+v, want %s", c.msg, got, c.code)
		}
		if got.ID != leadingIDOf(c.msg) {
			t.Errorf("%.40q: reply id %d, want the request's", c.msg, got.ID)
		}
	}
	if err := a.Move(ctx, 5, 5); err != nil {
		t.Fatalf("the session after bad input: %v", err)
	}

	// step: ok, error, ok, and still the observation.
	rep, img, err = a.Step(ctx, []api.ACIRequest{
		{Op: "move", X: ptr(10), Y: ptr(10)},
		{Op: "key", Keys: "nosuchkey"},
		{Op: "move", X: ptr(20), Y: ptr(20)},
	}, &api.ACIObserve{Screenshot: &api.ACIScreenshot{Format: "jpeg"}, Cursor: true})
	if err != nil || len(rep.Results) != 3 || rep.Results[0].Status != "ok" || rep.Results[1].Status != "error" ||
		rep.Results[1].Error.Code != api.ACIUnknownKey || rep.Results[2].Status != "ok" || len(img) == 0 || *rep.Cursor != [2]int{20, 20} {
		t.Fatalf("step: %+v (%d bytes) %v", rep, len(img), err)
	}
}

func ptr(v int) *int { return &v }

// leadingIDOf is the id the test messages start with, 0 for one cut off
// before it can be read.
func leadingIDOf(msg []byte) uint64 {
	var id uint64
	fmt.Sscanf(string(msg), `{"id":%d`, &id)
	return id
}

// rawSession opens a second session on a's guest that sends bytes as they
// are and returns the text reply.
func rawSession(t *testing.T, a *client.ACI) func([]byte) api.ACIReply {
	c, _, err := websocket.Dial(context.Background(), "ws://guest/aci", &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", guestSocket)
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	c.Read(context.Background()) // the welcome
	return func(msg []byte) api.ACIReply {
		if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var rep api.ACIReply
		json.Unmarshal(b, &rep)
		return rep
	}
}

func asACI(err error, target **client.ACIError) bool {
	e, ok := err.(*client.ACIError)
	if ok {
		*target = e
	}
	return ok
}

// exec runs a command on the desktop (and only there: it sees the display),
// read_file and write_file move bytes exactly; each failure is typed and
// the session goes on.
func TestExecAndFiles(t *testing.T) {
	a := startGuest(t)
	ctx := context.Background()
	dir := t.TempDir()

	res, err := a.Exec(ctx, []string{"sh", "-c", `echo "out $DISPLAY"; echo err >&2; cat; exit 3`}, []byte("from stdin"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Reason != "exit" || string(res.Stdout) != "out "+guestDisplay+"\nfrom stdin" || string(res.Stderr) != "err\n" {
		t.Fatalf("exec: %+v stdout %q stderr %q", res.ExecExit, res.Stdout, res.Stderr)
	}
	if res, err := a.Exec(ctx, []string{"/no/such/program"}, nil, 0); err != nil || res.ExitCode != 127 || res.Reason != "not-found" {
		t.Fatalf("exec of a missing program: %+v %v", res, err)
	}
	pidFile := filepath.Join(dir, "child.pid")
	res, err = a.Exec(ctx, []string{"sh", "-c", "sleep 30 & echo $! > " + pidFile + "; wait"}, nil, 300*time.Millisecond)
	if err != nil || res.ExitCode != 124 || res.Reason != "timeout" {
		t.Fatalf("exec past its timeout: %+v %v", res, err)
	}
	// What the command started was killed with it.
	pid, _ := os.ReadFile(pidFile)
	if len(pid) == 0 {
		t.Fatal("the timed-out command never ran")
	}
	gone := false
	for deadline := time.Now().Add(2 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, err := os.Stat("/proc/" + strings.TrimSpace(string(pid)))
		gone = err != nil
	}
	if !gone {
		t.Errorf("the timed-out command's child %s still runs", strings.TrimSpace(string(pid)))
	}
	if res, err := a.Exec(ctx, []string{"head", "-c", "3000000", "/dev/zero"}, nil, 0); err != nil || len(res.Stdout) != 1<<20 || !res.StdoutTruncated {
		t.Fatalf("exec with 3 MB of output: %d bytes kept, truncated %v, %v", len(res.Stdout), res != nil && res.StdoutTruncated, err)
	}

	// Files: binary content round-trips, an empty file too.
	content := make([]byte, 300_000)
	for i := range content {
		content[i] = byte(i * 7)
	}
	path := filepath.Join(dir, "blob")
	if err := a.WriteFile(ctx, path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if on, _ := os.ReadFile(path); !bytes.Equal(on, content) {
		t.Fatal("write_file wrote other bytes")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("write_file mode %v, want 0600", st.Mode().Perm())
	}
	if got, err := a.ReadFile(ctx, path); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read_file: %d bytes, %v", len(got), err)
	}
	empty := filepath.Join(dir, "empty")
	if err := a.WriteFile(ctx, empty, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := a.ReadFile(ctx, empty); err != nil || len(got) != 0 {
		t.Fatalf("read_file of an empty file: %q %v", got, err)
	}

	for _, c := range []struct {
		name string
		call func() error
		code string
	}{
		{"read a missing file", func() error { _, err := a.ReadFile(ctx, filepath.Join(dir, "none")); return err }, api.ACINotFound},
		{"write into a missing directory", func() error { return a.WriteFile(ctx, filepath.Join(dir, "none", "f"), []byte("x"), 0) }, api.ACINotFound},
		{"read a directory", func() error { _, err := a.ReadFile(ctx, dir); return err }, api.ACIBadRequest},
		{"relative path", func() error { _, err := a.ReadFile(ctx, "blob"); return err }, api.ACIBadRequest},
		{"exec without a command", func() error { _, err := a.Exec(ctx, nil, nil, 0); return err }, api.ACIBadRequest},
		{"write_file as text", func() error {
			_, _, err := a.Do(ctx, &api.ACIRequest{Op: "write_file", File: path})
			return err
		}, api.ACIBadRequest},
		{"content on another op", func() error {
			_, _, err := a.DoWithContent(ctx, &api.ACIRequest{Op: "cursor"}, []byte("x"))
			return err
		}, api.ACIBadRequest},
	} {
		var e *client.ACIError
		if err := c.call(); !asACI(err, &e) || e.Code != c.code {
			t.Errorf("%s: %v, want code %s", c.name, err, c.code)
		}
	}
	if got, err := a.ReadFile(ctx, path); err != nil || len(got) != len(content) {
		t.Fatalf("the session after the errors: %d bytes, %v", len(got), err)
	}
}

// exec's answer comes when the command ends, though what it left in the
// background holds its output open; a timeout kills everything the
// command started, also what left its session (setsid) or its parent (a
// double fork). Processes are listed by another exec.
func TestExecDetached(t *testing.T) {
	a := startGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	arg := fmt.Sprintf("3600.%d", time.Now().UnixNano()%1_000_000_007)
	detach := func(stay bool) []string {
		script := fmt.Sprintf(`setsid sh -c 'echo $$ > %[2]s/setsid.pid; exec sleep %[1]s' & `+
			`(setsid sh -c 'echo $$ > %[2]s/orphan.pid; exec sleep %[1]s' &) ; `+
			`while [ ! -s %[2]s/setsid.pid ] || [ ! -s %[2]s/orphan.pid ]; do sleep 0.01; done; echo started`, arg, dir)
		if stay {
			script += "; sleep " + arg
		}
		return []string{"sh", "-c", script}
	}
	running := func() []string {
		res, err := a.Exec(ctx, []string{"sh", "-c", `for p in /proc/[0-9]*; do { tr '\0' ' ' < $p/cmdline; echo; } 2>/dev/null; done`}, nil, 0)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("list processes: %v %+v", err, res)
		}
		var found []string
		for _, line := range strings.Split(string(res.Stdout), "\n") {
			if strings.Contains(line, "sleep "+arg) {
				found = append(found, line)
			}
		}
		return found
	}
	started := func() {
		t.Helper()
		for _, f := range []string{"setsid.pid", "orphan.pid"} {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); len(b) == 0 {
				t.Fatalf("the detached process never started (no %s)", f)
			}
			os.Remove(filepath.Join(dir, f))
		}
	}

	res, err := a.Exec(ctx, detach(false), nil, 0)
	if err != nil || res.ExitCode != 0 || res.Reason != "exit" || string(res.Stdout) != "started\n" {
		t.Fatalf("exec that leaves processes in the background: %v %+v", err, res)
	}
	started()
	if left := running(); len(left) != 2 {
		t.Fatalf("want the two background processes still running, found %q", left)
	}
	a.Exec(ctx, []string{"pkill", "-f", "sleep " + arg}, nil, 0)

	res, err = a.Exec(ctx, detach(true), nil, 2*time.Second)
	if err != nil || res.ExitCode != 124 || res.Reason != "timeout" {
		t.Fatalf("exec past its timeout: %v %+v", err, res)
	}
	started()
	if left := running(); len(left) > 0 {
		t.Fatalf("processes of the timed-out command remain:\n  %s", strings.Join(left, "\n  "))
	}
}
