package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// handedRun runs `tine run` against d, which takes it over.
func handedRun(t *testing.T, d *daemon, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(tineBin, append([]string{"run", "--socket", d.sock, "--verbose"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("tine run: %v", err)
	}
	if !strings.Contains(e.String(), "handed to the daemon") {
		t.Fatalf("tine run %v was not handed to the daemon: %s", args, e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// The daemon's sandboxes and handed runs get the os host view by default:
// a secret planted in /srv is unreadable by an exec, by the file API and
// by a handed run, and (negative control) readable with host_view full /
// --host-view full, which the hand-off carries. A bad host_view is a 400.
// PID 1's OOM score cannot be written from an exec either.
func TestHostViewThroughDaemon(t *testing.T) {
	b := make([]byte, 4)
	rand.Read(b)
	dir := "/srv/tinehv-api-" + hex.EncodeToString(b)
	token := "token-" + hex.EncodeToString(b)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	secret := dir + "/secret"
	if err := os.WriteFile(secret, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t)
	ctx := context.Background()
	cat := func(spec *api.SandboxSpec) (string, *api.ExecResult) {
		t.Helper()
		sb, err := d.c.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.c.Delete(ctx, sb.ID) })
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", secret}})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID, res
	}
	if _, res := cat(&api.SandboxSpec{HostView: "full"}); !strings.Contains(string(res.Stdout), token) {
		t.Fatalf("negative control: host_view full does not read %s: exit %d, %q", secret, res.ExitCode, res.Stderr)
	}
	id, res := cat(nil)
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), token) {
		t.Errorf("the default host view reads %s: exit %d, stdout %q", secret, res.ExitCode, res.Stdout)
	}
	if rc, err := d.c.ReadFile(ctx, id, secret); err == nil {
		rc.Close()
		t.Errorf("the file API reads %s in the default host view", secret)
	}
	oom, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", "echo 1000 > /proc/1/oom_score_adj && echo wrote; cat /proc/1/oom_score_adj"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(oom.Stdout), "wrote") || strings.Contains(string(oom.Stdout), "1000") {
		t.Errorf("an exec wrote PID 1's OOM score: %q %q", oom.Stdout, oom.Stderr)
	}

	if out, _, _ := handedRun(t, d, "--host-view", "full", "--", "cat", secret); !strings.Contains(out, token) {
		t.Errorf("negative control: a handed run with --host-view full does not read %s: %q", secret, out)
	}
	if out, _, code := handedRun(t, d, "--", "cat", secret); code == 0 || strings.Contains(out, token) {
		t.Errorf("a handed run reads %s in the default view: exit %d, %q", secret, code, out)
	}

	_, err = d.c.Create(ctx, &api.SandboxSpec{HostView: "everything"})
	if client.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "host_view") {
		t.Errorf("host_view everything: got %v, want a 400 naming host_view", err)
	}
}

// A sandbox created with userns runs as the namespace's root, cannot read
// a root-only host file that (negative control) a sandbox without it
// reads in the full view, and a handed --userns run is the same.
func TestUserNSThroughDaemon(t *testing.T) {
	b := make([]byte, 4)
	rand.Read(b)
	secret := "/etc/tinehv-api-" + hex.EncodeToString(b) + ".key"
	token := "token-" + hex.EncodeToString(b)
	if err := os.WriteFile(secret, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	d := startDaemon(t)
	ctx := context.Background()
	run := func(spec *api.SandboxSpec) *api.ExecResult {
		t.Helper()
		sb, err := d.c.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer d.c.Delete(ctx, sb.ID)
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "id -u; cat " + secret}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(&api.SandboxSpec{HostView: "full"}); !strings.Contains(string(res.Stdout), token) {
		t.Fatalf("negative control: without userns the full view does not read %s: %q", secret, res.Stderr)
	}
	res := run(&api.SandboxSpec{HostView: "full", UserNS: true})
	if !strings.HasPrefix(string(res.Stdout), "0\n") || strings.Contains(string(res.Stdout), token) || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Errorf("userns: want uid 0 and EACCES on %s, got exit %d, %q, %q", secret, res.ExitCode, res.Stdout, res.Stderr)
	}
	// A terminal exec joins the sandbox's namespaces (not forked by its
	// PID 1): it too is the namespace's root, refused the host's file, and
	// what it creates is owned by root inside.
	sb, err := d.c.Create(ctx, &api.SandboxSpec{HostView: "full", UserNS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.Delete(ctx, sb.ID)
	st, err := d.c.ExecStream(ctx, sb.ID, &api.ExecRequest{TTY: true,
		Argv: []string{"sh", "-c", "echo uid=$(id -u); touch /tmp/mine && stat -c owner=%u /tmp/mine; cat " + secret + " 2>&1 | tr -d '\\r'"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, st.Stderr)
	var tty bytes.Buffer
	io.Copy(&tty, st.Stdout)
	if _, err := st.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := tty.String(); !strings.Contains(got, "uid=0") || !strings.Contains(got, "owner=0") || !strings.Contains(got, "Permission denied") || strings.Contains(got, token) {
		t.Errorf("userns terminal exec: want uid 0, a file owned by 0 and EACCES on %s, got %q", secret, got)
	}
	if out, _, code := handedRun(t, d, "--userns", "--host-view", "full", "--", "cat", secret); code == 0 || strings.Contains(out, token) {
		t.Errorf("a handed --userns run reads %s: exit %d, %q", secret, code, out)
	}
}

// The daemon's default limits apply to sandboxes and handed runs that ask
// for none: with --default-memory 128m a 256 MiB allocation is OOM-killed
// (and survives in a sandbox that asks for 512m: the negative control),
// and with --default-pids 64 forking stops below 64.
func TestDaemonDefaultLimits(t *testing.T) {
	d := startDaemon(t, "--default-memory", "128m", "--default-pids", "64")
	ctx := context.Background()
	const hog = `chunks = [bytearray(1 << 20) for _ in range(256)]; print("survived")`
	exec := func(spec *api.SandboxSpec, argv ...string) *api.ExecResult {
		t.Helper()
		sb, err := d.c.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer d.c.Delete(ctx, sb.ID)
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: argv, TimeoutMs: 60000})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := exec(&api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}}, "python3", "-c", hog); !strings.Contains(string(res.Stdout), "survived") {
		t.Fatalf("negative control: 256 MiB in a 512m sandbox did not survive: exit %d %q", res.ExitCode, res.Stderr)
	}
	if res := exec(nil, "python3", "-c", hog); res.ExitCode != 137 || strings.Contains(string(res.Stdout), "survived") {
		t.Errorf("256 MiB under --default-memory 128m: exit %d, stdout %q, want 137", res.ExitCode, res.Stdout)
	}
	res := exec(nil, "python3", "-c", `
import os, time
n = 0
try:
    while n < 500:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped", n, flush=True)`)
	var n int
	if _, err := fmt.Sscanf(string(res.Stdout), "stopped %d", &n); err != nil || n >= 64 {
		t.Errorf("forking under --default-pids 64: %q (%v), want a stop below 64", res.Stdout, err)
	}
	if _, _, code := handedRun(t, d, "--", "python3", "-c", hog); code != 137 {
		t.Errorf("a handed run of 256 MiB under --default-memory 128m exited %d, want 137", code)
	}
}
