package client

import (
	"context"

	"github.com/tine-run/tine/api"
)

// SetNetwork replaces a live egress sandbox's policy; it is in force
// (also for connections already open) when SetNetwork returns.
func (c *Client) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (*api.Network, error) {
	var n api.Network
	if err := c.call(ctx, "PUT", sandboxPath(id)+"/network", nil, p, &n); err != nil {
		return nil, err
	}
	return &n, nil
}
