package x11_test

import (
	"image"
	"os"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/encode"
	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
)

// TestScreenFixture regenerates encode/testdata/screen.png, the desktop
// picture the encoder tests and benchmarks use:
//
//	TINE_DESKTOP_FIXTURE=$PWD/internal/desktop/encode/testdata/screen.png go test -run ScreenFixture ./internal/desktop/x11/
func TestScreenFixture(t *testing.T) {
	out := os.Getenv("TINE_DESKTOP_FIXTURE")
	if out == "" {
		t.Skip("needs TINE_DESKTOP_FIXTURE=FILE: only run to regenerate the fixture")
	}
	d, display := newDisplay(t, true, x11.Options{})
	t.Setenv("LC_ALL", "C.UTF-8")
	for _, args := range [][]string{
		{"-T", "files", "-geometry", "100x45+10+10", "-e", "sh", "-c", "ls -l --color=always /usr/bin | head -44; sleep 60"},
		{"-T", "doc", "-bg", "#fdf6e3", "-fg", "#333333", "-fa", "", "-geometry", "90x40+560+60", "-e", "sh", "-c", "fold -w 88 ../../../docs/architecture.md | head -39; sleep 60"},
		{"-T", "shell", "-bg", "#1d3557", "-fg", "#f1faee", "-geometry", "70x12+300+560", "-e", "sh", "-c", "ls -la /usr/share | head -11; sleep 60"},
	} {
		xvfbtest.Run(t, display, "xterm", args...)
	}
	waitWindow(t, d, func(w x11.Window) bool { return w.Title == "shell" })
	time.Sleep(time.Second) // let the terminals draw
	f, err := d.Capture(image.Rectangle{}, true)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := encode.PNG(file, f); err != nil {
		t.Fatal(err)
	}
}
