package encode

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/procs"
)

// A desktop's guest runs on one P (internal/procs): its screenshots are
// still coded in one band per CPU it may use, to the same bytes, and the
// Ps they borrowed are given back.
func TestPNGInALeanProcess(t *testing.T) {
	codesAlikeWhenLean(t, "PNG", pngBytes, func(f *frame.Frame) {
		if n := bandCount(f); n != 4 {
			t.Fatalf("a 1280x800 frame is coded in %d bands on one P, want the 4 the process may use", n)
		}
	})
}

// So are its JPEG screenshots.
func TestJPEGInALeanProcess(t *testing.T) {
	codesAlikeWhenLean(t, "JPEG", func(f *frame.Frame) ([]byte, error) { return jpegBytes(f, 80) }, nil)
}

// codesAlikeWhenLean codes the screen frame as a 4-CPU process and again
// after procs.Lean (running lean, when given, first), and checks the bytes
// are the same and GOMAXPROCS is back at 1.
func codesAlikeWhenLean(t *testing.T, format string, code func(*frame.Frame) ([]byte, error), lean func(*frame.Frame)) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // as on a 4-CPU host
	f := screenFrame(t)
	want, err := code(f)
	if err != nil {
		t.Fatal(err)
	}
	defer procs.Lean()()
	if lean != nil {
		lean(f)
	}
	got, err := code(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the %s coded in a lean process differs (%d bytes, want %d)", format, len(got), len(want))
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS %d after the screenshot, want 1 again", n)
	}
}

// BenchmarkPNGLean is BenchmarkPNG in a lean process (the guest's): the
// bands on borrowed Ps, GOMAXPROCS raised and lowered around each.
func BenchmarkPNGLean(b *testing.B) {
	f := screenFrame(b)
	defer procs.Lean()()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		PNG(&buf, f)
	}
}
