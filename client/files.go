package client

import (
	"context"
	"io"
	"net/url"
	"strconv"

	"github.com/tine-run/tine/api"
)

// WriteOptions are how WriteFile makes a file; the zero value gives mode
// 0644 and owner 0:0.
type WriteOptions struct {
	Mode     uint32
	UID, GID int
}

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

// WriteFile creates or replaces the file at path inside the sandbox with
// what r holds, atomically.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, opt *WriteOptions) (*api.FileInfo, error) {
	q := pathQuery(path)
	if opt != nil {
		if opt.Mode != 0 {
			q.Set("mode", strconv.FormatUint(uint64(opt.Mode), 8))
		}
		if opt.UID != 0 {
			q.Set("uid", strconv.Itoa(opt.UID))
		}
		if opt.GID != 0 {
			q.Set("gid", strconv.Itoa(opt.GID))
		}
	}
	resp, err := c.do(ctx, request{method: "PUT", path: sandboxPath(id, "/files"), query: q, body: r, contentType: "application/octet-stream"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var info api.FileInfo
	return &info, decodeBody(resp.Body, &info)
}

// ReadFile opens the regular file at path inside the sandbox; the caller
// closes it.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "/files"), query: pathQuery(path)})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Stat describes the file at path, not following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (*api.FileInfo, error) {
	var info api.FileInfo
	if err := c.call(ctx, "GET", sandboxPath(id, "/files/stat"), pathQuery(path), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ReadDir lists the directory at path.
func (c *Client) ReadDir(ctx context.Context, id, path string) ([]api.FileInfo, error) {
	var l api.FileList
	if err := c.call(ctx, "GET", sandboxPath(id, "/files/list"), pathQuery(path), nil, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Remove removes the file, symlink or empty directory at path; with
// recursive, a directory and everything in it.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.call(ctx, "DELETE", sandboxPath(id, "/files"), q, nil, nil)
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, id string, req api.MkdirRequest) (*api.FileInfo, error) {
	var info api.FileInfo
	if err := c.call(ctx, "POST", sandboxPath(id, "/files/mkdir"), nil, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ReadArchive returns the file or directory tree at path as a tar stream;
// the caller closes it.
func (c *Client) ReadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "/files/archive"), query: pathQuery(path)})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteArchive extracts the tar stream r into the directory at path.
func (c *Client) WriteArchive(ctx context.Context, id, path string, r io.Reader) error {
	resp, err := c.do(ctx, request{method: "PUT", path: sandboxPath(id, "/files/archive"), query: pathQuery(path), body: r, contentType: "application/x-tar"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
