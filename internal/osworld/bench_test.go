package osworld

import (
	"context"
	"testing"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfbtest"
)

// BenchmarkFastClick: OSWorld's click action on the fast path in process
// (recognize and parse the program, bind, click through XTEST with a
// round trip), without HTTP. Run: go test -run XXX -bench FastClick
// ./internal/osworld/
func BenchmarkFastClick(b *testing.B) {
	display := xvfbtest.Start(b, 1280, 800)
	d, err := x11.Connect(display, x11.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	p := &PyAutoGUI{D: d}
	argv := []string{"python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.click(640, 400)"}
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, ok := fastProgram(argv); !ok {
				b.Fatal("not the fast path")
			}
		}
	})
	b.Run("parse+click", func(b *testing.B) {
		for b.Loop() {
			prog, ok := fastProgram(argv)
			if !ok {
				b.Fatal("not the fast path")
			}
			if err := prog.run(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
