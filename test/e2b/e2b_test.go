// Package e2b_test drives a real daemon's E2B surface (tine serve --e2b)
// with the real, unmodified npm SDKs (e2b 2.51.0 and 2.50.0,
// @e2b/code-interpreter 2.8.0 and 2.7.0, @e2b/desktop 2.4.0,
// @modelcontextprotocol/sdk), installed from package-lock.json by make deps
// (npm ci) with the node they need, pointed at tine only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY; and checks the surface's walls with plain HTTP.
package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

var tineBin string

func TestMain(m *testing.M) { testbin.Main(m, &tineBin) }

// daemon is a tine serve --e2b started for one test.
type daemon struct {
	sock, addr, key, log string
	c                    *client.Client
	stop                 func() // SIGTERM, then wait for the exit
}

var listening = regexp.MustCompile(`msg=listening e2b=(\S+)`)

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startDaemonIn(t, t.TempDir(), args...)
}

// startDaemonIn starts a daemon whose data and state live in dir (a
// second daemon in the same dir is the first one restarted); it stops with
// the test or with d.stop.
func startDaemonIn(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	require.Root(t)
	d := &daemon{sock: filepath.Join(dir, "tine.sock"), log: filepath.Join(dir, "serve.log")}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"serve", "--socket", d.sock, "--data-dir", filepath.Join(dir, "data"),
		"--state-dir", filepath.Join(dir, "state"), "--pool", "0", "--e2b", "127.0.0.1:0"}, args...)
	cmd := exec.Command(tineBin, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("daemon log:\n%s", b)
		}
	})
	d.c = client.NewUnix(d.sock)
	for end := time.Now().Add(30 * time.Second); ; {
		b, _ := os.ReadFile(d.log)
		if m := listening.FindSubmatch(b); m != nil {
			if _, err := d.c.Health(context.Background()); err == nil {
				d.addr = string(m[1])
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("tine serve exited:\n%s", b)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("tine serve --e2b never listened:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(dir, "data", "e2b-key"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "data", "e2b-key"))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("e2b-key has mode %v, want 0600", st.Mode().Perm())
	}
	d.key = strings.TrimSpace(string(key))
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(d.key) {
		t.Errorf("generated key %q is not shaped e2b_<hex> (the Python SDK checks)", d.key)
	}
	return d
}

// nodeModules is test/e2b/node_modules, which make deps fills (npm ci),
// and the node there (pinned: e2b needs node >= 20.18.1, Debian 12 has
// 18); without them the SDK tests skip, or fail where CI promises node.
func nodeModules(t *testing.T) (dir, node string) {
	t.Helper()
	dir, _ = filepath.Abs("node_modules")
	node = filepath.Join(dir, ".bin", "node")
	_, errSDK := os.Stat(filepath.Join(dir, "e2b", "package.json"))
	_, errNode := os.Stat(node)
	if errSDK != nil || errNode != nil {
		msg := "needs the npm SDKs and node in test/e2b/node_modules: run make deps (npm ci --prefix test/e2b)"
		if strings.Contains(os.Getenv(require.StrictEnv), "bin:node") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir, node
}

// netArgs give a daemon a network name and pool of its own, so that its
// egress sandboxes (allow_internet_access, which e2b 2.50 always sends)
// work next to other daemons on the host.
func netArgs() []string {
	return []string{"--net-name", fmt.Sprintf("e%04x", rand.IntN(1<<16)), "--net-pool", fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256))}
}

// TestSDK runs each test program under node's test runner against one
// daemon.
func TestSDK(t *testing.T) {
	_, node := nodeModules(t)
	d := startDaemon(t, netArgs()...)
	desktops := "1" // the MCP program's desktop part needs these
	for _, bin := range []string{"Xvfb", "openbox", "xterm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Logf("no %s: the MCP desktop tools are not driven", bin)
			desktops = "0"
		}
	}
	// @e2b/desktop's programs (the desktop template's, internal/e2b) and
	// the terminal its test types into.
	desktop := "1"
	for _, bin := range []string{"Xvfb", "xdpyinfo", "startxfce4", "xfwm4", "xfdesktop", "dbus-launch", "xdotool", "scrot", "xrandr", "xterm"} {
		if _, err := exec.LookPath(bin); err != nil {
			if strings.Contains(os.Getenv(require.StrictEnv), "bin:startxfce4") {
				t.Fatalf("no %s, which CI promises (TINE_STRICT has bin:startxfce4): make deps installs it", bin)
			}
			t.Logf("no %s: @e2b/desktop is not driven", bin)
			desktop = "0"
		}
	}
	files, _ := filepath.Glob("*.test.mjs")
	if len(files) == 0 {
		t.Fatal("no test programs (*.test.mjs) next to this file")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(f, ".test.mjs"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", f)
			cmd.Env = append(os.Environ(),
				"E2B_API_URL=http://"+d.addr, "E2B_SANDBOX_URL=http://"+d.addr, "E2B_API_KEY="+d.key,
				"TINE_BIN="+tineBin, "TINE_SOCKET="+d.sock, "TINE_TEST_DESKTOPS="+desktops, "TINE_TEST_E2B_DESKTOP="+desktop)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node --test %s: %v\n%s", f, err, out)
			}
			t.Logf("%s", out)
		})
	}
	if left, err := d.c.List(context.Background()); err != nil || len(left) != 0 {
		t.Errorf("sandboxes left after the SDK tests: %v %v", left, err)
	}
}

// do sends one HTTP request to the E2B listener.
func (d *daemon) do(t *testing.T, method, path string, body any, header map[string]string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+d.addr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// errorCode is the body's code, which the SDKs read instead of the status.
func errorCode(t *testing.T, b []byte) int {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Message == "" {
		t.Fatalf("error body %q is not {code, message}", b)
	}
	return e.Code
}

type created struct {
	SandboxID, EnvdAccessToken string
}

func (d *daemon) create(t *testing.T) created {
	t.Helper()
	st, b := d.do(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, map[string]string{"X-API-KEY": d.key})
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, b)
	}
	var c created
	json.Unmarshal(b, &c)
	if _, err := d.c.Get(context.Background(), c.SandboxID); err != nil {
		t.Fatalf("created sandbox %s is not tine's: %v", c.SandboxID, err)
	}
	return c
}

// connectUnary is a unary Connect call as the SDKs make it.
func (d *daemon) connectUnary(t *testing.T, id, token, procedure, body string) (int, []byte) {
	h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json", "Connect-Protocol-Version": "1"}
	if token != "" {
		h["X-Access-Token"] = token
	}
	req, _ := http.NewRequest("POST", "http://"+d.addr+"/"+procedure, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAPIKeyAndAccessToken: the control plane needs the key, a sandbox's
// envd its access token; each refusal is checked against the same request
// with the right credential, which succeeds.
func TestAPIKeyAndAccessToken(t *testing.T) {
	d := startDaemon(t)
	for _, h := range []map[string]string{nil, {"X-API-KEY": "e2b_0000"}, {"Authorization": "Bearer wrong"}} {
		st, b := d.do(t, "GET", "/v2/sandboxes", nil, h)
		if st != http.StatusUnauthorized || errorCode(t, b) != 401 {
			t.Errorf("list with %v: %d %s, want 401", h, st, b)
		}
	}
	if st, b := d.do(t, "GET", "/v2/sandboxes", nil, map[string]string{"Authorization": "Bearer " + d.key}); st != http.StatusOK {
		t.Errorf("list with the key as a bearer token: %d %s", st, b)
	}
	c := d.create(t)
	stat := `{"path":"/etc/os-release"}`
	if st, b := d.connectUnary(t, c.SandboxID, c.EnvdAccessToken, "filesystem.Filesystem/Stat", stat); st != http.StatusOK {
		t.Fatalf("stat with the token: %d %s", st, b)
	}
	other := d.create(t)
	for name, tok := range map[string]string{"no token": "", "a wrong token": "0123", "another sandbox's token": other.EnvdAccessToken} {
		if st, b := d.connectUnary(t, c.SandboxID, tok, "filesystem.Filesystem/Stat", stat); st != http.StatusUnauthorized {
			t.Errorf("stat with %s: %d %s, want 401", name, st, b)
		}
	}
	// Sandbox traffic is routed before API paths: /health here is envd's.
	if st, _ := d.do(t, "GET", "/health", nil, map[string]string{"E2b-Sandbox-Id": c.SandboxID}); st != http.StatusNoContent {
		t.Errorf("envd /health through the header: %d, want envd's 204", st)
	}
	if st, b := d.do(t, "GET", "/health", nil, map[string]string{"E2b-Sandbox-Id": "nosuchsandbox"}); st != http.StatusBadGateway || errorCode(t, b) != 502 {
		t.Errorf("an unknown sandbox: %d %s, want 502 (the SDK's not running)", st, b)
	}
	// Host routing: {port}-{id}.{domain} reaches the same envd.
	req, _ := http.NewRequest("GET", "http://"+d.addr+"/health", nil)
	req.Host = "49983-" + c.SandboxID + ".tine.test"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("envd /health by Host: %v %v", resp, err)
	}
}

// TestEnvdSocketSymlinkStaysInside: a sandbox stops its envd and replaces
// the socket with a symlink to the daemon's own API socket (a host path,
// which exists);
// the daemon resolves the socket inside the sandbox's root, so the request
// fails instead of reaching the host's socket.
func TestEnvdSocketSymlinkStaysInside(t *testing.T) {
	d := startDaemon(t)
	c := d.create(t)
	health := func() int {
		st, _ := d.do(t, "GET", "/health", nil, map[string]string{"E2b-Sandbox-Id": c.SandboxID})
		return st
	}
	if st := health(); st != http.StatusNoContent {
		t.Fatalf("envd answers %d before the swap, want 204", st)
	}
	if _, err := os.Stat(d.sock); err != nil {
		t.Fatalf("negative control: the daemon's socket %s must exist on the host: %v", d.sock, err)
	}
	res, err := d.c.Exec(context.Background(), c.SandboxID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c",
		`for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline | grep -q '^/tine/bin/tine envd' && kill -9 ${p#/proc/}; done; ` +
			fmt.Sprintf("rm /run/tine-envd.sock && ln -s %s /run/tine-envd.sock && readlink /run/tine-envd.sock", d.sock)}})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != d.sock {
		t.Fatalf("the swap did not run: %v %+v", err, res)
	}
	// /v1/health is the daemon's own route: answered only if the request
	// reached the host's socket.
	st, b := d.do(t, "GET", "/v1/health", nil, map[string]string{"E2b-Sandbox-Id": c.SandboxID, "X-Access-Token": c.EnvdAccessToken})
	if st == http.StatusOK {
		t.Fatalf("the symlinked socket was followed out of the sandbox: %d %s", st, b)
	}
	if st != http.StatusBadGateway {
		t.Errorf("after the swap: %d %s, want 502", st, b)
	}
}
