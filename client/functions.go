package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"

	"github.com/tine-run/tine/api"
)

// PutFunction registers (or replaces) a warm function and returns once it
// is warm. A spec the daemon refuses, or an entry that fails to import, is
// an *Error with code api.CodeInvalidArgument whose message says why.
func (c *Client) PutFunction(ctx context.Context, spec *api.FunctionSpec) (*api.Function, error) {
	var f api.Function
	if err := c.call(ctx, "PUT", functionPath(spec.Name), nil, spec, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Functions lists the registered functions.
func (c *Client) Functions(ctx context.Context) ([]api.Function, error) {
	var l []api.Function
	if err := c.call(ctx, "GET", "/v1/functions", nil, nil, &l); err != nil {
		return nil, err
	}
	return l, nil
}

// Function describes one function.
func (c *Client) Function(ctx context.Context, name string) (*api.Function, error) {
	var f api.Function
	if err := c.call(ctx, "GET", functionPath(name), nil, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// DeleteFunction unregisters a function and frees its sandbox.
func (c *Client) DeleteFunction(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", functionPath(name), nil, nil, nil)
}

// Invoke calls a function with a JSON payload (nil: null). The handler's
// exception, a timeout or an OOM is not an error here: it is the
// Invocation's Status and Error.
func (c *Client) Invoke(ctx context.Context, name string, payload json.RawMessage) (*api.Invocation, error) {
	return c.invoke(ctx, functionPath(name)+"/invoke", payload, "application/json")
}

// InvokeRaw calls a function with raw bytes; the handler gets bytes.
func (c *Client) InvokeRaw(ctx context.Context, name string, payload []byte) (*api.Invocation, error) {
	return c.invoke(ctx, functionPath(name)+"/invoke", payload, "application/octet-stream")
}

// PutScript registers a Python script for the runtime pool.
func (c *Client) PutScript(ctx context.Context, src []byte) (*api.Script, error) {
	resp, err := c.do(ctx, request{method: "PUT", path: "/v1/scripts", body: bytes.NewReader(src), contentType: "text/x-python"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s api.Script
	return &s, decodeBody(resp.Body, &s)
}

// InvokeScript calls a registered script's handler through the pool.
func (c *Client) InvokeScript(ctx context.Context, digest string, payload json.RawMessage) (*api.Invocation, error) {
	return c.invoke(ctx, "/v1/scripts/"+url.PathEscape(digest)+"/invoke", payload, "application/json")
}

func (c *Client) invoke(ctx context.Context, path string, payload []byte, contentType string) (*api.Invocation, error) {
	resp, err := c.do(ctx, request{method: "POST", path: path, body: bytes.NewReader(payload), contentType: contentType})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var inv api.Invocation
	return &inv, decodeBody(resp.Body, &inv)
}

func functionPath(name string) string { return "/v1/functions/" + url.PathEscape(name) }
