package main

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/desktop/guest"
	"github.com/tine-run/tine/internal/procs"
)

func newGuestCommand() *cobra.Command {
	var (
		o    guest.Options
		size string
		apps []string
		wm   string
	)
	cmd := &cobra.Command{
		Use:   "guest --listen SOCKET [--size WxH] [--app JSON]... [--display :N]",
		Short: "Run a desktop and serve the ACI on a unix socket (inside a desktop sandbox, or on any X display)",
		Long: `guest starts Xvfb, a window manager and the apps, waits until the
manager manages windows and every app has mapped a window and holds the
focus, then serves the ACI (docs/aci.md) on --listen and prints one JSON
line {"display", "width", "height", "ready_ms"} on stdout. With --display it
attaches to that X display instead and starts nothing. tine serve runs it
inside each desktop sandbox.`,
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Listen == "" {
				return usageError{"guest needs --listen SOCKET"}
			}
			var err error
			if o.Width, o.Height, err = parseScreen(size); err != nil {
				return err
			}
			for _, a := range apps {
				o.Apps = append(o.Apps, parseApp(a))
			}
			if wm != "" {
				o.WindowManager = []string{wm}
			}
			// One P, and a second only while a screenshot's bands are coded:
			// a request handed between goroutines then wakes no idle thread
			// (internal/procs, ADR 0020).
			procs.Lean()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return guest.Run(ctx, o, func(r guest.Ready) {
				json.NewEncoder(os.Stdout).Encode(r)
			})
		},
	}
	cmd.Flags().StringVar(&o.Listen, "listen", "", "unix socket to serve the ACI on")
	cmd.Flags().BoolVar(&o.A11y, "a11y", false, "start a session bus so apps export their accessibility trees (AT-SPI)")
	cmd.Flags().StringVar(&o.CDP, "cdp", "", "forward this unix socket to Chromium's DevTools port inside the desktop (127.0.0.1:9222)")
	cmd.Flags().StringVar(&o.OSWorld, "osworld", "", "also serve OSWorld's guest API (docs/osworld.md) on this unix socket")
	cmd.Flags().StringVar(&o.OSWorldPassed, "osworld-passed", "", "with --osworld: also serve it on the TCP connections passed to this unix socket (SCM_RIGHTS, by the daemon)")
	cmd.Flags().StringVar(&o.User, "user", "", "run the session (window manager, apps, session bus, OSWorld's commands) as this account, made in the desktop's /etc with password \"password\" and sudo (only inside a desktop sandbox)")
	cmd.Flags().StringVar(&o.Display, "display", "", "attach to this X display instead of starting Xvfb")
	cmd.Flags().StringVar(&size, "size", "1280x800", "screen size of the Xvfb started")
	cmd.Flags().StringArrayVar(&apps, "app", nil, "an app to start: a command name, or a JSON argv")
	cmd.Flags().BoolVar(&o.GLX, "glx", false, "keep Xvfb's GLX extension (software OpenGL; about 54 MiB more per desktop)")
	cmd.Flags().BoolVar(&o.NoSHM, "no-shm", false, "use no System V shared memory (the screen in a file in /run; the desktop can be checkpointed)")
	cmd.Flags().StringVar(&wm, "wm", "", `window manager command (default openbox; "none" for none)`)
	return cmd
}
