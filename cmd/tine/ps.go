package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newPsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the daemon's live sandboxes",
		Args:  cobra.NoArgs,
	}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		list, err := c.List(cmd.Context())
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tSTATE\tAGE\tEXPIRES\tEXECS\tMEMORY\tPIDS\tCPU")
		now := time.Now()
		for _, sb := range list {
			expires := "-"
			if sb.ExpiresAt != nil {
				expires = "in " + sb.ExpiresAt.Sub(now).Round(time.Second).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%.0fms\n", sb.ID, sb.State,
				now.Sub(sb.CreatedAt).Round(time.Second), expires, sb.Execs,
				humanBytes(sb.Usage.MemoryBytes), sb.Usage.Pids, sb.Usage.CPUTimeMs)
		}
		return w.Flush()
	}
	return cmd
}

// humanBytes prints n in binary units.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
