package record

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfb"
	"github.com/tine-run/tine/internal/require"
)

// BenchmarkRecordCPU compares the CPU one second of 1280x800 video at 30
// fps costs when the guest feeds ffmpeg its own captures (this package)
// and when ffmpeg grabs the screen itself as a second X client (x11grab,
// OSWorld's way). Both sides count the X server's time too: x11grab's
// frames are copied by Xvfb (XShmGetImage), the guest's are read from
// Xvfb's framebuffer directly. Run: go test -run XXX -bench RecordCPU
// -benchtime 1x ./internal/desktop/record/
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
				// Ours: the guest's capture (this process) plus ffmpeg's encoding
				// (a child).
				var self0, self1, kids0, kids1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
				syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
				x0 := xvfbCPU()
				r, err := Start(d, Options{FPS: 30, Path: filepath.Join(dir, "ours.mp4")})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(seconds * time.Second)
				if err := r.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
				syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
				oursX := xvfbCPU() - x0
				ours := cpu(&self1) - cpu(&self0) + cpu(&kids1) - cpu(&kids0) + oursX

				// x11grab, OSWorld's command with the same encoder settings.
				cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "x11grab", "-draw_mouse", "1",
					"-framerate", "30", "-video_size", "1280x800", "-i", display, "-t", fmt.Sprint(seconds),
					"-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p", filepath.Join(dir, "grab.mp4"))
				cmd.Stderr = os.Stderr
				x0 = xvfbCPU()
				if err := cmd.Run(); err != nil {
					b.Fatalf("x11grab: %v", err)
				}
				grabX := xvfbCPU() - x0
				grab := cpu(cmd.ProcessState.SysUsage().(*syscall.Rusage)) + grabX
				b.ReportMetric(ours.Seconds()/seconds, "cpu-s/s-guest-fed")
				b.ReportMetric(grab.Seconds()/seconds, "cpu-s/s-x11grab")
				b.Logf("%d frames; guest-fed %v (capture %v, ffmpeg %v, Xvfb %v), x11grab %v (Xvfb %v) of CPU for %d s of video",
					r.Frames, ours, cpu(&self1)-cpu(&self0), cpu(&kids1)-cpu(&kids0), oursX, grab, grabX, seconds)
			}

		})
	}
}
