package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/kernel/cgroup"
)

func newGCCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove what sandboxes of a killed tine left behind",
		Long: `Remove what sandboxes of a killed tine left behind.

A sandbox's mounts live in its own mount namespace and vanish with it, and its
processes die with its PID 1, which the kernel kills when tine dies. Its cgroup
is the one thing on the host: gc kills any process still in a cgroup whose
owning tine is gone, and removes the cgroup. Every tine run does the same at
start, so gc is only needed to clean up without running a sandbox.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := cgroup.Detect()
			if err != nil {
				return err
			}
			removed, err := h.Reap()
			for _, d := range removed {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", d)
			}
			if err != nil {
				return err
			}
			if len(removed) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
			}
			return nil
		},
	}
}
