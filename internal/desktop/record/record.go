// Package record films a display into an H.264 mp4 with Debian's ffmpeg,
// which grabs the screen itself (x11grab, OSWorld's way: a second X client
// reading the screen through MIT-SHM) and encodes at a constant frame
// rate, repeating a frame when a grab is late so the video keeps the wall
// clock. That costs less CPU than the guest capturing and piping raw
// frames to ffmpeg (ADR 0020: the pipe's two copies of every frame cost
// more than the X server's one).
package record

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/internal/capped"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// Limits of a recording.
const (
	DefaultFPS = 15
	MaxFPS     = 60
	// stopTimeout bounds ffmpeg's finishing the file, startTimeout its
	// first frame.
	stopTimeout  = 30 * time.Second
	startTimeout = 30 * time.Second
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
	o       Options
	cmd     *exec.Cmd
	stderr  *capped.Buffer
	frames  atomic.Int64  // output frames so far, from ffmpeg's progress
	exited  chan struct{} // closed when ffmpeg has exited
	waitErr error
	once    sync.Once
	result  error

	Frames  int // in the file, when stopped
	Started time.Time
}

// Start starts filming d into o.Path and returns once ffmpeg has grabbed
// its first frame, so that what happens after Start is in the video.
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
	fps := strconv.Itoa(o.FPS)
	mouse := "0"
	if o.Cursor {
		mouse = "1"
	}
	// libx264 with yuv420p wants even dimensions: the odd row or column is
	// cropped. fps_mode cfr repeats frames a late grab missed (and drops
	// extra ones), so frames / fps is the wall-clock duration.
	cmd := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error", "-nostdin", "-nostats", "-y",
		"-f", "x11grab", "-draw_mouse", mouse, "-framerate", fps, "-video_size", fmt.Sprintf("%dx%d", w, h), "-i", d.Name(),
		"-vf", "crop=trunc(iw/2)*2:trunc(ih/2)*2", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-fps_mode", "cfr", "-r", fps, "-movflags", "+faststart",
		"-progress", "pipe:1", "-stats_period", "0.05", "-f", "mp4", o.Path)
	progress, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r := &Recorder{o: o, cmd: cmd, stderr: capped.New(16 << 10), exited: make(chan struct{})}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ffmpeg: %w", err)
	}
	first := make(chan struct{})
	go r.readProgress(progress, first)
	select {
	case <-first:
		r.Started = time.Now()
		return r, nil
	case <-r.exited:
		return nil, fmt.Errorf("ffmpeg: %v: %s", r.waitErr, bytes.TrimSpace(r.stderr.Bytes()))
	case <-time.After(startTimeout):
		cmd.Process.Kill()
		<-r.exited
		return nil, fmt.Errorf("ffmpeg grabbed no frame in %s: %s", startTimeout, bytes.TrimSpace(r.stderr.Bytes()))
	}
}

// readProgress follows ffmpeg's -progress blocks (key=value lines; frame=
// counts the frames written) until ffmpeg ends, closing first at the first
// frame and exited once it has exited.
func (r *Recorder) readProgress(progress io.Reader, first chan struct{}) {
	sc := bufio.NewScanner(progress)
	seen := false
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "frame=")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			r.frames.Store(n)
			if n > 0 && !seen {
				seen = true
				close(first)
			}
		}
	}
	io.Copy(io.Discard, progress)
	r.waitErr = r.cmd.Wait()
	close(r.exited)
}

// Running says whether the recording still goes on (ffmpeg may have died).
func (r *Recorder) Running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// Stop ends the recording (SIGINT: ffmpeg finishes the file, as OSWorld
// stops it) and waits for the file.
func (r *Recorder) Stop(ctx context.Context) error {
	r.once.Do(func() {
		r.cmd.Process.Signal(os.Interrupt)
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		select {
		case <-r.exited:
		case <-ctx.Done():
			r.cmd.Process.Kill()
			<-r.exited
			r.result = fmt.Errorf("ffmpeg did not finish the file in time: %s", bytes.TrimSpace(r.stderr.Bytes()))
			return
		}
		r.Frames = int(r.frames.Load())
		// ffmpeg exits 255 on the SIGINT it was stopped with.
		var exit *exec.ExitError
		if err := r.waitErr; err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 255 && len(r.stderr.Bytes()) == 0) {
			r.result = fmt.Errorf("ffmpeg: %v: %s", err, bytes.TrimSpace(r.stderr.Bytes()))
		}
		if st, err := os.Stat(r.o.Path); r.result == nil && (err != nil || st.Size() == 0 || r.Frames == 0) {
			r.result = fmt.Errorf("ffmpeg wrote no video: %s", bytes.TrimSpace(r.stderr.Bytes()))
		}
	})
	return r.result
}

// Path is the file being written.
func (r *Recorder) Path() string { return r.o.Path }

// FPS is the recording's frame rate.
func (r *Recorder) FPS() int { return r.o.FPS }
