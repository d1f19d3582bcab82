package encode

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/tine-run/tine/internal/procs"
)

// A desktop's guest runs on one P (internal/procs): its screenshots are
// still coded in one band per CPU it may use, to the same bytes, and the
// Ps they borrowed are given back.
func TestPNGInALeanProcess(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // as on a 4-CPU host
	f := screenFrame(t)
	want, err := pngBytes(f)
	if err != nil {
		t.Fatal(err)
	}
	restore := procs.Lean()
	defer restore()
	if n := bandCount(f); n != 4 {
		t.Fatalf("a 1280x800 frame is coded in %d bands on one P, want the 4 the process may use", n)
	}
	got, err := pngBytes(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the PNG coded on borrowed Ps differs (%d bytes, want %d)", len(got), len(want))
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS %d after the screenshot, want 1 again", n)
	}
}

// So are its JPEG screenshots.
func TestJPEGInALeanProcess(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	f := screenFrame(t)
	want, err := jpegBytes(f, 80)
	if err != nil {
		t.Fatal(err)
	}
	restore := procs.Lean()
	defer restore()
	got, err := jpegBytes(f, 80)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the JPEG coded in a lean process differs (%d bytes, want %d)", len(got), len(want))
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
