package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
)

// ForkEach is the RL/eval shape: it forks n replicas of snapshot sid in
// batches of at most batch (each batch all or none; a full budget is
// waited out as its Retry-After says, until ctx ends), calls fn on each
// replica with its index, concurrently within a batch, and deletes each
// replica when its fn returns. req, when not nil, sets each replica's
// limits, TTLs, env and hostname (its Count is ignored). The errors are
// per replica, in order (nil where fn succeeded); a batch whose fork
// failed gives its fork's error to every index of it.
func (c *Client) ForkEach(ctx context.Context, sid string, n, batch int, req *api.ForkRequest,
	fn func(ctx context.Context, replica api.Sandbox, i int) error) []error {
	if batch < 1 {
		batch = 1
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for start := 0; start < n; start += batch {
		k := min(batch, n-start)
		one := api.ForkRequest{}
		if req != nil {
			one = *req
		}
		one.Count = k
		res, err := c.forkRetrying(ctx, sid, &one)
		if err != nil {
			for i := start; i < start+k; i++ {
				errs[i] = err
			}
			continue
		}
		replicas := append(append([]api.Sandbox(nil), res.Sandboxes...), desktopsAsSandboxes(res.Desktops)...)
		for j, r := range replicas {
			wg.Go(func() {
				errs[start+j] = fn(ctx, r, start+j)
				// The replica goes even when ctx ended: it would hold budget.
				c.Delete(context.WithoutCancel(ctx), r.ID)
			})
		}
		wg.Wait()
	}
	return errs
}

// ForkEachDesktop is ForkEach for a desktop's snapshot: fn gets each
// replica with an ACI session open on it (closed when fn returns). With
// frames not nil every session shares it (ACI.ShareFrames), so a screen
// that another replica of the fleet already fetched costs its hash, not
// its image: replicas of one golden show the same screen until their
// paths part.
func (c *Client) ForkEachDesktop(ctx context.Context, sid string, n, batch int, req *api.ForkRequest, frames *FrameCache,
	fn func(ctx context.Context, replica api.Sandbox, a *ACI, i int) error) []error {
	return c.ForkEach(ctx, sid, n, batch, req, func(ctx context.Context, r api.Sandbox, i int) error {
		a, err := c.DialACI(ctx, r.ID)
		if err != nil {
			return err
		}
		defer a.Close()
		a.ShareFrames(frames)
		return fn(ctx, r, a, i)
	})
}

// forkRetrying forks, waiting out capacity errors until ctx ends.
func (c *Client) forkRetrying(ctx context.Context, sid string, req *api.ForkRequest) (*api.ForkResult, error) {
	for {
		res, err := c.Fork(ctx, sid, req)
		var e *Error
		if err == nil || !errors.As(err, &e) || e.Code != api.CodeCapacity {
			return res, err
		}
		wait := max(e.RetryAfter, 100*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

func desktopsAsSandboxes(ds []api.Desktop) []api.Sandbox {
	out := make([]api.Sandbox, len(ds))
	for i, d := range ds {
		out[i] = d.Sandbox
	}
	return out
}
