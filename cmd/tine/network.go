package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/network"
)

func newNetworkCommand() *cobra.Command {
	var allow, deny []string
	cmd := &cobra.Command{
		Use:   "network ID [--allow RULE]... [--deny RULE]...",
		Short: "Replace a live egress sandbox's policy and print its network as JSON",
		Long: `network replaces the egress policy of a sandbox created with --network
egress: the new rules hold for every packet from the moment it returns,
connections already open included. With no --allow, everything not denied
and not always refused is allowed (docs/network.md).`,
		Example: `  tine network $id --allow pypi.org --allow '*.pythonhosted.org:443'`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "allow HOST, *.DOMAIN, ADDRESS or CIDR, each with an optional :PORT (repeatable)")
	cmd.Flags().StringArrayVar(&deny, "deny", nil, "refuse HOST, *.DOMAIN, ADDRESS or CIDR[:PORT] (repeatable)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		if _, err := network.ParsePolicy(allow, deny); err != nil {
			return usageError{err.Error()}
		}
		c, err := dial()
		if err != nil {
			return err
		}
		n, err := c.SetNetwork(cmd.Context(), ids[0], api.NetworkPolicy{Allow: allow, Deny: deny})
		if err != nil {
			return err
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(n)
	}
	return cmd
}
