// Package xvfbtest starts throwaway X servers for tests and benchmarks: an
// Xvfb on a display number it picks itself (-displayfd, so parallel tests
// and other users of the machine do not collide), optionally a window
// manager, and programs on that display, all stopped in t.Cleanup.
package xvfbtest

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/desktop/x11"
	"github.com/tine-run/tine/internal/desktop/xvfb"
	"github.com/tine-run/tine/internal/require"
)

// startTimeout bounds waiting for a program to come up.
const startTimeout = 15 * time.Second

// Start runs Xvfb with one width×height×24 screen and returns its display
// name (":N") once it accepts connections. wrap, when given, is a command
// prefix Xvfb runs under (e.g. "unshare", "--ipc"). Without Xvfb the test
// is skipped (or fails under TINE_STRICT=xvfb).
func Start(tb testing.TB, width, height int, wrap ...string) string {
	tb.Helper()
	return StartServer(tb, width, height, wrap...).Display
}

// StartServer is Start returning the whole server (its framebuffer's
// segment id too).
func StartServer(tb testing.TB, width, height int, wrap ...string) *xvfb.Server {
	tb.Helper()
	require.Binary(tb, "Xvfb")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := xvfb.Start(ctx, xvfb.Config{Width: width, Height: height, Wrap: wrap})
	if err != nil {
		tb.Fatal(err)
	}
	stop(tb, s.Cmd)
	return s
}

// Run starts a program on display, killed (with its process group) in
// Cleanup.
func Run(tb testing.TB, display string, name string, args ...string) *exec.Cmd {
	tb.Helper()
	require.Binary(tb, name)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop(tb, cmd)
	return cmd
}

func stop(tb testing.TB, cmd *exec.Cmd) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

// WindowManager starts openbox on display and returns once it manages
// windows (x11.Display.WaitWindowManager).
func WindowManager(tb testing.TB, display string) {
	tb.Helper()
	Run(tb, display, "openbox", "--sm-disable")
	d, err := x11.Connect(display, x11.Options{NoSHM: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := d.WaitWindowManager(ctx); err != nil {
		tb.Fatal(err)
	}
}
