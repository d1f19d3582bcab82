package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Capture live sandboxes and desktops, to fork them later (needs tine serve)",
		Long: `A snapshot is an immutable capture of a live sandbox or desktop, kept under
the daemon's --state-dir across restarts. The fs tier (the default) freezes
the sandbox for a moment and captures its writable layer: every file it
created, changed or deleted. Its forks (tine fork) boot fresh over those
files; a desktop's forks are desktops, with a fresh screen. The memory tier
(--tier memory, or --memory) also dumps every process of the sandbox with
criu, stopping them for a moment: each fork restores them, with their memory
and pids, over the same files; a desktop forks with its screen (needs a daemon running as root and a working criu:
tine doctor). See docs/snapshots.md.`,
	}
	cmd.AddCommand(newSnapshotCreateCommand(), newSnapshotLsCommand(), newSnapshotInspectCommand(), newSnapshotRmCommand())
	return cmd
}

func newSnapshotCreateCommand() *cobra.Command {
	var req api.SnapshotRequest
	var memory bool
	cmd := &cobra.Command{Use: "create [--name N] [--tier fs|memory] ID", Short: "Snapshot a live sandbox or desktop; prints the snapshot's id", Args: cobra.ExactArgs(1)}
	cmd.Flags().StringVar(&req.Name, "name", "", "a label for the snapshot")
	cmd.Flags().StringVar(&req.Tier, "tier", api.TierFS, "fs (the files) or memory (the files and every process, with criu)")
	cmd.Flags().BoolVar(&memory, "memory", false, "the memory tier (--tier memory)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if memory {
			if cmd.Flags().Changed("tier") && req.Tier != api.TierMemory {
				return usageError{fmt.Sprintf("--memory and --tier %s disagree", req.Tier)}
			}
			req.Tier = api.TierMemory
		}
		if req.Tier != api.TierFS && req.Tier != api.TierMemory {
			return usageError{fmt.Sprintf("invalid --tier %q: want fs or memory", req.Tier)}
		}
		c, err := dial()
		if err != nil {
			return err
		}
		sn, err := c.Snapshot(cmd.Context(), args[0], &req)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), sn.ID)
		return nil
	}
	return cmd
}

func newSnapshotLsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ls", Short: "List the snapshots, oldest first", Args: noArgs}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		list, err := c.Snapshots(cmd.Context())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tTIER\tKIND\tSOURCE\tPARENT\tDEPTH\tSIZE\tFORKS\tCREATED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", s.ID, dash(s.Name), s.Tier, s.Kind, s.Source, dash(s.Parent),
				s.Depth, humanBytes(s.Bytes), s.Forks, s.CreatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	}
	return cmd
}

func newSnapshotInspectCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "inspect SNAPSHOT", Short: "Describe a snapshot as JSON", Args: cobra.ExactArgs(1)}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		sn, err := c.GetSnapshot(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(sn)
	}
	return cmd
}

func newSnapshotRmCommand() *cobra.Command {
	return newDeleteCommand("rm SNAPSHOT...", "Delete snapshots (refused while forks of one are live)", func(ctx context.Context, c *client.Client, id string) error {
		return c.DeleteSnapshot(ctx, id)
	})
}

func newForkCommand() *cobra.Command {
	var n int
	var memory bool
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "fork [-n N] SNAPSHOT|SANDBOX",
		Short: "Make N replicas of a snapshot, or of a live sandbox (snapshotted first); prints their ids",
		Long: `fork makes N replicas, all or none: when the daemon's budget cannot hold
every one, nothing is made and the answer is 429. Given a snapshot id
(s + 12 hex digits, from tine snapshot create), it forks that snapshot;
given a live sandbox or desktop id, it snapshots it first (--memory: the
memory tier) and forks the new snapshot. Each replica is a full sandbox (a
desktop, for a desktop's snapshot) with the source's limits.`,
		Example: `  id=$(tine create); tine exec "$id" -- sh -c 'echo state > /etc/golden'
  snap=$(tine snapshot create "$id")
  tine fork -n 8 "$snap"`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().IntVarP(&n, "count", "n", 1, "how many replicas")
	cmd.Flags().BoolVar(&memory, "memory", false, "when forking a live sandbox: take a memory-tier snapshot")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "destroy each replica after this long (default: the source's)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if n < 1 {
			return usageError{fmt.Sprintf("invalid --count %d: want 1 or more", n)}
		}
		req := &api.ForkRequest{Count: n}
		if ttl > 0 {
			secs := int64(ttl.Round(time.Second) / time.Second)
			req.TTLSeconds = &secs
		}
		c, err := dial()
		if err != nil {
			return err
		}
		var res *api.ForkResult
		if isSnapshotID(args[0]) {
			if memory {
				return usageError{"--memory is for forking a live sandbox; a snapshot's tier is fixed"}
			}
			res, err = c.Fork(cmd.Context(), args[0], req)
		} else {
			if memory {
				req.Tier = api.TierMemory
			}
			res, err = c.ForkSandbox(cmd.Context(), args[0], req)
		}
		if err != nil {
			return err
		}
		for _, s := range res.Sandboxes {
			fmt.Fprintln(cmd.OutOrStdout(), s.ID)
		}
		for _, d := range res.Desktops {
			fmt.Fprintln(cmd.OutOrStdout(), d.ID)
		}
		return nil
	}
	return cmd
}

// isSnapshotID tells a snapshot id (s and 12 hex digits) from a sandbox's
// (12 hex digits).
func isSnapshotID(id string) bool {
	return len(id) == 13 && id[0] == 's' && strings.Trim(id[1:], "0123456789abcdef") == ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
