package api_test

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// startDesktop creates a desktop on d with apps and opens an ACI session.
func startDesktop(t *testing.T, d *daemon, apps ...[]string) (*api.Desktop, *client.ACI) {
	t.Helper()
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "xterm")
	ctx := context.Background()
	dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1024, Height: 768, Apps: apps})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	t.Logf("desktop %s ready in %.0f ms", dt.ID, dt.ReadyMs)
	a, err := d.c.DialACI(ctx, dt.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	// A desktop's own Xvfb keeps its screen in shared memory, and every
	// screenshot the tests below check reads it from there.
	if a.Welcome.Capture != "framebuffer" {
		t.Fatalf("the guest captures with %q, want framebuffer", a.Welcome.Capture)
	}
	// make build puts the libjpeg-turbo guest next to tine; the daemon runs it.
	if a.Welcome.JPEG != "libjpeg-turbo" {
		t.Fatalf("the guest encodes JPEG with %q, want libjpeg-turbo (bin/tine-guest)", a.Welcome.JPEG)
	}
	return dt, a
}

// readSandboxFile reads a file of the desktop's sandbox through the files
// API, "" when it does not exist.
func readSandboxFile(d *daemon, id, path string) string {
	r, err := d.c.ReadFile(context.Background(), id, path)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// A shell command typed into the desktop's xterm runs (its file appears in
// the desktop's sandbox); Unicode typed into a program comes back exactly;
// a click focuses the window clicked.
func TestDesktopInput(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	dt, a := startDesktop(t, d,
		[]string{"xterm", "-title", "left", "-geometry", "60x20+0+0"},
		[]string{"xterm", "-title", "right", "-geometry", "60x20+520+0"})
	if got := readSandboxFile(d, dt.ID, "/tmp/typed"); got != "" {
		t.Fatalf("/tmp/typed exists before typing: %q", got)
	}
	// The right xterm has the focus (the last app); type into it.
	if err := a.Type(ctx, "echo typed-here > /tmp/typed\n"); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool { return readSandboxFile(d, dt.ID, "/tmp/typed") == "typed-here\n" }) {
		t.Fatalf("the typed command did not run: /tmp/typed is %q", readSandboxFile(d, dt.ID, "/tmp/typed"))
	}

	const text = "naïve – 東京 ✓"
	if err := a.Type(ctx, "cat > /tmp/unicode\n"); err != nil {
		t.Fatal(err)
	}
	// Typed ahead of the shell, the text would reach the terminal while
	// the shell's line editor holds it raw (Return stays \r, ctrl+d a
	// byte): wait until cat has the file open.
	if !testbin.Eventually(patience, func() bool {
		_, err := d.c.Stat(ctx, dt.ID, "/tmp/unicode")
		return err == nil
	}) {
		t.Fatal("cat never started")
	}
	if err := a.Type(ctx, text+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := a.Key(ctx, "ctrl+d"); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool { return readSandboxFile(d, dt.ID, "/tmp/unicode") == text+"\n" }) {
		t.Errorf("typed %q, the file holds %q", text, readSandboxFile(d, dt.ID, "/tmp/unicode"))
	}

	ws, err := a.Windows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left api.ACIWindow
	for _, w := range ws {
		if w.Title == "left" {
			left = w
		}
		if w.Title == "right" && !w.Focused {
			t.Fatalf("the last app started is not focused: %+v", ws)
		}
	}
	if left.ID == 0 || left.Focused {
		t.Fatalf("windows %+v: want an unfocused left xterm", ws)
	}
	if err := a.Click(ctx, left.X+left.Width/2, left.Y+left.Height/2, 1); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool {
		ws, _ := a.Windows(ctx)
		for _, w := range ws {
			if w.ID == left.ID {
				return w.Focused
			}
		}
		return false
	}) {
		t.Errorf("clicking the left xterm did not focus it")
	}
}

// Screenshots through the daemon: known pixels, lossless PNG (its pixels
// hash to the frame_hash), not_modified, a new hash after a change, and a
// step with a failing middle action; bad input is typed and harmless, and
// a dropped session leaves the desktop to the next one.
func TestDesktopScreen(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	dt, a := startDesktop(t, d, []string{"xterm", "-bg", "#00ff00", "-geometry", "40x10+10+10"})
	rep, img, err := a.Screenshot(ctx, &api.ACIScreenshot{})
	if err != nil {
		t.Fatal(err)
	}
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	if got := frame.FromImage(pic).Hash().String(); got != rep.FrameHash {
		t.Errorf("the PNG's pixels hash to %s, the frame was %s: not lossless", got, rep.FrameHash)
	}
	if c := rgbAt(pic, 1000, 700); c != [3]uint8{0x2e, 0x34, 0x40} {
		t.Errorf("backdrop pixel %x", c)
	}
	ws, _ := a.Windows(ctx)
	if len(ws) != 1 {
		t.Fatalf("windows %+v", ws)
	}
	if c := rgbAt(pic, ws[0].X+ws[0].Width-4, ws[0].Y+ws[0].Height-4); c != [3]uint8{0, 0xff, 0} {
		t.Errorf("xterm background pixel %x, want 00ff00", c)
	}
	same, none, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
	if err != nil || !same.NotModified || len(none) != 0 {
		t.Errorf("unchanged screen: %+v %d bytes %v", same, len(none), err)
	}
	a.Type(ctx, "echo change\n")
	if !testbin.Eventually(patience, func() bool {
		r, _, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: rep.FrameHash})
		return err == nil && !r.NotModified && r.FrameHash != rep.FrameHash
	}) {
		t.Error("the hash never changed after typing")
	}
	// JPEG at full size (coded in bands and joined): it decodes, and shows
	// the same picture within JPEG's error.
	fr, fimg, err := a.Screenshot(ctx, &api.ACIScreenshot{Format: "jpeg", Quality: 90})
	if err != nil {
		t.Fatal(err)
	}
	jpic, err := jpeg.Decode(bytes.NewReader(fimg))
	if err != nil || jpic.Bounds().Dx() != fr.Width || jpic.Bounds().Dy() != fr.Height {
		t.Fatalf("full-size JPEG (%+v) does not decode to its size: %v", fr, err)
	}
	near := func(got, want [3]uint8) bool {
		for i := range got {
			if d := int(got[i]) - int(want[i]); d > 8 || d < -8 {
				return false
			}
		}
		return true
	}
	if c := rgbAt(jpic, 1000, 700); !near(c, [3]uint8{0x2e, 0x34, 0x40}) {
		t.Errorf("JPEG backdrop pixel %x", c)
	}
	if c := rgbAt(jpic, ws[0].X+ws[0].Width-8, ws[0].Y+ws[0].Height-8); !near(c, [3]uint8{0, 0xff, 0}) {
		t.Errorf("JPEG xterm background pixel %x, want about 00ff00", c)
	}
	// JPEG at a 512 long edge.
	jr, jimg, err := a.Screenshot(ctx, &api.ACIScreenshot{Format: "jpeg", Quality: 80, MaxLongEdge: 512})
	if err != nil || jr.Width != 512 || jr.Height != 384 || len(jimg) < 100 || !bytes.HasPrefix(jimg, []byte{0xff, 0xd8}) {
		t.Errorf("jpeg: %+v %d bytes %v", jr, len(jimg), err)
	}

	x, y := 5, 5
	step, simg, err := a.Step(ctx, []api.ACIRequest{
		{Op: "move", X: &x, Y: &y},
		{Op: "click", X: &x, Y: ptrInt(99999)},
		{Op: "key", Keys: "shift+a"},
	}, &api.ACIObserve{Screenshot: &api.ACIScreenshot{}, Windows: true})
	if err != nil || len(step.Results) != 3 || step.Results[0].Status != "ok" || step.Results[1].Status != "error" ||
		step.Results[1].Error.Code != api.ACIOffScreen || step.Results[2].Status != "ok" || len(simg) == 0 || len(step.Windows) != 1 {
		t.Errorf("step: %+v, %d bytes, %v", step, len(simg), err)
	}

	// A dropped client: the desktop stays for the next one.
	raw, err := d.c.DialACI(ctx, dt.ID)
	if err != nil {
		t.Fatal(err)
	}
	raw.Close()
	next, err := d.c.DialACI(ctx, dt.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if ws, err := next.Windows(ctx); err != nil || len(ws) != 1 {
		t.Errorf("after a dropped session: %+v %v", ws, err)
	}
	if _, err := d.c.DialACI(ctx, "nosuchdesktop"); client.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("ACI of an unknown desktop: %v", err)
	}
}

// Two desktops are isolated: a window of one is never in the other, and
// each has its own X socket.
func TestDesktopIsolation(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	da, a := startDesktop(t, d, []string{"xterm", "-title", "only-in-a"})
	db, b := startDesktop(t, d)
	if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "launch", Cmd: []string{"xterm", "-title", "launched-in-a"}}); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool {
		ws, _ := a.Windows(ctx)
		return len(ws) == 2
	}) {
		t.Fatal("the launched xterm never showed up in its own desktop: the check proves nothing")
	}
	if ws, err := b.Windows(ctx); err != nil || len(ws) != 0 {
		t.Errorf("desktop b sees windows %+v (%v), want none", ws, err)
	}
	// Each sandbox has its own /tmp, so its own X socket; the same path
	// names two different sockets (device and inode: each /tmp is its own
	// tmpfs).
	sockets := func(id string) string {
		res, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", "stat -c %d:%i /tmp/.X11-unix/X*"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("list X sockets of %s: %v %+v", id, err, res)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	if ia, ib := sockets(da.ID), sockets(db.ID); ia == "" || ia == ib {
		t.Errorf("X socket inodes: a %q, b %q: want two different sockets", ia, ib)
	}
	// An exec in a desktop runs on its display: xterm started by exec maps
	// a window there.
	if res, err := d.c.Exec(ctx, db.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo $DISPLAY; (xterm -title from-exec &)"}}); err != nil || strings.TrimSpace(string(res.Stdout)) != ":0" {
		t.Fatalf("exec in desktop b: %v %+v", err, res)
	}
	if !testbin.Eventually(patience, func() bool {
		ws, _ := b.Windows(ctx)
		return len(ws) == 1 && ws[0].Title == "from-exec"
	}) {
		t.Error("an xterm started by exec never showed up on the desktop's display")
	}
	if err := d.c.DeleteDesktop(ctx, db.ID); err != nil {
		t.Fatal(err)
	}
	if ws, err := a.Windows(ctx); err != nil || len(ws) != 2 {
		t.Errorf("deleting b disturbed a: %+v %v", ws, err)
	}
}

func rgbAt(img image.Image, x, y int) [3]uint8 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}

func ptrInt(v int) *int { return &v }

// The ACI proxy resolves the guest's socket inside the desktop's root: a
// sandbox that swaps it for a symlink to a host socket reaches nothing.
func TestDesktopSocketSymlink(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	dt, _ := startDesktop(t, d)
	host := filepath.Join(t.TempDir(), "host.sock")
	l, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	res, err := d.c.Exec(ctx, dt.ID, &api.ExecRequest{Argv: []string{"ln", "-sf", host, "/run/tine-aci.sock"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("replace the socket with a symlink: %v %+v", err, res)
	}
	if _, err := d.c.DialACI(ctx, dt.ID); err == nil {
		t.Error("the ACI connected through a symlink to a host socket")
	}
	select {
	case <-reached:
		t.Fatal("the daemon connected to the host socket the sandbox's symlink named")
	case <-time.After(200 * time.Millisecond):
	}
	// The check was armed: the host socket does take connections.
	c, err := net.Dial("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	<-reached
}

// TestDesktopExecTree: the ACI's exec, in a real desktop sandbox, answers
// when its command ends although a detached child holds the output open,
// and its timeout kills everything the command started, in any session.
// The sandbox's processes are listed through the daemon's exec.
func TestDesktopExecTree(t *testing.T) {
	d := startDaemon(t)
	dt, a := startDesktop(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	arg := sleeperArg(marker())

	res, err := a.Exec(ctx, detacher(arg, false), nil, 0)
	if err != nil || res.ExitCode != 0 || res.Reason != "exit" || string(res.Stdout) != "started\n" {
		t.Fatalf("ACI exec that leaves processes in the background: %v %+v", err, res)
	}
	startedDetached(t, d, dt.ID)
	if left := sandboxProcs(t, d, dt.ID, arg); len(left) != 2 {
		t.Fatalf("want the two background processes still running, found %q", left)
	}

	arg = sleeperArg(marker())
	res, err = a.Exec(ctx, detacher(arg, true), nil, 2*time.Second)
	if err != nil || res.ExitCode != 124 || res.Reason != "timeout" {
		t.Fatalf("ACI exec past its timeout: %v %+v", err, res)
	}
	startedDetached(t, d, dt.ID)
	if left := sandboxProcs(t, d, dt.ID, arg); len(left) > 0 {
		t.Fatalf("processes of the timed-out ACI exec remain in the desktop:\n  %s", strings.Join(left, "\n  "))
	}
}
