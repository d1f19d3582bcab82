package client

import (
	"context"

	"github.com/tine-run/tine/api"
)

// Create starts a live sandbox; spec may be nil for the defaults. A full
// host budget is an *Error with code api.CodeCapacity and a RetryAfter.
func (c *Client) Create(ctx context.Context, spec *api.SandboxSpec) (*api.Sandbox, error) {
	if spec == nil {
		spec = &api.SandboxSpec{}
	}
	var sb api.Sandbox
	if err := c.call(ctx, "POST", "/v1/sandboxes", nil, spec, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// List returns every sandbox the daemon knows, oldest first.
func (c *Client) List(ctx context.Context) ([]api.Sandbox, error) {
	var l api.SandboxList
	if err := c.call(ctx, "GET", "/v1/sandboxes", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Sandboxes, nil
}

// Get describes one sandbox, with its usage now.
func (c *Client) Get(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, "GET", sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Delete destroys a sandbox: every process in it is killed and everything
// it held is freed.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sandboxPath(id), nil, nil, nil)
}
