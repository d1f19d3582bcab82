package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// testServer is a daemon over the fake runtime, served on a loopback port.
type testServer struct {
	s    *Server
	rt   *fakeRuntime
	http *httptest.Server
	c    *client.Client
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	rt := &fakeRuntime{t: t}
	cfg.Runtime = rt
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.MaxMemoryBytes == 0 {
		cfg.MaxMemoryBytes = 8 << 30
	}
	if cfg.ExpiryInterval == 0 {
		cfg.ExpiryInterval = 20 * time.Millisecond
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &testServer{s: s, rt: rt, http: hs, c: client.NewTCP(hs.URL, "")}
}

// raw sends a request and returns the status and the decoded error body
// (zero when the answer is not an error).
func (ts *testServer) raw(t *testing.T, method, path, body string) (*http.Response, api.Error) {
	t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s %s: %d with a body that is no API error: %q", method, path, resp.StatusCode, b)
		}
	}
	return resp, e
}

func TestBadInput(t *testing.T) {
	ts := newTestServer(t, Config{MaxBodyBytes: 1024})
	sb, err := ts.c.Create(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     api.ErrorCode
		mention                  string
	}{
		{"unknown field", "POST", "/v1/sandboxes", `{"memory": 5}`, 400, api.CodeInvalidArgument, `"memory"`},
		{"unknown nested field", "POST", "/v1/sandboxes", `{"limits": {"mem": 5}}`, 400, api.CodeInvalidArgument, `"mem"`},
		{"malformed", "POST", "/v1/sandboxes", `{"ttl_seconds": `, 400, api.CodeInvalidArgument, "ends inside"},
		{"wrong type", "POST", "/v1/sandboxes", `{"ttl_seconds": "soon"}`, 400, api.CodeInvalidArgument, "ttl_seconds"},
		{"trailing data", "POST", "/v1/sandboxes", `{} {}`, 400, api.CodeInvalidArgument, "after the JSON value"},
		{"empty body", "POST", "/v1/sandboxes", ``, 400, api.CodeInvalidArgument, "empty"},
		{"bad network", "POST", "/v1/sandboxes", `{"network": "host"}`, 400, api.CodeInvalidArgument, "network"},
		{"too large", "POST", "/v1/sandboxes", `{"env": ["` + strings.Repeat("x", 2048) + `"]}`, 413, api.CodeTooLarge, "1024"},
		{"unknown sandbox", "GET", "/v1/sandboxes/nope", ``, 404, api.CodeNotFound, "nope"},
		{"unknown sandbox delete", "DELETE", "/v1/sandboxes/nope", ``, 404, api.CodeNotFound, "nope"},
		{"unknown sandbox exec", "POST", "/v1/sandboxes/nope/exec", `{"argv": ["true"]}`, 404, api.CodeNotFound, "nope"},
		{"unknown sandbox file", "GET", "/v1/sandboxes/nope/files?path=/a", ``, 404, api.CodeNotFound, "nope"},
		{"unknown route", "GET", "/v2/things", ``, 404, api.CodeNotFound, "/v2/things"},
		{"wrong method", "PATCH", "/v1/sandboxes", ``, 405, api.CodeMethodNotAllowed, "GET, HEAD, POST"},
		{"wrong method on a pattern", "PUT", "/v1/sandboxes/" + sb.ID + "/exec", `{}`, 405, api.CodeMethodNotAllowed, "takes POST"},
		{"empty argv", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"argv": []}`, 400, api.CodeInvalidArgument, "argv"},
		{"exec unknown field", "POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"args": ["true"]}`, 400, api.CodeInvalidArgument, `"args"`},
		{"file without path", "GET", "/v1/sandboxes/" + sb.ID + "/files", ``, 400, api.CodeInvalidArgument, "path"},
		{"file unknown parameter", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/a&x=1", ``, 400, api.CodeInvalidArgument, `"x"`},
		{"file escape", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=../../etc/passwd", ``, 400, api.CodeInvalidArgument, "climbs"},
		{"missing file", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/nope", ``, 404, api.CodeNotFound, "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, e := ts.raw(t, c.method, c.path, c.body)
			if resp.StatusCode != c.status || e.Code != c.code {
				t.Fatalf("got %d %s (%s), want %d %s", resp.StatusCode, e.Code, e.Message, c.status, c.code)
			}
			if !strings.Contains(e.Message, c.mention) {
				t.Errorf("message %q does not mention %s", e.Message, c.mention)
			}
			if allow := resp.Header.Get("Allow"); (c.status == 405) != (allow != "") || !strings.Contains(e.Message, allow) {
				t.Errorf("Allow %q with status %d and message %q", allow, resp.StatusCode, e.Message)
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	ts := newTestServer(t, Config{MaxSandboxes: 3, MaxMemoryBytes: 1 << 30, DefaultMemoryBytes: 256 << 20})
	ctx := context.Background()
	a, err := ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	// No limit: counts the default 256 MiB; 768 MiB of 1 GiB used.
	if _, err := ts.c.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// 768 + 512 MiB > 1 GiB.
	_, err = ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 429 || ce.Code != api.CodeCapacity || ce.RetryAfter <= 0 {
		t.Fatalf("over the memory budget: got %v, want a 429 capacity error with Retry-After", err)
	}
	if !strings.Contains(ce.Message, "memory") {
		t.Errorf("capacity message %q does not say memory is the limit", ce.Message)
	}
	// More than the whole budget can never fit: a 400, not a retry.
	_, err = ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 2 << 30}})
	if client.ErrorCode(err) != api.CodeInvalidArgument {
		t.Fatalf("larger than the budget: got %v, want invalid_argument", err)
	}
	// 1 GiB exactly fits after 256 MiB more.
	if _, err := ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 256 << 20}}); err != nil {
		t.Fatal(err)
	}
	_, err = ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 1}})
	if client.ErrorCode(err) != api.CodeCapacity || !strings.Contains(err.Error(), "3 of 3 sandboxes") {
		t.Fatalf("over the sandbox count: got %v, want capacity naming the count", err)
	}
	if err := ts.c.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}}); err != nil {
		t.Fatalf("after a delete freed 512 MiB: %v", err)
	}
}

func TestToken(t *testing.T) {
	ts := newTestServer(t, Config{})
	hs := httptest.NewServer(ts.s.TokenHandler("s3cret"))
	defer hs.Close()
	ctx := context.Background()
	for _, tok := range []string{"", "wrong"} {
		_, err := client.NewTCP(hs.URL, tok).List(ctx)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 401 || ce.Code != api.CodeUnauthorized {
			t.Fatalf("token %q: got %v, want 401 unauthorized", tok, err)
		}
	}
	if _, err := client.NewTCP(hs.URL, "s3cret").List(ctx); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

func TestExecJSON(t *testing.T) {
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ts.c.Exec(ctx, sb.ID, &api.ExecRequest{
		Argv:  []string{"sh", "-c", "cat; echo oops >&2; exit 3"},
		Stdin: []byte("from stdin\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Reason != "exit" || string(res.Stdout) != "from stdin\n" || string(res.Stderr) != "oops\n" {
		t.Fatalf("got exit %d %s, stdout %q, stderr %q", res.ExitCode, res.Reason, res.Stdout, res.Stderr)
	}
	res, err = ts.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"head", "-c", "100000", "/dev/zero"}, MaxOutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.StdoutTruncated || res.StderrTruncated {
		t.Fatalf("capped output: got %d bytes, truncated %v/%v", len(res.Stdout), res.StdoutTruncated, res.StderrTruncated)
	}
	res, err = ts.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"no-such-command-here"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 127 || res.Reason != "not-found" || !strings.Contains(string(res.Stderr), "not found") {
		t.Fatalf("missing command: got exit %d %s, stderr %q", res.ExitCode, res.Reason, res.Stderr)
	}
}

func TestExecStream(t *testing.T) {
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "tr a-z A-Z; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	copied := make(chan struct{}, 2)
	go func() { io.Copy(&out, st.Stdout); copied <- struct{}{} }()
	go func() { io.Copy(&errOut, st.Stderr); copied <- struct{}{} }()
	io.WriteString(st.Stdin, "hello ")
	io.WriteString(st.Stdin, "stream\n")
	st.Stdin.Close()
	<-copied
	<-copied
	exit, err := st.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || out.String() != "HELLO STREAM\n" || errOut.String() != "done\n" {
		t.Fatalf("got exit %d, stdout %q, stderr %q", exit.ExitCode, out.String(), errOut.String())
	}

	// A bad request is refused on the stream with the API's error.
	st, err = ts.c.ExecStream(ctx, sb.ID, &api.ExecRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, st.Stdout)
	go io.Copy(io.Discard, st.Stderr)
	if _, err := st.Wait(); client.ErrorCode(err) != api.CodeInvalidArgument {
		t.Fatalf("empty argv on the stream: got %v, want invalid_argument", err)
	}
	_, err = ts.c.ExecStream(ctx, "nope", &api.ExecRequest{Argv: []string{"true"}})
	if client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("stream to an unknown sandbox: got %v, want not_found", err)
	}
}

func TestExpiry(t *testing.T) {
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	ttl, err := ts.c.Create(ctx, &api.SandboxSpec{TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ttl.ExpiresAt == nil {
		t.Fatal("a sandbox with a TTL has no expires_at")
	}
	idle, err := ts.c.Create(ctx, &api.SandboxSpec{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	forever, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An exec running longer than the idle timeout keeps its sandbox.
	busy, err := ts.c.Create(ctx, &api.SandboxSpec{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ts.c.Exec(ctx, busy.ID, &api.ExecRequest{Argv: []string{"sleep", "1.5"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec outliving the idle timeout: %v %+v", err, res)
	}
	for _, id := range []string{ttl.ID, idle.ID} {
		waitGone(t, ts.c, id)
	}
	if _, err := ts.c.Get(ctx, forever.ID); err != nil {
		t.Fatalf("a sandbox without TTL or idle timeout: %v", err)
	}
	for _, inst := range ts.rt.created[:2] {
		if !inst.destroyed() {
			t.Error("an expired sandbox was not destroyed")
		}
	}
}

// waitGone polls until the sandbox is gone (404), failing after a minute.
func waitGone(t *testing.T, c *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Get(context.Background(), id)
		if client.ErrorCode(err) == api.CodeNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFiles(t *testing.T) {
	ts := newTestServer(t, Config{MaxFileBytes: 1 << 20})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/a/b", Parents: true}); err != nil {
		t.Fatal(err)
	}
	info, err := ts.c.WriteFile(ctx, sb.ID, "/a/b/f.txt", strings.NewReader("content"), &client.WriteOptions{Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 7 || info.Mode != 0o600 || info.Type != api.FileTypeFile {
		t.Fatalf("written file: %+v", info)
	}
	rc, err := ts.c.ReadFile(ctx, sb.ID, "/a/b/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "content" {
		t.Fatalf("read back %q", b)
	}
	entries, err := ts.c.ReadDir(ctx, sb.ID, "/a/b")
	if err != nil || len(entries) != 1 || entries[0].Name != "f.txt" {
		t.Fatalf("list: %v %+v", err, entries)
	}
	_, err = ts.c.WriteFile(ctx, sb.ID, "/big", bytes.NewReader(make([]byte, 2<<20)), nil)
	if client.ErrorCode(err) != api.CodeTooLarge {
		t.Fatalf("file over the limit: got %v, want too_large", err)
	}
	if err := ts.c.Remove(ctx, sb.ID, "/a", false); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("remove a non-empty directory: got %v, want conflict", err)
	}
	if err := ts.c.Remove(ctx, sb.ID, "/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Stat(ctx, sb.ID, "/a"); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("stat after remove: got %v, want not_found", err)
	}
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	if _, err := ts.c.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ts.raw(t, "GET", "/v1/sandboxes/nope", "")
	resp, err := http.Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tine_sandboxes{state="running"} 1`,
		`tine_failures_total{reason="not_found"} 1`,
		`tine_http_request_duration_seconds_count{code="201",route="POST /v1/sandboxes"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestStatusOf(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("x: %w", ErrInvalidArgument), 400},
		{&http.MaxBytesError{Limit: 1}, 413},
		{&capacityError{msg: "full"}, 429},
		{fmt.Errorf("x: %w", ErrNoSandbox), 404},
		{fmt.Errorf("x: %w", ErrNotRunning), 409},
		{&methodError{msg: "no"}, 405},
		{errors.New("something else"), 500},
	}
	for _, c := range cases {
		if got, _ := statusOf(c.err); got != c.status {
			t.Errorf("statusOf(%v) = %d, want %d", c.err, got, c.status)
		}
	}
}

func TestRoutesInOpenAPI(t *testing.T) {
	spec, err := parseOpenAPIPaths(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var s Server
	var routes []string
	for _, rt := range s.routes() {
		routes = append(routes, rt.method+" "+rt.path)
	}
	slices.Sort(routes)
	slices.Sort(spec)
	for _, r := range routes {
		if !slices.Contains(spec, r) {
			t.Errorf("route %s is not in api/openapi.yaml", r)
		}
	}
	for _, r := range spec {
		if !slices.Contains(routes, r) {
			t.Errorf("api/openapi.yaml has %s, which the server does not route", r)
		}
	}
}

// TestDiedOnItsOwn: a sandbox whose PID 1 dies is listed as exited, frees
// its share of the budget, and refuses execs until it is deleted.
func TestDiedOnItsOwn(t *testing.T) {
	ts := newTestServer(t, Config{MaxSandboxes: 1})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.rt.created[0].Destroy() // killed from outside
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := ts.c.Get(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.StateExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s, want exited", got.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := ts.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("exec into an exited sandbox: got %v, want conflict", err)
	}
	if _, err := ts.c.Create(ctx, nil); err != nil {
		t.Fatalf("the exited sandbox still holds the budget: %v", err)
	}
	if err := ts.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
