package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/require"
)

// execute posts a cell to the code interpreter's port and returns the
// status and the NDJSON lines.
func (d *daemon) execute(t *testing.T, id, token, code string) (int, []map[string]any) {
	t.Helper()
	h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json"}
	if token != "" {
		h["X-Access-Token"] = token
	}
	st, b := d.do(t, "POST", "/execute", map[string]any{"code": code}, h)
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	return st, lines
}

// TestInterpreterNeedsTheAccessToken: /execute runs code, so it needs the
// sandbox's token, as envd's routes do; the same cell with the token runs
// (the negative control), in a session tine's API lists.
func TestInterpreterNeedsTheAccessToken(t *testing.T) {
	d := startDaemon(t)
	c := d.create(t)
	other := d.create(t)
	for name, tok := range map[string]string{"no token": "", "a wrong token": "0123", "another sandbox's token": other.EnvdAccessToken} {
		if st, lines := d.execute(t, c.SandboxID, tok, "open('/tmp/ran', 'w')"); st != http.StatusUnauthorized {
			t.Errorf("execute with %s: %d %v, want 401", name, st, lines)
		}
	}
	if sess, err := d.c.Sessions(context.Background(), c.SandboxID); err != nil || len(sess) != 0 {
		t.Fatalf("a refused execute started a session: %v %v", sess, err)
	}
	st, lines := d.execute(t, c.SandboxID, c.EnvdAccessToken, "6 * 7")
	if st != http.StatusOK || len(lines) < 3 {
		t.Fatalf("execute with the token: %d %v", st, lines)
	}
	if lines[0]["type"] != "result" || lines[0]["text"] != "42" || lines[len(lines)-1]["type"] != "end_of_execution" {
		t.Errorf("lines %v: want the result 42 first and end_of_execution last", lines)
	}
	if sess, err := d.c.Sessions(context.Background(), c.SandboxID); err != nil || len(sess) != 1 || sess[0].ExecutionCount != 1 {
		t.Errorf("tine's sessions after one cell: %+v %v, want one that ran 1", sess, err)
	}
}

// TestPausedSandboxSurvivesRestart: a paused sandbox is its snapshot and
// its E2B identity, kept in the data directory, so a restarted daemon
// resumes it with its files, token and metadata; a running one does not
// survive (tine's sandboxes end with the daemon).
func TestPausedSandboxSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	d := startDaemonIn(t, dir)
	key := map[string]string{"X-API-KEY": d.key}
	st, b := d.do(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"kept": "yes"}}, key)
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, b)
	}
	var paused created
	json.Unmarshal(b, &paused)
	running := d.create(t)
	if res, err := d.c.Exec(context.Background(), paused.SandboxID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo before > /home/user/mark"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write the mark: %v %+v", err, res)
	}
	if st, b := d.do(t, "POST", "/sandboxes/"+paused.SandboxID+"/pause", nil, key); st != http.StatusNoContent {
		t.Fatalf("pause: %d %s", st, b)
	}
	d.stop()
	st0, err := os.Stat(filepath.Join(dir, "data", "e2b-paused.json"))
	if err != nil || st0.Mode().Perm() != 0o600 {
		t.Fatalf("the state file: %v %v, want mode 0600 (it holds access tokens)", st0, err)
	}

	d = startDaemonIn(t, dir)
	st, b = d.do(t, "GET", "/v2/sandboxes", nil, key)
	var list []struct {
		SandboxID, State string
		Metadata         map[string]string
	}
	json.Unmarshal(b, &list)
	if st != http.StatusOK || len(list) != 1 || list[0].SandboxID != paused.SandboxID || list[0].State != "paused" || list[0].Metadata["kept"] != "yes" {
		t.Fatalf("after the restart, list: %d %s; want only %s, paused, with its metadata (not %s, which was running)", st, b, paused.SandboxID, running.SandboxID)
	}
	if st, b := d.do(t, "POST", "/v2/sandboxes/"+paused.SandboxID+"/connect", map[string]any{"timeout": 60}, key); st != http.StatusCreated {
		t.Fatalf("connect (resume) after the restart: %d %s, want 201", st, b)
	}
	// envd answers with the token of before; the file came back.
	stat := `{"path":"/home/user/mark"}`
	if st, b := d.connectUnary(t, paused.SandboxID, paused.EnvdAccessToken, "filesystem.Filesystem/Stat", stat); st != http.StatusOK || !strings.Contains(string(b), `"size":"7"`) {
		t.Fatalf("stat of the mark after resume, with the old token: %d %s", st, b)
	}
	if st, b := d.do(t, "DELETE", "/sandboxes/"+paused.SandboxID, nil, key); st != http.StatusNoContent {
		t.Errorf("kill: %d %s", st, b)
	}
	snaps, _ := d.c.Snapshots(context.Background())
	for _, sn := range snaps {
		if strings.HasPrefix(sn.Name, "e2b-pause-"+paused.SandboxID) {
			t.Errorf("pause snapshot %s left after the kill", sn.ID)
		}
	}
}

// TestImageTemplate: a template id that is an image reference runs the
// sandbox on that OCI image (pulled from a registry on loopback here),
// with envd serving inside it: a file only the image has is what envd
// sees.
func TestImageTemplate(t *testing.T) {
	dir := t.TempDir()
	d := startDaemonIn(t, dir)
	// The images' layer store may be a loop mount the daemon leaves (its
	// persistent state); lazily unmounted before the directory goes.
	t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "state", "store"), unix.MNT_DETACH) })
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}},
		imagetest.BusyboxLayer(t),
		imagetest.HostLayer(t, "/bin/bash"),
		imagetest.Layer(t, imagetest.File{Name: "etc/", Dir: true, Mode: 0o755}, imagetest.File{Name: "etc/only-in-the-image", Body: "from the image\n", Mode: 0o644}))
	ref := reg.Push(t, "e2b/bash:1", img)
	if _, err := os.Stat("/etc/only-in-the-image"); err == nil {
		t.Fatal("negative control: the host must not have /etc/only-in-the-image")
	}
	key := map[string]string{"X-API-KEY": d.key}
	st, b := d.do(t, "POST", "/v2/sandboxes", map[string]any{"templateID": ref}, key)
	if st != http.StatusCreated {
		t.Fatalf("create from %s: %d %s", ref, st, b)
	}
	var c created
	json.Unmarshal(b, &c)
	sb, err := d.c.Get(context.Background(), c.SandboxID)
	manifest, _ := img.Digest()
	config, _ := img.ConfigName()
	if err != nil || (sb.Spec.Image != manifest.String() && sb.Spec.Image != config.String()) {
		t.Fatalf("tine sandbox %s: %+v %v, want it on the image %s (config %s)", c.SandboxID, sb, err, manifest, config)
	}
	stat := `{"path":"/etc/only-in-the-image"}`
	if st, b := d.connectUnary(t, c.SandboxID, c.EnvdAccessToken, "filesystem.Filesystem/Stat", stat); st != http.StatusOK || !strings.Contains(string(b), `"size":"15"`) {
		t.Fatalf("envd's stat of the image's file: %d %s", st, b)
	}
	st, b = d.do(t, "GET", "/sandboxes/"+c.SandboxID, nil, key)
	if st != http.StatusOK || !strings.Contains(string(b), `"templateID":"`+ref+`"`) {
		t.Errorf("getInfo: %d %s, want templateID %s", st, b, ref)
	}
}

// TestMemoryPause: pause with memory true is tine's memory tier (criu):
// a process started before the pause is running after the resume, with
// the memory it had. Code contexts, whose interpreters hold a socket to
// the daemon that criu cannot carry, end at the pause instead of failing
// it.
func TestMemoryPause(t *testing.T) {
	require.CRIU(t, "4.1")
	d := startDaemon(t)
	key := map[string]string{"X-API-KEY": d.key}
	c := d.create(t)
	// A process that keeps a value only in its memory, started through
	// tine's exec in the background of the sandbox.
	if res, err := d.c.Exec(context.Background(), c.SandboxID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c",
		`setsid sh -c 'v=$(cat /proc/sys/kernel/random/uuid); echo $v > /home/user/v; while :; do echo $v > /tmp/v; sleep 0.2; done' </dev/null >/dev/null 2>&1 & sleep 0.5; cat /home/user/v`}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the process: %v %+v", err, res)
	}
	// A code context too: its interpreter's control socket leads to the
	// daemon, which no snapshot can carry.
	if st, lines := d.execute(t, c.SandboxID, c.EnvdAccessToken, "kept = 1"); st != http.StatusOK {
		t.Fatalf("a cell before the pause: %d %v", st, lines)
	}
	st, b := d.do(t, "POST", "/sandboxes/"+c.SandboxID+"/pause", map[string]any{"memory": true}, key)
	if st != http.StatusNoContent {
		t.Fatalf("pause with memory: %d %s", st, b)
	}
	if st, b := d.do(t, "POST", "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": 60}, key); st != http.StatusCreated {
		t.Fatalf("resume: %d %s", st, b)
	}
	// The resumed sandbox is a new tine sandbox under the same E2B id:
	// the only one this daemon runs.
	boxes, err := d.c.List(context.Background())
	if err != nil || len(boxes) != 1 || boxes[0].ID == c.SandboxID {
		t.Fatalf("tine's sandboxes after the resume: %+v %v, want one new one", boxes, err)
	}
	res, err := d.c.Exec(context.Background(), boxes[0].ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", `rm -f /tmp/v; sleep 0.6; cat /tmp/v /home/user/v`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("after the resume: %v %+v", err, res)
	}
	lines := strings.Fields(string(res.Stdout))
	if len(lines) != 2 || lines[0] != lines[1] {
		t.Fatalf("after the resume the process wrote %q, want the value it held before the pause", res.Stdout)
	}
	// The code context ended at the pause; the resumed sandbox's default
	// context is a new session.
	if st, lines := d.execute(t, c.SandboxID, c.EnvdAccessToken, "kept"); st != http.StatusOK || len(lines) == 0 || lines[0]["name"] != "NameError" {
		t.Errorf("a cell after the resume: %d %v, want a NameError from a fresh context", st, lines)
	}
	// envd serves the resumed sandbox, with the token of before.
	if st, b := d.connectUnary(t, c.SandboxID, c.EnvdAccessToken, "filesystem.Filesystem/Stat", `{"path":"/home/user/v"}`); st != http.StatusOK {
		t.Fatalf("envd after the memory resume: %d %s", st, b)
	}
}

// TestInternetAccess: allow_internet_access and network.allowOut/denyOut
// become tine's networking: an egress sandbox (an eth0, the policy as tine
// reports it) or a loopback one (no eth0). tine's own network tests
// (test/api) check that the policy holds packet by packet.
func TestInternetAccess(t *testing.T) {
	require.Feature(t, "nftables")
	d := startDaemon(t, netArgs()...)
	key := map[string]string{"X-API-KEY": d.key}
	for _, c := range []struct {
		name         string
		body         map[string]any
		mode         string
		allow, deny  []string
		internetInfo bool
	}{
		{name: "internet", body: map[string]any{"allow_internet_access": true}, mode: "egress", internetInfo: true},
		{name: "no internet", body: map[string]any{"allow_internet_access": false}, mode: "loopback"},
		{name: "allowOut", body: map[string]any{"network": map[string]any{"allowOut": []string{"pypi.org", "1.1.1.1"}, "denyOut": []string{"0.0.0.0/0"}}}, mode: "egress", allow: []string{"pypi.org", "1.1.1.1"}, internetInfo: true},
		{name: "denyOut", body: map[string]any{"allow_internet_access": true, "network": map[string]any{"denyOut": []string{"8.8.8.8"}}}, mode: "egress", deny: []string{"8.8.8.8"}, internetInfo: true},
	} {
		body := map[string]any{"templateID": "base"}
		for k, v := range c.body {
			body[k] = v
		}
		st, b := d.do(t, "POST", "/v2/sandboxes", body, key)
		if st != http.StatusCreated {
			t.Fatalf("%s: create: %d %s", c.name, st, b)
		}
		var cr created
		json.Unmarshal(b, &cr)
		sb, err := d.c.Get(context.Background(), cr.SandboxID)
		if err != nil || sb.Spec.Network != c.mode || !slices.Equal(sb.Spec.Allow, c.allow) || !slices.Equal(sb.Spec.Deny, c.deny) {
			t.Fatalf("%s: tine sandbox %+v %v; want network %q allow %q deny %q", c.name, sb, err, c.mode, c.allow, c.deny)
		}
		res, err := d.c.Exec(context.Background(), cr.SandboxID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "ls /sys/class/net"}})
		if err != nil || strings.Contains(string(res.Stdout), "eth0") != (c.mode == "egress") {
			t.Errorf("%s: interfaces %q %v, want eth0 only in egress", c.name, res.Stdout, err)
		}
		_, b = d.do(t, "GET", "/sandboxes/"+cr.SandboxID, nil, key)
		if !strings.Contains(string(b), fmt.Sprintf(`"allowInternetAccess":%v`, c.internetInfo)) {
			t.Errorf("%s: getInfo %s, want allowInternetAccess %v", c.name, b, c.internetInfo)
		}
		d.do(t, "DELETE", "/sandboxes/"+cr.SandboxID, nil, key)
	}
	// updateNetwork: the live policy of an egress sandbox; a loopback one
	// cannot get an interface while it runs.
	for _, internet := range []bool{true, false} {
		st, b := d.do(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "allow_internet_access": internet}, key)
		if st != http.StatusCreated {
			t.Fatalf("create: %d %s", st, b)
		}
		var cr created
		json.Unmarshal(b, &cr)
		st, b = d.do(t, "PUT", "/sandboxes/"+cr.SandboxID+"/network", map[string]any{"allowOut": []string{"pypi.org"}}, key)
		sb, err := d.c.Get(context.Background(), cr.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if internet && (st != http.StatusNoContent || sb.Network == nil || !slices.Equal(sb.Network.Allow, []string{"pypi.org"})) {
			t.Errorf("updateNetwork of an egress sandbox: %d %s, tine's network now %+v; want 204 and allow [pypi.org]", st, b, sb.Network)
		}
		if !internet && (st != http.StatusBadRequest || !strings.Contains(string(b), "cannot give a running sandbox an interface")) {
			t.Errorf("updateNetwork of a loopback sandbox: %d %s, want 400 saying why", st, b)
		}
		d.do(t, "DELETE", "/sandboxes/"+cr.SandboxID, nil, key)
	}
	st, b := d.do(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{"egressProxy": map[string]any{"address": "p:1"}}}, key)
	if st != http.StatusBadRequest || !strings.Contains(string(b), "network.egressProxy is not supported") {
		t.Errorf("an unsupported network field: %d %s, want 400 naming it", st, b)
	}
}
