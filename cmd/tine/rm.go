package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/client"
)

func newRmCommand() *cobra.Command {
	return newDeleteCommand("rm ID...", "Destroy live sandboxes", func(ctx context.Context, c *client.Client, id string) error {
		return c.Delete(ctx, id)
	})
}

// newDeleteCommand is a command that deletes each thing its arguments name
// through the daemon, printing each name deleted. It goes on past a name it
// cannot delete, and fails at the end with every such name's error.
func newDeleteCommand(use, short string, del func(context.Context, *client.Client, string) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.MinimumNArgs(1)}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		var errs []error
		for _, name := range names {
			if err := del(cmd.Context(), c, name); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			fmt.Fprintln(cmd.OutOrStdout(), name)
		}
		return errors.Join(errs...)
	}
	return cmd
}
