package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/tine-run/tine/api"
)

// PullImage pulls ref into the daemon's layer store, calling progress (may
// be nil) with each step, and returns the image. A failed pull is an
// *Error with the daemon's code.
func (c *Client) PullImage(ctx context.Context, ref string, progress func(api.ImagePullEvent)) (*api.Image, error) {
	b, err := json.Marshal(api.ImagePullRequest{Ref: ref})
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: "POST", path: "/v1/images/pull", body: bytes.NewReader(b), contentType: "application/json"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev api.ImagePullEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("decode the daemon's pull stream: %w", err)
		}
		switch ev.Status {
		case "done":
			return ev.Image, nil
		case "error":
			e := &Error{Status: resp.StatusCode, Code: api.CodeInternal, Message: "pull failed"}
			if ev.Error != nil {
				e.Code, e.Message = ev.Error.Code, ev.Error.Message
			}
			return nil, e
		}
		if progress != nil {
			progress(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the daemon's pull stream: %w", err)
	}
	return nil, fmt.Errorf("the daemon's pull stream ended without an outcome")
}

// Images lists the daemon's images, newest first.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var l api.ImageList
	if err := c.call(ctx, "GET", "/v1/images", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Images, nil
}

// RemoveImage removes reference ref (or the image, given its digest);
// removed says the image itself went. An image in use is a conflict
// (api.CodeConflict).
func (c *Client) RemoveImage(ctx context.Context, ref string) (removed bool, err error) {
	var out api.ImageRemoved
	err = c.call(ctx, "DELETE", "/v1/images/"+url.PathEscape(ref), nil, nil, &out)
	return out.Removed, err
}
