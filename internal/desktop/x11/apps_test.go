package x11_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
	"github.com/tine-run/tine/internal/require"
)

// xterm starts an xterm titled title running sh -c script, in a UTF-8
// locale, and returns its window once it is mapped.
func xterm(t *testing.T, d *x11.Display, title, script string) x11.Window {
	t.Helper()
	require.Binary(t, "xterm")
	t.Setenv("LC_ALL", "C.UTF-8")
	xvfbtest.Run(t, d.Name(), "xterm", "-u8", "-T", title, "-class", "TineTest", "-geometry", "80x24+40+40", "-e", "sh", "-c", script)
	w := waitWindow(t, d, func(w x11.Window) bool { return w.Title == title })
	// Mapped is not ready: on a loaded host xterm drew (and read input)
	// seconds after its window appeared. It is once it has drawn.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.WaitScreenIdle(ctx, 300*time.Millisecond)
	return w
}

func waitWindow(t *testing.T, d *x11.Display, match func(x11.Window) bool) x11.Window {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := d.WaitForWindow(ctx, match)
	if err != nil {
		t.Fatalf("window did not appear: %v", err)
	}
	return w
}

// waitFile waits for path to exist with want as its content (or any
// content when want is "").
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	var got []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got, err = os.ReadFile(path)
		if err == nil && (want == "" || string(got) == want) {
			return
		}
	}
	t.Fatalf("%s: %q, %v; want %q", path, got, err, want)
}

func TestTypeShellCommandIntoXterm(t *testing.T) {
	d, _ := newDisplay(t, false, x11.Options{})
	dir := t.TempDir()
	w := xterm(t, d, "shell", "exec sh")
	if err := d.FocusWindow(w.ID); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "made-by-typing")
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the file exists before typing")
	}
	if err := d.Type("touch '"+target+"'\n", 0); err != nil {
		t.Fatal(err)
	}
	waitFile(t, target, "")
}

func TestTypeUnicodeComesBackExactly(t *testing.T) {
	d, _ := newDisplay(t, false, x11.Options{})
	out := filepath.Join(t.TempDir(), "typed")
	w := xterm(t, d, "cat", "stty -icanon; exec cat > '"+out+"'")
	if err := d.FocusWindow(w.ID); err != nil {
		t.Fatal(err)
	}
	// ï, – and 東京 are not on the US layout: they go through borrowed
	// keycodes; the rest mixes plain and shifted keys. The Greek line needs
	// more distinct borrowed keycodes than Xvfb has spare (19), so they are
	// recycled on the way.
	text := "naïve – 東京, Ünïcödé: ok?\nαβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔ – 東京\n"
	if err := d.Type(text, 0); err != nil {
		t.Fatal(err)
	}
	waitFile(t, out, text)
}

func TestWindowsFocusAndClick(t *testing.T) {
	d, _ := newDisplay(t, true, x11.Options{})
	t.Setenv("LC_ALL", "C.UTF-8")
	xvfbtest.Run(t, d.Name(), "xterm", "-T", "left", "-class", "TineTest", "-geometry", "40x10+20+20")
	xvfbtest.Run(t, d.Name(), "xterm", "-T", "right", "-class", "TineTest", "-geometry", "40x10+700+300")
	left := waitWindow(t, d, func(w x11.Window) bool { return w.Title == "left" })
	right := waitWindow(t, d, func(w x11.Window) bool { return w.Title == "right" })

	ws, err := d.Windows()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == right.ID && (w.Class != "TineTest" || w.Instance != "xterm" || w.Width < 100 || w.Height < 50 || w.PID == 0) {
			t.Fatalf("window listed as %+v, want class TineTest, instance xterm, a real size and a PID", w)
		}
	}

	// openbox focuses each new window; once the later one has it, the
	// window manager has no focus change of its own left to make.
	waitWindow(t, d, func(w x11.Window) bool { return w.Focused })
	if err := d.FocusWindow(left.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // long enough for a late focus change of openbox's to show
	if w := find(t, d, left.ID); !w.Focused {
		t.Fatal("FocusWindow(left) returned but left is not focused (or lost it again)")
	}
	// Left has the focus, so right getting it is the click's doing.
	if err := d.Click(x11.Point{X: right.X + right.Width/2, Y: right.Y + right.Height/2}, x11.ButtonLeft, 1); err != nil {
		t.Fatal(err)
	}
	waitWindow(t, d, func(w x11.Window) bool { return w.ID == right.ID && w.Focused })

	if err := d.CloseWindow(right.ID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.WaitWindowGone(ctx, right.ID); err != nil {
		t.Fatal(err)
	}
	// Focus and close worked on live windows above; on the closed one
	// they are a typed error.
	for name, do := range map[string]func(uint32) error{"focus": d.FocusWindow, "close": d.CloseWindow} {
		err := do(right.ID)
		var nw *x11.NoWindowError
		if !errors.Is(err, x11.ErrNoWindow) || !errors.As(err, &nw) || nw.ID != right.ID {
			t.Errorf("%s of a closed window: err = %v, want NoWindowError for 0x%x", name, err, right.ID)
		}
	}
}

func find(t *testing.T, d *x11.Display, id uint32) x11.Window {
	t.Helper()
	ws, err := d.Windows()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("window 0x%x not listed in %+v", id, ws)
	return x11.Window{}
}

func TestLaunchAndWaitWithoutWindowManager(t *testing.T) {
	d, _ := newDisplay(t, false, x11.Options{})
	require.Binary(t, "xterm")
	// The close comes once xterm's command runs: a WM_DELETE_WINDOW that
	// xterm gets while its child is still starting hangs up a child that
	// does not yet take SIGHUP, and xterm then waits for it forever (3 in
	// 40 runs without this wait).
	ready := filepath.Join(t.TempDir(), "ready")
	cmd, err := d.Launch("xterm", "-T", "launched", "-e", "sh", "-c", `echo > "$0"; exec cat`, ready)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	w := waitWindow(t, d, func(w x11.Window) bool { return w.Title == "launched" })
	waitFile(t, ready, "")
	if w.Class != "XTerm" || w.PID != cmd.Process.Pid {
		t.Fatalf("launched window %+v, want class XTerm and PID %d", w, cmd.Process.Pid)
	}
	if err := d.CloseWindow(w.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done: // xterm exits on WM_DELETE_WINDOW
	case <-time.After(10 * time.Second):
		t.Fatal("xterm did not exit after CloseWindow")
	}
}
