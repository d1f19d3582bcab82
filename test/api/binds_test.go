package api_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// TestStdioDirectoryRefusedByDaemon: `tine run` hands its stdio to the
// daemon, which must refuse a directory there as an in-process run does,
// for a run from its pool and for a fresh sandbox: with `< dir` the
// command would read the host's files through /proc/self/fd/0/...
func TestStdioDirectoryRefusedByDaemon(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	mark := marker()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("host-secret-"+mark), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	// Control: a regular file is handed over and read.
	f, err := os.Open(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, extra := range [][]string{nil, {"--hostname", "fresh"}} {
		run := func(in *os.File) (string, string, int) {
			args := append(append([]string{"run", "--socket", d.sock, "--verbose"}, extra...), "--", "sh", "-c", "cat /proc/self/fd/0/secret 2>/dev/null || cat; echo ran")
			cmd := exec.Command(tineBin, args...)
			cmd.Stdin = in
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("tine run: %v", err)
			}
			return o.String(), e.String(), cmd.ProcessState.ExitCode()
		}
		f.Seek(0, 0)
		stdout, stderr, code := run(f)
		if code != 0 || !strings.Contains(stdout, "host-secret-"+mark) || !strings.Contains(stderr, "handed to the daemon") {
			t.Fatalf("%v control: a file as stdin was not handed to the daemon and read: exit %d, stdout %q, stderr %q", extra, code, stdout, stderr)
		}
		stdout, stderr, code = run(stdin)
		if strings.Contains(stdout, "host-secret") || strings.Contains(stdout, "ran") {
			t.Errorf("%v: the daemon ran the command with a directory as stdin, which read %q", extra, stdout)
		}
		if code != 2 || !strings.Contains(stderr, "stdin is a directory") {
			t.Errorf("%v: want exit 2 saying stdin is a directory, got exit %d, stderr %q", extra, code, stderr)
		}
	}
}

// TestAPIBindsResolvedLikeRun: the daemon's create path plans binds like
// `tine run`: a symlink source is refused with invalid_argument, and a
// target through the host's /var/run -> /run lands in the sandbox's /run,
// not on the host.
func TestAPIBindsResolvedLikeRun(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	src := t.TempDir()
	mark := marker()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("bound-"+mark), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	_, err := d.c.Create(ctx, &api.SandboxSpec{Binds: []api.Bind{{Source: link, Target: "/work"}}})
	if client.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "is a symlink") {
		t.Fatalf("create with a symlink bind source: want invalid_argument naming the symlink, got %v", err)
	}
	if real, err := filepath.EvalSymlinks("/var/run"); err != nil || real != "/run" {
		t.Skipf("needs the host's /var/run to be a symlink to /run: %q, %v", real, err)
	}
	hostRun := "/run/" + mark
	t.Cleanup(func() { os.RemoveAll(hostRun) })
	sb, err := d.c.Create(ctx, &api.SandboxSpec{Binds: []api.Bind{{Source: src, Target: "/var/run/" + mark, ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", "/run/" + mark + "/f"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "bound-"+mark {
		t.Errorf("the bind on /var/run/%s is not at the sandbox's /run/%s: exit %d, stdout %q, stderr %q", mark, mark, res.ExitCode, res.Stdout, res.Stderr)
	}
	if _, err := os.Lstat(hostRun); err == nil {
		t.Errorf("creating the sandbox made %s on the host", hostRun)
	}
}
