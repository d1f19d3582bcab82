package record

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfb"
	"github.com/tine-run/tine/internal/require"
)

// BenchmarkRecordCPU measures the CPU one second of 1280x800 video at 30
// fps costs a recording (ffmpeg's x11grab and encoding, the X server's
// copies into its shared memory, this process), on a static screen and on
// one repainted every frame. Run: go test -run XXX -bench RecordCPU
// -benchtime 1x ./internal/desktop/record/ (ADR 0020 has the figures
// against the guest feeding ffmpeg its own captures, which it replaced).
func BenchmarkRecordCPU(b *testing.B) {
	require.Binary(b, "ffmpeg")
	require.Binary(b, "Xvfb")
	// The X server a desktop runs, with its framebuffer in shared memory,
	// which the guest's captures read.
	x, err := xvfb.Start(context.Background(), xvfb.Config{Width: 1280, Height: 800})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { x.Cmd.Process.Kill(); x.Cmd.Wait() }()
	display := x.Display
	d, err := x11.Connect(display, x11.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := d.UseFramebuffer(x.Framebuffer); err != nil {
		b.Fatal(err)
	}
	const seconds = 4
	dir := b.TempDir()
	cpu := func(ru *syscall.Rusage) time.Duration {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	xvfbCPU := func() time.Duration {
		var sum time.Duration
		files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", x.Cmd.Process.Pid))
		for _, f := range files {
			var ns int64
			if b, err := os.ReadFile(f); err == nil {
				fmt.Sscan(string(b), &ns)
			}
			sum += time.Duration(ns)
		}
		return sum
	}
	// static: nothing drawn (an agent between steps); changing: the whole
	// screen repainted every frame (the painter's few requests a frame
	// count on the guest's side).
	for _, changing := range []bool{false, true} {
		b.Run(map[bool]string{false: "static", true: "changing"}[changing], func(b *testing.B) {
			stop := make(chan struct{})
			painted := make(chan struct{})
			go func() {
				defer close(painted)
				for i := 0; changing; i++ {
					d.PaintRoot(uint32(0x203040 + i%2*0x404040))
					select {
					case <-stop:
						return
					case <-time.After(time.Second / 30):
					}
				}
			}()
			defer func() { close(stop); <-painted }()
			for range b.N {
				var self0, self1, kids0, kids1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
				syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
				x0 := xvfbCPU()
				r, err := Start(d, Options{FPS: 30, Path: filepath.Join(dir, "rec.mp4"), Cursor: true})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(seconds * time.Second)
				if err := r.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
				syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
				xv := xvfbCPU() - x0
				self, ffmpeg := cpu(&self1)-cpu(&self0), cpu(&kids1)-cpu(&kids0)
				total := self + ffmpeg + xv
				b.ReportMetric(total.Seconds()/seconds, "cpu-s/s")
				b.Logf("%d frames; %v of CPU for %d s of video (ffmpeg %v, Xvfb %v, this process %v)", r.Frames, total, seconds, ffmpeg, xv, self)
			}
		})
	}
}
