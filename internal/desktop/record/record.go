// Package record films a display into an H.264 mp4: the guest captures
// frames itself (from Xvfb's framebuffer where it can, the same capture
// screenshots use) and pipes them raw to Debian's ffmpeg, which only
// encodes. No second X client grabs the screen, and the cursor is drawn in
// as screenshots draw it.
package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/internal/capped"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// Limits of a recording.
const (
	DefaultFPS = 15
	MaxFPS     = 60
	// stopTimeout bounds ffmpeg's finishing the file.
	stopTimeout = 30 * time.Second
)

// ErrNoFFmpeg is a recording asked for where ffmpeg is not installed.
var ErrNoFFmpeg = errors.New("ffmpeg is not installed in the desktop (Debian package ffmpeg)")

// Options say how to record.
type Options struct {
	FPS    int    // frames a second (default DefaultFPS)
	Path   string // the mp4 written (its directory must exist)
	Cursor bool   // draw the pointer in
}

// Recorder is one recording in progress.
type Recorder struct {
	d      *x11.Display
	o      Options
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *capped.Buffer
	stop   chan struct{}
	done   chan error // the capture loop's end
	once   sync.Once
	result error
	ended  atomic.Bool // the capture loop ended (stopped, or ffmpeg died)

	Frames  int // written to ffmpeg, when stopped
	Started time.Time
}

// Start starts filming d into o.Path.
func Start(d *x11.Display, o Options) (*Recorder, error) {
	if o.FPS == 0 {
		o.FPS = DefaultFPS
	}
	if o.FPS < 1 || o.FPS > MaxFPS {
		return nil, fmt.Errorf("fps %d: want 1 to %d", o.FPS, MaxFPS)
	}
	if !filepath.IsAbs(o.Path) {
		return nil, fmt.Errorf("recording path %q is not absolute", o.Path)
	}
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil, ErrNoFFmpeg
	}
	w, h := d.Size()
	// libx264 with yuv420p wants even dimensions: the odd row or column is
	// cropped.
	cmd := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error", "-y",
		"-f", "rawvideo", "-pix_fmt", "bgr0", "-video_size", fmt.Sprintf("%dx%d", w, h), "-framerate", fmt.Sprint(o.FPS), "-i", "pipe:0",
		"-vf", "crop=trunc(iw/2)*2:trunc(ih/2)*2", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-movflags", "+faststart", "-f", "mp4", o.Path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if f, ok := stdin.(*os.File); ok {
		// A frame is megabytes: a pipe of the default 64 KiB would take
		// dozens of wake-ups on each side per frame.
		growPipe(f)
	}
	r := &Recorder{d: d, o: o, cmd: cmd, stdin: stdin, stderr: capped.New(16 << 10), stop: make(chan struct{}), done: make(chan error, 1)}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ffmpeg: %w", err)
	}
	r.Started = time.Now()
	go func() {
		err := r.loop()
		r.ended.Store(true)
		r.done <- err
	}()
	return r, nil
}

// loop captures a frame each tick and writes it; when the capture falls
// behind, it writes the last frame again, so the video keeps the
// wall-clock timeline (duration = frames / fps).
func (r *Recorder) loop() error {
	period := time.Second / time.Duration(r.o.FPS)
	var bufs [2]*frame.Frame
	var last *frame.Frame
	t := time.NewTicker(period)
	defer t.Stop()
	var version uint64
	var pointer x11.Point
	for i := 0; ; i++ {
		// An unchanged screen (DAMAGE reports nothing drawn, the pointer
		// where it was) is the last frame again: no capture.
		v := r.d.ScreenVersion()
		var p x11.Point
		if r.o.Cursor {
			p, _ = r.d.CursorPosition()
		}
		if last == nil || !r.d.Damage() || v != version || p != pointer {
			f, err := r.d.CaptureInto(bufs[i%2], image.Rectangle{}, r.o.Cursor)
			if err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			bufs[i%2], last = f, f
			version, pointer = v, p
		}
		due := int(time.Since(r.Started)/period) + 1
		for r.Frames < due {
			if err := writeFrame(r.stdin, last); err != nil {
				return fmt.Errorf("write a frame to ffmpeg: %w", err)
			}
			r.Frames++
		}
		select {
		case <-r.stop:
			return nil
		case <-t.C:
		}
	}
}

func writeFrame(w io.Writer, f *frame.Frame) error {
	if f.Stride == f.Width*4 {
		_, err := w.Write(f.Pix[:f.Width*f.Height*4])
		return err
	}
	for y := range f.Height {
		if _, err := w.Write(f.Pix[y*f.Stride : y*f.Stride+f.Width*4]); err != nil {
			return err
		}
	}
	return nil
}

// Running says whether the recording still goes on (ffmpeg may have died).
func (r *Recorder) Running() bool { return !r.ended.Load() }

// Stop ends the recording and waits for ffmpeg to finish the file.
func (r *Recorder) Stop(ctx context.Context) error {
	r.once.Do(func() {
		close(r.stop)
		loopErr := <-r.done
		r.stdin.Close()
		wait := make(chan error, 1)
		go func() { wait <- r.cmd.Wait() }()
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		var err error
		select {
		case err = <-wait:
		case <-ctx.Done():
			r.cmd.Process.Kill()
			err = fmt.Errorf("ffmpeg did not finish the file in time: %w", <-wait)
		}
		if err != nil {
			r.result = fmt.Errorf("ffmpeg: %v: %s", err, bytes.TrimSpace(r.stderr.Bytes()))
		} else if loopErr != nil {
			r.result = loopErr
		}
		if st, err := os.Stat(r.o.Path); r.result == nil && (err != nil || st.Size() == 0) {
			r.result = fmt.Errorf("ffmpeg wrote no video: %s", bytes.TrimSpace(r.stderr.Bytes()))
		}
	})
	return r.result
}

// Path is the file being written.
func (r *Recorder) Path() string { return r.o.Path }

// FPS is the recording's frame rate.
func (r *Recorder) FPS() int { return r.o.FPS }
