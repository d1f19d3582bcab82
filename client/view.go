package client

import (
	"context"

	"github.com/tine-run/tine/api"
)

// DesktopView makes a viewer page for desktop id (a short-lived signed
// token, not the daemon's) and returns it with the page's URL: absolute
// on a TCP client; on a unix socket client only the path, to open on the
// daemon's TCP listener.
func (c *Client) DesktopView(ctx context.Context, id string, spec *api.ViewSpec) (*api.View, string, error) {
	if spec == nil {
		spec = &api.ViewSpec{}
	}
	var v api.View
	if err := c.call(ctx, "POST", desktopPath(id)+"/view", nil, spec, &v); err != nil {
		return nil, "", err
	}
	if c.token == "" && c.base == "http://tine" {
		return &v, v.Path, nil
	}
	return &v, c.base + v.Path, nil
}
