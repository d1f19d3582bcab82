package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
)

func newDesktopViewCommand() *cobra.Command {
	var ttl time.Duration
	spec := &api.ViewSpec{}
	cmd := &cobra.Command{
		Use:   "view ID [--view-only] [--ttl 10m]",
		Short: "Print the URL of a page that shows a desktop live in a browser (and takes its mouse and keyboard unless --view-only)",
		Long: `view prints the URL of the daemon's viewer page for desktop ID: the desktop's
screencast on a canvas, the browser's mouse and keyboard sent back as ACI
input unless --view-only. The URL carries a token signed by the daemon for
this desktop only, good for --ttl (sessions opened meanwhile go on), not the
daemon's bearer token. Open it on the daemon's TCP listener (tine serve
--listen); through the unix socket only the path is printed.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&spec.ViewOnly, "view-only", false, "watch only: the page's session refuses input")
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Minute, "how long the URL can be opened (at most 24h)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if ttl < time.Second || ttl > 24*time.Hour {
			return usageError{"--ttl wants 1s to 24h"}
		}
		spec.TTLSeconds = int64(ttl / time.Second)
		c, err := dial()
		if err != nil {
			return err
		}
		_, u, err := c.DesktopView(cmd.Context(), args[0], spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), u)
		if strings.HasPrefix(u, "/") {
			fmt.Fprintln(cmd.ErrOrStderr(), "tine: reached over the unix socket: open this path on the daemon's TCP listener (tine serve --listen ADDR)")
		}
		return nil
	}
	return cmd
}
