package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/zygote"
)

// The fuzz targets drive the daemon's real handler (httptest, no root)
// with a runtime and a function manager that check nothing themselves and
// refuse whatever reaches them with errAccepted: a request that gets that
// far passed the daemon's own validation, and the fuzz checks what it let
// through. Nothing is ever created or run.
var errAccepted = errors.New("fuzz: accepted by the daemon's validation")

// refusingRuntime records the specs that reach it and makes none.
type refusingRuntime struct {
	mu   sync.Mutex
	last *sandbox.Spec
}

func (r *refusingRuntime) Create(s *sandbox.Spec) (Instance, error) {
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
	return nil, errAccepted
}

func (r *refusingRuntime) Run(s *sandbox.Spec) (handoff.Runner, bool, error) {
	return nil, false, errAccepted
}

func (r *refusingRuntime) PoolReady() int { return 0 }
func (r *refusingRuntime) Close()         {}

// take returns the spec the last Create got, and forgets it.
func (r *refusingRuntime) take() *sandbox.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.last
	r.last = nil
	return s
}

// refusingFunctions validates a function spec as zygote.Manager does,
// then refuses it; it runs nothing.
type refusingFunctions struct{}

func (refusingFunctions) Up(spec api.FunctionSpec) (*api.Function, error) {
	if err := zygote.Validate(&spec); err != nil {
		return nil, err
	}
	return nil, errAccepted
}
func (refusingFunctions) Get(string) (*api.Function, error) { return nil, zygote.ErrNoFunction }
func (refusingFunctions) List() []api.Function              { return nil }
func (refusingFunctions) Remove(string) error               { return zygote.ErrNoFunction }
func (refusingFunctions) Invoke(context.Context, string, []byte, bool) (*api.Invocation, error) {
	return nil, errAccepted
}
func (refusingFunctions) PutScript([]byte) (*api.Script, error) { return nil, errAccepted }
func (refusingFunctions) InvokeScript(context.Context, string, []byte, bool) (*api.Invocation, error) {
	return nil, errAccepted
}
func (refusingFunctions) CountAgainst(zygote.AdmitFunc) {}
func (refusingFunctions) Close()                        {}

// fuzzMaxBody is the daemon's body limit in the fuzz: small, so that the
// 413 path is reachable.
const fuzzMaxBody = 64 << 10

// fuzzServer is a daemon over the refusing runtime, once per fuzz target.
func fuzzServer(f *testing.F) (*Server, *refusingRuntime) {
	rt := &refusingRuntime{}
	s, err := New(Config{
		Runtime: rt, Functions: refusingFunctions{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxMemoryBytes: 1 << 50, MaxBodyBytes: fuzzMaxBody, GuestBinary: "/bin/true",
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	return s, rt
}

// serve sends one request through s's handler and returns the answer's
// status and, for an error, its decoded body. An error answer that is no
// well-formed API error fails t.
func serve(t *testing.T, s *Server, r *http.Request) (int, *api.Error) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	if rec.Code < 400 {
		return rec.Code, nil
	}
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("%s %s: %d with a body that is no API error: %q", r.Method, r.URL, rec.Code, rec.Body.Bytes())
	}
	return rec.Code, &e
}

// accepted says whether an answer is errAccepted: the request passed
// validation. Any other 5xx fails t: bad input must be the client's error.
func accepted(t *testing.T, status int, e *api.Error, body []byte) bool {
	t.Helper()
	switch {
	case status >= 500 && strings.Contains(e.Message, errAccepted.Error()):
		return true
	case status >= 500:
		t.Fatalf("body %q: %d %s: %s; bad input must be the client's error (4xx)", body, status, e.Code, e.Message)
	case status == http.StatusBadRequest && e.Code != api.CodeInvalidArgument,
		status == http.StatusRequestEntityTooLarge && e.Code != api.CodeTooLarge:
		t.Fatalf("body %q: %d with code %s", body, status, e.Code)
	case status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge:
		t.Fatalf("body %q: %d %s: %s, want 400, 413 or the request accepted", body, status, e.Code, e.Message)
	}
	return false
}

// checkSpec fails t when a spec that passed validation is one the runtime
// cannot take as it is: relative paths, NUL bytes (which no system call
// takes), limits out of range, environment entries that are not KEY=VALUE.
func checkSpec(t *testing.T, body []byte, s *sandbox.Spec) {
	t.Helper()
	bad := func(what string, v any) { t.Fatalf("body %q: accepted %s %+q", body, what, v) }
	for _, p := range []struct{ what, v string }{{"workdir", s.Workdir}, {"rootfs", s.RootFS}} {
		if p.v != "" && !path.IsAbs(p.v) {
			bad(p.what, p.v)
		}
	}
	for _, b := range s.Binds {
		if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) {
			bad("bind", b)
		}
	}
	if s.DiskBytes <= 0 {
		bad("disk size", s.DiskBytes)
	}
	if l := s.Limits; l.MemoryBytes < 0 || l.Pids < 0 || !(l.CPUs >= 0 && l.CPUs <= cgroup.MaxCPUs) {
		bad("limits", l)
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			bad("env entry", e)
		}
	}
	all := append(append(append([]string{s.Workdir, s.RootFS, s.Hostname}, s.Env...), s.Args...), bindPaths(s.Binds)...)
	for _, v := range all {
		if strings.IndexByte(v, 0) >= 0 {
			bad("a string with a NUL byte", v)
		}
	}
}

func bindPaths(bs []sandbox.Bind) []string {
	var ps []string
	for _, b := range bs {
		ps = append(ps, b.Source, b.Target)
	}
	return ps
}

// sandboxSeeds are create bodies from docs/api.md and the tests, and a few
// wrong ones.
var sandboxSeeds = []string{
	`{}`,
	`{"limits": {"memory_bytes": 268435456, "cpus": 0.5, "pids": 64}, "ttl_seconds": 600, "idle_timeout_seconds": 60}`,
	`{"env": ["FOO=bar", "LANG=C.UTF-8"], "workdir": "/tmp", "hostname": "box", "network": "none", "seccomp": "strict"}`,
	`{"binds": [{"source": "/tmp", "target": "/mnt", "read_only": true}], "disk_bytes": 67108864, "rootfs": "/"}`,
	`{"ttl_seconds": 9223372036, "idle_timeout_seconds": 9223372036}`,
	`{"ttl_seconds": 9300000000}`, `{"rootfs": "."}`, `{"network": "host"}`, `{"seccomp": "bogus"}`,
	`{"binds": [{"source": "/tmp", "target": "/proc/x"}]}`, `{"env": ["NOEQUALS"]}`, `{"limits": {"cpus": -1}}`,
	`{"unknown": 1}`, `{"disk_bytes": "1g"}`, `{} {}`, `{"env": [`, ``, `[]`, `null`,
}

// FuzzCreateSandbox: POST /v1/sandboxes answers a bad body with 400 or
// 413 and a specific message, and passes on only specs the runtime can
// take.
func FuzzCreateSandbox(f *testing.F) {
	for _, s := range sandboxSeeds {
		f.Add([]byte(s))
	}
	s, rt := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, e := serve(t, s, httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body)))
		if status < 400 {
			t.Fatalf("body %q: %d without a sandbox made", body, status)
		}
		spec := rt.take()
		if !accepted(t, status, e, body) {
			return
		}
		if spec == nil {
			t.Fatalf("body %q: accepted, but no spec reached the runtime", body)
		}
		checkSpec(t, body, spec)
	})
}

// FuzzRunRequest: POST /v1/run (tine run's hand-off) checks its request
// before the upgrade as a create does, plus its command and timeout.
// The recorder cannot be taken over, so an accepted request ends at the
// hijack, after validation and admission.
func FuzzRunRequest(f *testing.F) {
	for _, s := range []string{
		`{"args": ["/bin/echo", "hi"]}`,
		`{"args": ["sh", "-c", "exit 3"], "env": ["A=1"], "workdir": "/tmp", "timeout_ms": 5000, "limits": {"memory_bytes": 268435456, "pids": 128}}`,
		`{"args": ["true"], "binds": [{"source": "/tmp", "target": "/data", "read_only": true}], "seccomp": "default", "disk_bytes": 268435456}`,
		`{"args": []}`, `{"args": [""]}`, `{"args": ["true"], "timeout_ms": -1}`, `{"args": ["true"], "timeout_ms": 9300000000000}`,
		`{"args": ["true"], "rootfs": "some/dir"}`, `{"args": ["true"], "network": "none"}`, `{}`,
		`{"args": ["true"], "rootfs": "/", "layers": ["/tmp"], "user": {"uid": 1000, "gid": 1000, "groups": [2000]}}`, `{"args": ["true"], "layers": ["tmp"]}`,
	} {
		f.Add([]byte(s))
	}
	s, _ := fuzzServer(f)
	local := &net.UnixAddr{Name: "/run/tine/fuzz.sock", Net: "unix"}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", handoff.Path, bytes.NewReader(body))
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
		r.Header.Set("Upgrade", handoff.Protocol)
		r.Header.Set("Connection", "Upgrade")
		status, e := serve(t, s, r)
		if status < 400 {
			t.Fatalf("body %q: %d from a connection that cannot be taken over", body, status)
		}
		if status >= 500 && strings.Contains(e.Message, "take over the connection") {
			// Accepted: check what the run would have been, as the handler parsed it.
			var req handoff.Request
			if err := decodeStrict(bytes.NewReader(body), &req); err != nil {
				t.Fatalf("body %q: accepted, but it does not decode: %v", body, err)
			}
			spec, err := specFromRun(&req)
			if err != nil {
				t.Fatalf("body %q: accepted, but specFromRun refuses it: %v", body, err)
			}
			if spec.Timeout < 0 || len(spec.Args) == 0 || spec.Args[0] == "" {
				t.Fatalf("body %q: accepted timeout %v, args %q", body, spec.Timeout, spec.Args)
			}
			checkSpec(t, body, spec)
			return
		}
		accepted(t, status, e, body)
	})
}

// FuzzExecRequest: an exec request (POST /v1/sandboxes/{id}/exec, and the
// first message of the exec stream) is refused with a specific
// invalid_argument, or is one a sandbox can run. The JSON mode goes
// through the handler to a sandbox that does not exist: an accepted
// request ends in 404.
func FuzzExecRequest(f *testing.F) {
	for _, s := range []string{
		`{"argv": ["/bin/sh", "-c", "echo hi"]}`,
		`{"argv": ["cat"], "stdin": "aGVsbG8=", "env": ["A=1"], "workdir": "/tmp", "timeout_ms": 1000, "max_output_bytes": 4096}`,
		`{"argv": ["bash"], "tty": true, "cols": 80, "rows": 24}`,
		`{"argv": []}`, `{"argv": [""]}`, `{"argv": ["true"], "timeout_ms": 9223372036854775807}`,
		`{"argv": ["true"], "max_output_bytes": -1}`, `{"argv": ["true"], "workdir": "tmp"}`, `{"argv": ["true"], "env": ["=x"]}`,
		`{"argv": ["true"], "cols": 70000}`, `{"argv": "true"}`, `{"argv": ["true"]}x`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	s, _ := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		var req api.ExecRequest
		var err error
		if stream {
			// The stream's first message, as readRequest and execStream check it.
			if err = decodeStrict(bytes.NewReader(body), &req); err == nil {
				err = s.checkExec(&req, true)
			}
			if err != nil {
				status, code := statusOf(err)
				if status != http.StatusBadRequest || code != api.CodeInvalidArgument || err.Error() == "" {
					t.Fatalf("message %q: %d %s (%v), want a specific invalid_argument", body, status, code, err)
				}
				return
			}
		} else {
			status, e := serve(t, s, httptest.NewRequest("POST", "/v1/sandboxes/nosuchbox/exec", bytes.NewReader(body)))
			if status != http.StatusNotFound {
				accepted(t, status, e, body)
				return
			}
			if err := decodeStrict(bytes.NewReader(body), &req); err != nil {
				t.Fatalf("body %q: passed validation, but does not decode: %v", body, err)
			}
		}
		if len(req.Argv) == 0 || req.Argv[0] == "" || req.TimeoutMs < 0 || req.MaxOutputBytes < 0 || req.MaxOutputBytes > MaxOutputCap ||
			(req.Workdir != "" && !path.IsAbs(req.Workdir)) {
			t.Fatalf("body %q: accepted %+v", body, req)
		}
		checkSpec(t, body, &sandbox.Spec{Args: req.Argv, Env: req.Env, Workdir: req.Workdir, DiskBytes: 1})
	})
}

// FuzzCreateDesktop: POST /v1/desktops refuses a bad screen or app list,
// and makes its sandbox's spec through the same checks as a create.
func FuzzCreateDesktop(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"width": 1024, "height": 768, "apps": [["xterm"], ["xclock", "-digital"]], "glx": true}`,
		`{"limits": {"memory_bytes": 2147483648, "cpus": 2}, "ttl_seconds": 3600, "idle_timeout_seconds": 300}`,
		`{"width": 10, "height": 10}`, `{"width": 9000, "height": 800}`, `{"apps": [[]]}`, `{"apps": [[""]]}`,
		`{"width": -1}`, `{"ttl_seconds": -5}`,
	} {
		f.Add([]byte(s))
	}
	s, rt := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, e := serve(t, s, httptest.NewRequest("POST", "/v1/desktops", bytes.NewReader(body)))
		if status < 400 {
			t.Fatalf("body %q: %d without a sandbox made", body, status)
		}
		spec := rt.take()
		if !accepted(t, status, e, body) {
			return
		}
		var req api.DesktopSpec
		if err := decodeStrict(bytes.NewReader(body), &req); err != nil {
			t.Fatalf("body %q: accepted, but it does not decode: %v", body, err)
		}
		if req.Width != 0 || req.Height != 0 {
			if req.Width < 64 || req.Height < 64 || req.Width > 8192 || req.Height > 8192 {
				t.Fatalf("body %q: accepted screen %dx%d", body, req.Width, req.Height)
			}
		}
		for _, app := range req.Apps {
			if len(app) == 0 || app[0] == "" {
				t.Fatalf("body %q: accepted app %q", body, app)
			}
		}
		checkSpec(t, body, spec)
	})
}

// FuzzPutFunction: PUT /v1/functions/{name} refuses a bad spec (or one
// whose name is not the path's) with invalid_argument, through the same
// zygote.Validate that `tine fn up` files go through.
func FuzzPutFunction(f *testing.F) {
	for _, s := range []struct{ name, body string }{
		{"resize", `{"runtime": "python", "entry": "/srv/fn/handler.py", "handler": "main", "preload": ["json"], "concurrency": 8, "limits": {"memory_bytes": 134217728, "cpus": 0.5, "timeout_seconds": 2.5}}`},
		{"hello", `{"name": "hello", "runtime": "node", "entry": "/srv/fn/index.mjs"}`},
		{"wc", `{"runtime": "exec", "command": ["/usr/bin/wc", "-c"], "cold_after_seconds": 90}`},
		{"a", `{"name": "b", "entry": "/a.py"}`}, {"A b", `{"entry": "/a.py"}`}, {"x", `{"entry": "rel.py"}`},
		{"x", `{"entry": "/a.py", "limits": {"cpus": 1e300}}`}, {"x", `{"runtime": "deno"}`}, {"x", `{"concurrency": 100000}`},
	} {
		f.Add(s.name, []byte(s.body))
	}
	s, _ := fuzzServer(f)
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		status, e := serve(t, s, httptest.NewRequest("PUT", "/v1/functions/"+url.PathEscape(name), bytes.NewReader(body)))
		if status < 300 {
			t.Fatalf("name %q body %q: %d without a function made", name, body, status)
		}
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed || status/100 == 3 {
			return // a name the route pattern does not take ("", with a '/'), or "." that the mux redirects
		}
		if !accepted(t, status, e, body) {
			return
		}
		var spec api.FunctionSpec
		if err := decodeStrict(bytes.NewReader(body), &spec); err != nil {
			t.Fatalf("body %q: accepted, but it does not decode: %v", body, err)
		}
		if spec.Name != "" && spec.Name != name {
			t.Fatalf("name %q: accepted a spec named %q", name, spec.Name)
		}
	})
}

// FuzzFileQuery: a file route's query (path, mode, uid, gid, recursive) is
// refused with invalid_argument, or parsed into values in range. Through
// the handler, to a sandbox that does not exist: an accepted query ends in
// 404.
func FuzzFileQuery(f *testing.F) {
	for _, q := range []string{
		"path=/tmp/a.txt", "path=/tmp/a.txt&mode=0600&uid=1000&gid=1000", "path=/tmp&recursive=true", "path=%2Fetc%2Fpasswd",
		"", "mode=0644", "path=/a&mode=9", "path=/a&mode=77777", "path=/a&uid=-1", "path=/a&colour=red", "path=/a;b", "path=%zz",
		"path=/a&uid=99999999999999999999",
	} {
		for route := range uint8(4) {
			f.Add(route, q)
		}
	}
	s, _ := fuzzServer(f)
	routes := []struct {
		method, path string
		allowed      []string
	}{
		{"GET", "/v1/sandboxes/nosuchbox/files", []string{"path"}},
		{"PUT", "/v1/sandboxes/nosuchbox/files", []string{"path", "mode", "uid", "gid"}},
		{"DELETE", "/v1/sandboxes/nosuchbox/files", []string{"path", "recursive"}},
		{"PUT", "/v1/sandboxes/nosuchbox/files/archive", []string{"path", "uid", "gid"}},
	}
	f.Fuzz(func(t *testing.T, route uint8, query string) {
		rt := routes[int(route)%len(routes)]
		r := httptest.NewRequest(rt.method, rt.path, strings.NewReader("x"))
		r.URL.RawQuery = query
		status, e := serve(t, s, r)
		q, err := parseFileQuery(r, 0o644, rt.allowed...)
		if status != http.StatusNotFound {
			if accepted(t, status, e, []byte(query)) {
				t.Fatalf("query %q: accepted by a file route: %s", query, e.Message)
			}
			if err == nil {
				t.Fatalf("query %q: refused (%s), but parseFileQuery takes it", query, e.Message)
			}
			return
		}
		if err != nil {
			t.Fatalf("query %q: passed the handler, but parseFileQuery refuses it: %v", query, err)
		}
		if q.path == "" || q.mode > 0o7777 || q.uid < 0 || q.gid < 0 {
			t.Fatalf("query %q: accepted %+v", query, q)
		}
	})
}

// FuzzAPIRequest: any request to any route, with no sandbox alive, is
// answered without a panic, and every error is a well-formed API error
// whose status is not the daemon's fault (500) unless the request was
// accepted.
func FuzzAPIRequest(f *testing.F) {
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}
	for _, c := range []struct {
		method uint8
		path   string
		ctype  string
		body   string
	}{
		{0, "/v1/health", "", ""}, {0, "/v1/sandboxes", "", ""}, {1, "/v1/sandboxes", "application/json", sandboxSeeds[1]},
		{3, "/v1/sandboxes/abc", "", ""}, {1, "/v1/sandboxes/abc/exec", "", `{"argv": ["true"]}`},
		{0, "/v1/sandboxes/abc/files/list?path=/", "", ""}, {1, "/v1/sandboxes/abc/files/mkdir", "", `{"path": "/a", "mode": 493, "parents": true}`},
		{1, "/v1/sandboxes/abc/files/mkdir", "", `{"path": "/a", "mode": 99999}`}, {2, "/v1/functions/f", "", `{"entry": "/a.py"}`},
		{1, "/v1/functions/f/invoke", "application/json", `{"x": 1}`}, {1, "/v1/functions/f/invoke", "application/octet-stream", "\x00\xff"},
		{1, "/v1/functions/f/invoke", "application/json", `{"x": `}, {2, "/v1/scripts", "", "def handler(p):\n    return p\n"},
		{1, "/v1/scripts/abc/invoke", "", `[1]`}, {1, "/v1/desktops", "", `{}`}, {0, "/v1/desktops/abc/aci", "", ""},
		{4, "/v1/sandboxes", "", ""}, {0, "/nope", "", ""}, {0, "/v1/sandboxes/%zz", "", ""},
	} {
		f.Add(c.method, c.path, c.ctype, []byte(c.body))
	}
	s, rt := fuzzServer(f)
	f.Fuzz(func(t *testing.T, method uint8, target, ctype string, body []byte) {
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "/v1/run") || u.Path == "/v1/features" {
			// Not a path net/http hands the mux ("*" it answers itself);
			// the run needs its hijack; features probes the host.
			return
		}
		r := &http.Request{Method: methods[int(method)%len(methods)], URL: u, RequestURI: target, Header: http.Header{}, Proto: "HTTP/1.1",
			ProtoMajor: 1, ProtoMinor: 1, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Host: "tine"}
		r = r.WithContext(context.Background())
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		status, e := serve(t, s, r)
		rt.take()
		if status >= 500 && status != http.StatusNotImplemented && !strings.Contains(e.Message, errAccepted.Error()) {
			t.Fatalf("%s %q body %q: %d %s: %s", r.Method, target, body, status, e.Code, e.Message)
		}
	})
}
