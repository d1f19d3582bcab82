package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

func newRmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy live sandboxes",
		Args:  cobra.MinimumNArgs(1),
	}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		var errs []error
		for _, id := range ids {
			if err := c.Delete(cmd.Context(), id); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				continue
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
		}
		return errors.Join(errs...)
	}
	return cmd
}
