package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/handoff"
)

// TestDurationOverflow: TTLs, idle timeouts and exec timeouts that do not
// fit a time.Duration are refused, naming the field, instead of wrapping
// around to a negative duration (a sandbox that expires at once, a command
// killed at once).
func TestDurationOverflow(t *testing.T) {
	ts := newTestServer(t, Config{})
	sb, err := ts.c.Create(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, body, field string }{
		{"/v1/sandboxes", `{"ttl_seconds": 9223372036854775807}`, "ttl_seconds"},
		{"/v1/sandboxes", `{"ttl_seconds": 9300000000}`, "ttl_seconds"},
		{"/v1/sandboxes", `{"idle_timeout_seconds": 9300000000}`, "idle_timeout_seconds"},
		{"/v1/sandboxes/" + sb.ID + "/exec", `{"argv": ["true"], "timeout_ms": 9300000000000}`, "timeout_ms"},
		{"/v1/sandboxes/" + sb.ID + "/exec", `{"argv": ["true"], "timeout_ms": 9223372036854775807}`, "timeout_ms"},
	}
	for _, c := range cases {
		resp, e := ts.raw(t, "POST", c.path, c.body)
		if resp.StatusCode != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, c.field) {
			t.Errorf("POST %s %s: got %d %s (%s), want 400 invalid_argument naming %s", c.path, c.body, resp.StatusCode, e.Code, e.Message, c.field)
		}
	}
	// The largest values that fit are fine.
	if _, err := ts.c.Create(context.Background(), &api.SandboxSpec{TTLSeconds: 9223372036, IdleTimeoutSeconds: 9223372036}); err != nil {
		t.Errorf("the longest TTL: %v", err)
	}
}

// TestRunValidation: POST /v1/run refuses, before the upgrade, what a
// create refuses, and what only a run can get wrong.
func TestRunValidation(t *testing.T) {
	ts := newTestServer(t, Config{})
	sock := filepath.Join(t.TempDir(), "tine.sock")
	ln, err := ListenUnix(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(ts.s.Handler(), unixTimeouts)
	go srv.Serve(ln)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	abs := t.TempDir()
	cases := []struct {
		name    string
		req     handoff.Request
		mention string
	}{
		{"no args", handoff.Request{}, "args"},
		{"empty command", handoff.Request{Args: []string{""}}, "args"},
		{"bad seccomp", handoff.Request{Args: []string{"true"}, Seccomp: "bogus"}, "seccomp"},
		{"negative disk", handoff.Request{Args: []string{"true"}, DiskBytes: -1}, "disk_bytes"},
		{"negative memory", handoff.Request{Args: []string{"true"}, Limits: api.Limits{MemoryBytes: -1}}, "limits"},
		{"negative pids", handoff.Request{Args: []string{"true"}, Limits: api.Limits{Pids: -5}}, "limits"},
		{"negative timeout", handoff.Request{Args: []string{"true"}, TimeoutMs: -1}, "timeout_ms"},
		{"overflowing timeout", handoff.Request{Args: []string{"true"}, TimeoutMs: 9300000000000}, "timeout_ms"},
		{"relative rootfs", handoff.Request{Args: []string{"true"}, RootFS: "some/dir"}, "rootfs"},
		{"relative bind", handoff.Request{Args: []string{"true"}, Binds: []api.Bind{{Source: "rel", Target: "/mnt"}}}, "absolute"},
		{"relative bind target", handoff.Request{Args: []string{"true"}, Binds: []api.Bind{{Source: abs, Target: "mnt"}}}, "absolute"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, _ := json.Marshal(c.req)
			req, _ := http.NewRequest("POST", "http://tine"+handoff.Path, strings.NewReader(string(body)))
			req.Header.Set("Upgrade", handoff.Protocol)
			req.Header.Set("Connection", "Upgrade")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e api.Error
			json.Unmarshal(b, &e)
			if resp.StatusCode != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, c.mention) {
				t.Fatalf("got %d %q, want 400 invalid_argument mentioning %s", resp.StatusCode, b, c.mention)
			}
		})
	}
}

// TestRelativeRootFS: a create with a relative rootfs is refused: it would
// be taken relative to the daemon's working directory.
func TestRelativeRootFS(t *testing.T) {
	ts := newTestServer(t, Config{})
	resp, e := ts.raw(t, "POST", "/v1/sandboxes", `{"rootfs": "."}`)
	if resp.StatusCode != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, "rootfs") {
		t.Fatalf("relative rootfs: got %d %s (%s), want 400 naming rootfs", resp.StatusCode, e.Code, e.Message)
	}
}
