package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
)

func newInspectCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect ID...",
		Short: "Print live sandboxes as JSON: state, spec, usage",
		Args:  cobra.MinimumNArgs(1),
	}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		out := make([]*api.Sandbox, 0, len(ids))
		for _, id := range ids {
			sb, err := c.Get(cmd.Context(), id)
			if err != nil {
				return err
			}
			out = append(out, sb)
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if len(out) == 1 {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	return cmd
}
