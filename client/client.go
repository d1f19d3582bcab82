// Package client is the Go SDK of tine's daemon (`tine serve`). It speaks
// the API of api/openapi.yaml over the daemon's unix socket, or over TCP
// with the daemon's bearer token: create, list, inspect and delete live
// sandboxes, exec commands into them (captured, or streamed over a
// WebSocket), and read and write their files.
//
// Every failure the daemon reports is an *Error carrying the API's error
// code (api.CodeNotFound, api.CodeCapacity, ...); ErrorCode extracts it.
//
// The CLI (`tine ps`, `tine exec`, ...) and the black-box tests use this
// package; see the examples for a tour.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
)

// DefaultSocket is where `tine serve` listens unless told otherwise.
const DefaultSocket = "/run/tine/tine.sock"

// Environment variables FromEnv reads.
const (
	// EnvSocket is the daemon's unix socket.
	EnvSocket = "TINE_SOCKET"
	// EnvHost is a TCP address (host:port or http://host:port); it wins
	// over EnvSocket.
	EnvHost = "TINE_HOST"
	// EnvToken is the bearer token for EnvHost; EnvTokenFile names a
	// file holding it.
	EnvToken     = "TINE_TOKEN"
	EnvTokenFile = "TINE_TOKEN_FILE"
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base  string // http://tine for a socket, http://host:port for TCP
	token string
	hc    *http.Client
}

// NewUnix returns a client of the daemon listening on socket.
func NewUnix(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 64,
	}
	return &Client{base: "http://tine", hc: &http.Client{Transport: tr}}
}

// NewTCP returns a client of the daemon's TCP listener at addr (host:port,
// or an http:// or https:// URL), sending token.
func NewTCP(addr, token string) *Client {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &Client{base: strings.TrimSuffix(base, "/"), token: token, hc: &http.Client{Transport: tr}}
}

// FromEnv returns a client as the environment says: TINE_HOST with
// TINE_TOKEN (or TINE_TOKEN_FILE), else TINE_SOCKET, else DefaultSocket.
func FromEnv() (*Client, error) {
	if host := os.Getenv(EnvHost); host != "" {
		tok := os.Getenv(EnvToken)
		if f := os.Getenv(EnvTokenFile); tok == "" && f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", EnvTokenFile, err)
			}
			tok = strings.TrimSpace(string(b))
		}
		return NewTCP(host, tok), nil
	}
	if sock := os.Getenv(EnvSocket); sock != "" {
		return NewUnix(sock), nil
	}
	return NewUnix(DefaultSocket), nil
}

// Error is a failure the daemon reported.
type Error struct {
	// Status is the HTTP status (0 on an exec stream).
	Status  int
	Code    api.ErrorCode
	Message string
	// RetryAfter is how long the daemon asks to wait (capacity errors).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("tine: %s (%s)", e.Message, e.Code) }

// ErrorCode returns the API error code of err, or "" when err is not an
// *Error from the daemon.
func ErrorCode(err error) api.ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// request is one HTTP call.
type request struct {
	method, path string
	query        url.Values
	body         io.Reader
	contentType  string
}

// do sends req and returns the response when its status is 2xx, else the
// daemon's *Error; the caller closes the body.
func (c *Client) do(ctx context.Context, req request) (*http.Response, error) {
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, req.body)
	if err != nil {
		return nil, err
	}
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("tine daemon: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, errorFrom(resp)
}

// errorFrom reads a non-2xx answer into an *Error.
func errorFrom(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var wire api.Error
	if json.Unmarshal(body, &wire) == nil && wire.Code != "" {
		e.Code, e.Message = wire.Code, wire.Message
	} else {
		e.Code = api.CodeInternal
		e.Message = fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// call sends a JSON body (when in is not nil) and decodes a JSON answer
// into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	req := request{method: method, path: path, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.body, req.contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return decodeBody(resp.Body, out)
}

func sandboxPath(id string, rest ...string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + strings.Join(rest, "")
}

// Health asks whether the daemon serves.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	return &h, c.call(ctx, "GET", "/v1/health", nil, nil, &h)
}

// Features returns the daemon host's feature checks (as `tine doctor`).
func (c *Client) Features(ctx context.Context) ([]api.Feature, error) {
	var f api.Features
	return f.Checks, c.call(ctx, "GET", "/v1/features", nil, nil, &f)
}

func decodeBody(r io.Reader, out any) error {
	if err := json.NewDecoder(r).Decode(out); err != nil {
		return fmt.Errorf("decode the daemon's answer: %w", err)
	}
	// Read to EOF (the encoder's newline is left): only a body read to
	// its end lets the transport reuse the connection.
	io.Copy(io.Discard, r)
	return nil
}
