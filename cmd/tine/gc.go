package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/store"
)

func newGCCommand() *cobra.Command {
	stateDir := os.Getenv("TINE_STATE_DIR")
	if stateDir == "" {
		stateDir = "/var/lib/tine"
	}
	cmd := &cobra.Command{
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
the set of hidden files changes, and only gc removes the old ones. And it
unmounts the layer store's own image (STATE-DIR/store, mounted when the state
directory shares the root's filesystem) when a daemon or tine pull that held
it was killed and no process holds it any more.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", stateDir, "state directory whose layer store to unmount when no one holds it (default $TINE_STATE_DIR, else /var/lib/tine)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		h, err := cgroup.Detect()
		if err != nil {
			return err
		}
		removed, err := h.Reap()
		layers, lerr := sandbox.RemoveUnusedViewLayers()
		removed = append(removed, layers...)
		storeDir := filepath.Join(stateDir, "store")
		unmounted, serr := store.UnmountUnused(storeDir)
		if unmounted {
			removed = append(removed, "the mount of "+storeDir)
		}
		for _, d := range removed {
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", d)
		}
		if err = errors.Join(err, lerr, serr); err != nil {
			return err
		}
		if len(removed) == 0 {
			fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
		}
		return nil
	}
	return cmd
}
