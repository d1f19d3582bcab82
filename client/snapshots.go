package client

import (
	"context"
	"net/url"

	"github.com/tine-run/tine/api"
)

// Snapshot captures a live sandbox or desktop (req may be nil: the fs
// tier). The sandbox runs on; it was frozen for the snapshot's PausedMs.
func (c *Client) Snapshot(ctx context.Context, id string, req *api.SnapshotRequest) (*api.Snapshot, error) {
	if req == nil {
		req = &api.SnapshotRequest{}
	}
	var sn api.Snapshot
	if err := c.call(ctx, "POST", sandboxPath(id)+"/snapshots", nil, req, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Snapshots lists every snapshot, oldest first.
func (c *Client) Snapshots(ctx context.Context) ([]api.Snapshot, error) {
	var l api.SnapshotList
	if err := c.call(ctx, "GET", "/v1/snapshots", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Snapshots, nil
}

// GetSnapshot describes one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, sid string) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := c.call(ctx, "GET", snapshotPath(sid), nil, nil, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot removes a snapshot; one with live forks is a conflict
// (api.CodeConflict).
func (c *Client) DeleteSnapshot(ctx context.Context, sid string) error {
	return c.call(ctx, "DELETE", snapshotPath(sid), nil, nil, nil)
}

// Fork makes req.Count replicas (default 1) of snapshot sid, all or none.
func (c *Client) Fork(ctx context.Context, sid string, req *api.ForkRequest) (*api.ForkResult, error) {
	return c.fork(ctx, snapshotPath(sid)+"/fork", req)
}

// ForkSandbox snapshots sandbox id (tier req.Tier) and forks the snapshot.
func (c *Client) ForkSandbox(ctx context.Context, id string, req *api.ForkRequest) (*api.ForkResult, error) {
	return c.fork(ctx, sandboxPath(id)+"/fork", req)
}

func (c *Client) fork(ctx context.Context, path string, req *api.ForkRequest) (*api.ForkResult, error) {
	if req == nil {
		req = &api.ForkRequest{}
	}
	var out api.ForkResult
	if err := c.call(ctx, "POST", path, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func snapshotPath(sid string) string { return "/v1/snapshots/" + url.PathEscape(sid) }
