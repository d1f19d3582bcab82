package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/sandbox"
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
start, so that part of gc is only needed to clean up without running a
sandbox.

gc also removes the os view's layers (the empty entries that hide the host's
data, made once per distinct view under /run/tine/views or
/dev/shm/tine-views) that no running tine uses: a new one is made whenever
the set of hidden files changes, and only gc removes the old ones.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := cgroup.Detect()
			if err != nil {
				return err
			}
			removed, err := h.Reap()
			layers, lerr := sandbox.RemoveUnusedViewLayers()
			removed = append(removed, layers...)
			for _, d := range removed {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", d)
			}
			if err = errors.Join(err, lerr); err != nil {
				return err
			}
			if len(removed) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
			}
			return nil
		},
	}
}
