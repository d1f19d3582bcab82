package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

func newDesktopCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "desktop",
		Short: "Desktops for computer-use agents: Xvfb, a window manager and apps in a sandbox, driven over the ACI (needs tine serve)",
		Long: `A desktop is a sandbox running Xvfb, openbox and the apps asked for, and
tine's guest, which serves the ACI (docs/aci.md) at
/v1/desktops/{id}/aci. Its id works with the sandbox verbs too (tine exec,
the files API).`,
	}
	exec := newExecCommand()
	exec.Use = "exec [flags] ID -- CMD [ARGS...]"
	exec.Short = "Run a command in a desktop's sandbox, on its display (as tine exec)"
	cmd.AddCommand(newDesktopCreateCommand(), newDesktopLsCommand(), newDesktopRmCommand(), newDesktopScreenshotCommand(), newDesktopViewCommand(), exec)
	return cmd
}

func newDesktopCreateCommand() *cobra.Command {
	var size, memory string
	var apps []string
	var net netFlags
	spec := &api.DesktopSpec{}
	cmd := &cobra.Command{
		Use:   "create [--size WxH] [--app CMD]...",
		Short: "Start a desktop; prints its id once every app has a window and the last one the focus",
		Args:  noArgs,
	}
	cmd.Flags().StringVar(&size, "size", "1280x800", "screen size")
	cmd.Flags().StringArrayVar(&apps, "app", nil, `an app to start: a command name, or a JSON argv like '["xterm","-bg","black"]'`)
	cmd.Flags().StringVar(&memory, "memory", "", "memory limit of the desktop's sandbox (default 1g)")
	cmd.Flags().BoolVar(&spec.GLX, "glx", false, "give the X server software OpenGL (about 54 MiB more per desktop)")
	cmd.Flags().BoolVar(&spec.A11y, "a11y", false, "start a session bus so apps export their accessibility trees (the ACI's accessibility op)")
	cmd.Flags().BoolVar(&spec.CDP, "cdp", false, "publish Chromium's DevTools port (9222 in the desktop) on a loopback port (printed on stderr)")
	cmd.Flags().BoolVar(&spec.OSWorld, "osworld", false, "serve OSWorld's guest API on a loopback port of its own, with --a11y and --cdp (printed on stderr), the session as user \"user\" with password \"password\" and sudo (docs/osworld.md)")
	addNetFlags(cmd.Flags(), &net)
	cmd.Flags().StringVar(&spec.Image, "image", "", "an OCI image with Xvfb, a window manager and the apps, as the desktop's root (the daemon pulls it when missing)")
	cmd.Flags().BoolVar(&spec.MemoryTier, "memory-tier", false, "accepted and ignored: every desktop is one memory snapshots can capture")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if spec.Width, spec.Height, err = parseScreen(size); err != nil {
			return err
		}
		if spec.Network, spec.Allow, spec.Deny, spec.Publish, err = net.apply(); err != nil {
			return err
		}
		if spec.Inject, err = injections(net.inject); err != nil {
			return err
		}
		for _, a := range apps {
			spec.Apps = append(spec.Apps, parseApp(a))
		}
		if memory != "" {
			m, err := parseSize("memory", memory)
			if err != nil {
				return err
			}
			spec.Limits.MemoryBytes = m
		}
		c, err := dial()
		if err != nil {
			return err
		}
		d, err := c.CreateDesktop(cmd.Context(), spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), d.ID)
		if d.OSWorld != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "osworld: http://%s/\n", d.OSWorld)
		}
		if d.CDP != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "cdp: http://%s/\n", d.CDP)
		}
		return nil
	}
	return cmd
}

func newDesktopLsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ls", Short: "List the desktops", Args: noArgs}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		ds, err := c.Desktops(cmd.Context())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tSIZE\tREADY_MS\tMEMORY")
		for _, d := range ds {
			fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%.0f\t%d MiB\n", d.ID, d.State, d.Width, d.Height, d.ReadyMs, d.Usage.MemoryBytes>>20)
		}
		return tw.Flush()
	}
	return cmd
}

func newDesktopRmCommand() *cobra.Command {
	return newDeleteCommand("rm ID...", "Destroy desktops", func(ctx context.Context, c *client.Client, id string) error {
		return c.DeleteDesktop(ctx, id)
	})
}

func newDesktopScreenshotCommand() *cobra.Command {
	var out, format string
	var quality, maxEdge int
	var cursor bool
	cmd := &cobra.Command{Use: "screenshot ID -o FILE", Short: "Save a screenshot of a desktop (PNG, or JPEG with --format jpeg)", Args: cobra.ExactArgs(1)}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (- for stdout)")
	cmd.Flags().StringVar(&format, "format", "png", "png or jpeg")
	cmd.Flags().IntVar(&quality, "quality", 0, "JPEG quality 1-100 (default 80)")
	cmd.Flags().IntVar(&maxEdge, "max-long-edge", 0, "downscale so the longer edge is at most this")
	cmd.Flags().BoolVar(&cursor, "cursor", false, "draw the pointer in")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if out == "" {
			return usageError{"screenshot needs -o FILE (or -o - for stdout)"}
		}
		c, err := dial()
		if err != nil {
			return err
		}
		a, err := c.DialACI(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		defer a.Close()
		_, img, err := a.Screenshot(cmd.Context(), &api.ACIScreenshot{Format: format, Quality: quality, MaxLongEdge: maxEdge, Cursor: cursor})
		if err != nil {
			return err
		}
		if out == "-" {
			_, err = cmd.OutOrStdout().Write(img)
			return err
		}
		return os.WriteFile(out, img, 0o644)
	}
	return cmd
}
