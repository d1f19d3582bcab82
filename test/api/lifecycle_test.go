package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tine-run/tine/internal/testbin"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
)

func TestLifecycle(t *testing.T) {
	d := startDaemon(t, "--pool", "0") // so that every cgroup of the daemon is this test's sandbox's
	ctx := context.Background()
	sb, err := d.c.Create(ctx, &api.SandboxSpec{
		Hostname: "lifecycle", Env: []string{"GREETING=hello"},
		Limits: api.Limits{MemoryBytes: 128 << 20, Pids: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning || sb.Pid <= 0 {
		t.Fatalf("created sandbox: %+v", sb)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", sb.Pid)); err != nil {
		t.Fatalf("the sandbox's PID 1 (%d) is not on the host: %v", sb.Pid, err)
	}
	list, err := d.c.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list: %v %+v", err, list)
	}

	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo $GREETING from $(hostname) in $PWD"}, Workdir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "hello from lifecycle in /tmp\n" {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// A file written by one exec is there for the next: the sandbox lives.
	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /tmp/state"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write state: %v %+v", err, res)
	}
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", "/tmp/state"}})
	if err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("read state: %v %+v", err, res)
	}

	got, err := d.c.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage.Pids < 1 || got.Usage.MemoryBytes <= 0 || got.Spec.Limits.MemoryBytes != 128<<20 {
		t.Fatalf("inspect: usage %+v, spec %+v", got.Usage, got.Spec)
	}
	cgroups := testbin.CgroupsOf(d.pid())
	if len(cgroups) == 0 {
		t.Fatalf("no cgroup named after the daemon (pid %d) while a sandbox with limits lives", d.pid())
	}

	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Get(ctx, sb.ID); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("get after delete: got %v, want not_found", err)
	}
	if _, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("exec after delete: got %v, want not_found", err)
	}
	if !testbin.Eventually(patience, func() bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", sb.Pid)); return err != nil }) {
		t.Errorf("the sandbox's PID 1 (%d) outlived its delete", sb.Pid)
	}
	if left := testbin.CgroupsOf(d.pid()); len(left) > 0 {
		t.Errorf("cgroups remain after delete: %v", left)
	}
}

func TestExecStdin(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: more than a pipe holds
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sha256sum"}, Stdin: in, MaxOutputBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	want := hostSHA256(t, in)
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), want) {
		t.Fatalf("sha256sum of stdin: exit %d, stdout %q, want %s", res.ExitCode, res.Stdout, want)
	}
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "exit 7"}})
	if err != nil || res.ExitCode != 7 || res.Reason != "exit" {
		t.Fatalf("exit 7: %v %+v", err, res)
	}
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutMs: 200})
	if err != nil || res.ExitCode != 124 || res.Reason != "timeout" {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/no/such/program"}})
	if err != nil || res.ExitCode != 127 || res.Reason != "not-found" {
		t.Fatalf("missing program: %v %+v", err, res)
	}
}

func TestExecStream(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "while read line; do echo \"got $line\"; echo \"err $line\" >&2; done; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	errDone := make(chan struct{})
	go func() { io.Copy(&stderr, st.Stderr); close(errDone) }()
	out := &lineReader{r: st.Stdout}
	// Interactive: each answer arrives before the next line is sent.
	for i := range 3 {
		fmt.Fprintf(st.Stdin, "line%d\n", i)
		if got, want := out.line(t), fmt.Sprintf("got line%d", i); got != want {
			t.Fatalf("stdout line: got %q, want %q", got, want)
		}
	}
	st.Stdin.Close()
	rest, _ := io.ReadAll(st.Stdout)
	<-errDone
	exit, err := st.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 5 || len(rest) != 0 || stderr.String() != "err line0\nerr line1\nerr line2\n" {
		t.Fatalf("exit %d, trailing stdout %q, stderr %q", exit.ExitCode, rest, stderr.String())
	}
}

func TestExecStreamTTY(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.c.ExecStream(ctx, sb.ID, &api.ExecRequest{
		// The size is asked first thing: it must be set before the
		// command starts, not after.
		Argv: []string{"sh", "-c", "stty size; tty; read x; stty size"}, TTY: true, Cols: 100, Rows: 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &lineReader{r: st.Stdout}
	if got := out.line(t); got != "30 100" {
		t.Fatalf("initial size: %q, want 30 100", got)
	}
	if got := out.line(t); !strings.HasPrefix(got, "/dev/pts/") {
		t.Fatalf("tty: %q, want a /dev/pts name", got)
	}
	if err := st.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	io.WriteString(st.Stdin, "go\r")
	out.line(t) // the terminal echoes what was typed
	if got := out.line(t); got != "43 132" {
		t.Fatalf("size after resize: %q, want 43 132", got)
	}
	go io.Copy(io.Discard, st.Stdout)
	go io.Copy(io.Discard, st.Stderr)
	if exit, err := st.Wait(); err != nil || exit.ExitCode != 0 {
		t.Fatalf("tty exec: %v %+v", err, exit)
	}
}

// lineReader reads lines, without buffering past them for later readers.
type lineReader struct {
	r   io.Reader
	buf []byte
}

func (l *lineReader) line(t *testing.T) string {
	t.Helper()
	for {
		if i := bytes.IndexByte(l.buf, '\n'); i >= 0 {
			s := strings.TrimSuffix(string(l.buf[:i]), "\r")
			l.buf = l.buf[i+1:]
			return s
		}
		b := make([]byte, 4096)
		n, err := l.r.Read(b)
		l.buf = append(l.buf, b[:n]...)
		if err != nil {
			t.Fatalf("stream ended before a full line (%v); have %q", err, l.buf)
		}
	}
}

// TestDisconnectKills: a client that goes away mid-exec leaves no process.
func TestDisconnectKills(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("stream", func(t *testing.T) {
		mark := marker()
		st, err := d.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: sleeper(mark)})
		if err != nil {
			t.Fatal(err)
		}
		if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) >= 2 }) {
			t.Fatalf("the shell and its sleep never showed up on the host: %v", hostProcs(sleeperArg(mark)))
		}
		st.Close()
		if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) == 0 }) {
			t.Fatalf("processes of the abandoned exec remain:%s", describe(hostProcs(sleeperArg(mark))))
		}
	})
	t.Run("json", func(t *testing.T) {
		mark := marker()
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := d.c.Exec(cctx, sb.ID, &api.ExecRequest{Argv: sleeper(mark)})
			errc <- err
		}()
		if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) >= 2 }) {
			t.Fatalf("the shell and its sleep never showed up on the host")
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled exec: %v", err)
		}
		if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) == 0 }) {
			t.Fatalf("processes of the abandoned exec remain:%s", describe(hostProcs(sleeperArg(mark))))
		}
	})
	// The sandbox itself is unharmed.
	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the disconnects: %v %+v", err, res)
	}
}

// TestSlowReader: a stream nobody reads does not hold up other sandboxes.
func TestSlowReader(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	a, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Endless output that this test never reads.
	st, err := d.c.ExecStream(ctx, a.ID, &api.ExecRequest{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 20 {
		res, err := d.c.Exec(ctx, b.ID, &api.ExecRequest{Argv: []string{"echo", fmt.Sprint(i)}})
		if err != nil || string(res.Stdout) != fmt.Sprintf("%d\n", i) {
			t.Fatalf("exec %d in another sandbox beside a stalled stream: %v %+v", i, err, res)
		}
	}
	if _, err := d.c.List(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCapacity(t *testing.T) {
	d := startDaemon(t, "--max-sandboxes", "2", "--max-memory", "1g", "--default-memory", "256m")
	ctx := context.Background()
	if _, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 768 << 20}}); err != nil {
		t.Fatal(err)
	}
	// Without a limit it counts 256 MiB: exactly fits the 1 GiB.
	second, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 64 << 20}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 429 || ce.Code != api.CodeCapacity || ce.RetryAfter <= 0 {
		t.Fatalf("past the budget: got %v, want 429 capacity with Retry-After", err)
	}
	if err := d.c.Delete(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	// 768 + 256 MiB fits; 768 + 512 does not, and says it is memory.
	_, err = d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	if client.ErrorCode(err) != api.CodeCapacity || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("past the memory budget: got %v", err)
	}
	if _, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 256 << 20}}); err != nil {
		t.Fatalf("within the budget after a delete: %v", err)
	}
}

func TestTCPToken(t *testing.T) {
	addr := freePort(t)
	d := startDaemon(t, "--listen", addr)
	ctx := context.Background()
	tokenFile := filepath.Join(d.dir, "data", "token")
	st, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("no generated token: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(raw))

	for _, tok := range []string{"", "not-the-token"} {
		_, err := client.NewTCP(addr, tok).List(ctx)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 401 || ce.Code != api.CodeUnauthorized {
			t.Fatalf("TCP with token %q: got %v, want 401", tok, err)
		}
	}
	c := client.NewTCP(addr, token)
	sb, err := c.Create(ctx, nil)
	if err != nil {
		t.Fatalf("TCP with the token: %v", err)
	}
	res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "over tcp"}})
	if err != nil || string(res.Stdout) != "over tcp\n" {
		t.Fatalf("exec over TCP: %v %+v", err, res)
	}
	stream, err := c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "streamed"}})
	if err != nil {
		t.Fatalf("stream over TCP: %v", err)
	}
	b, _ := io.ReadAll(stream.Stdout)
	io.Copy(io.Discard, stream.Stderr)
	if _, err := stream.Wait(); err != nil || string(b) != "streamed\n" {
		t.Fatalf("stream over TCP: %v %q", err, b)
	}
	if _, err := client.NewTCP(addr, "").ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); client.ErrorCode(err) != api.CodeUnauthorized {
		t.Fatalf("stream over TCP without the token: got %v, want unauthorized", err)
	}
}

func TestExpiry(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	ttl, err := d.c.Create(ctx, &api.SandboxSpec{TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := d.c.Create(ctx, &api.SandboxSpec{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*api.Sandbox{ttl, idle} {
		if !testbin.Eventually(patience, func() bool { _, err := d.c.Get(ctx, sb.ID); return client.ErrorCode(err) == api.CodeNotFound }) {
			t.Fatalf("sandbox %s did not expire", sb.ID)
		}
		if !testbin.Eventually(patience, func() bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", sb.Pid)); return err != nil }) {
			t.Errorf("the PID 1 of expired sandbox %s remains", sb.ID)
		}
	}
	if _, err := d.c.Get(ctx, kept.ID); err != nil {
		t.Fatalf("a sandbox without TTL: %v", err)
	}
}

// TestConcurrentExecs: 100 execs over 20 sandboxes at once, each with its
// own output.
func TestConcurrentExecs(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	ids := make([]string, 20)
	var wg sync.WaitGroup
	var errs parallelErrors
	for i := range ids {
		wg.Go(func() {
			sb, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 64 << 20}})
			if err != nil {
				errs.add("create %d: %v", i, err)
				return
			}
			ids[i] = sb.ID
		})
	}
	wg.Wait()
	if len(errs.errs) > 0 {
		t.Fatal(strings.Join(errs.errs, "\n"))
	}
	for n := range 100 {
		wg.Go(func() {
			id := ids[n%len(ids)]
			word := fmt.Sprintf("exec-%d-%s", n, id)
			res, err := d.c.Exec(ctx, id, &api.ExecRequest{
				Argv:  []string{"sh", "-c", "read x; echo \"$1 $x\"; echo \"$1\" >&2", "sh", word},
				Stdin: []byte(fmt.Sprintf("in-%d\n", n)),
			})
			switch {
			case err != nil:
				errs.add("exec %d: %v", n, err)
			case res.ExitCode != 0 || string(res.Stdout) != fmt.Sprintf("%s in-%d\n", word, n) || string(res.Stderr) != word+"\n":
				errs.add("exec %d: exit %d, stdout %q, stderr %q", n, res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
	wg.Wait()
	if len(errs.errs) > 0 {
		t.Fatalf("%d of 100 execs failed:\n%s", len(errs.errs), strings.Join(errs.errs, "\n"))
	}
}

// TestDaemonKilled: kill -9 of the daemon mid-load, then a restart on the
// same socket; nothing of the old daemon's sandboxes (and functions)
// remains.
func TestDaemonKilled(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	mark := marker()
	var running sync.WaitGroup
	for range 3 {
		sb, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 64 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			running.Go(func() { d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: sleeper(mark)}) })
		}
	}
	// A warm function with a request in flight: its zygote, and the
	// request's process in a cgroup nested in the function's.
	putFunction(t, d, api.FunctionSpec{Name: "busy", Entry: writeHandler(t, "import subprocess\ndef handler(argv):\n    subprocess.run(argv)\n")})
	argv, _ := json.Marshal(sleeper(mark))
	running.Go(func() { d.c.Invoke(ctx, "busy", argv) })
	if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) >= 14 }) {
		t.Fatalf("the 7 shells and their sleeps never all showed up: %v", hostProcs(sleeperArg(mark)))
	}
	if len(testbin.CgroupsOf(d.pid())) == 0 {
		t.Fatalf("no cgroups named after the daemon (pid %d) under load", d.pid())
	}
	old := d.pid()
	d.kill()
	running.Wait() // the execs' connections broke

	d2 := startDaemonIn(t, d.dir)
	if _, err := d2.c.List(ctx); err != nil {
		t.Fatalf("the restarted daemon: %v", err)
	}
	if !testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(mark))) == 0 }) {
		t.Errorf("processes of the killed daemon's sandboxes remain:%s", describe(hostProcs(sleeperArg(mark))))
	}
	if m := testbin.StageMounts(); len(m) > 0 {
		t.Errorf("host mountinfo mentions %s:\n%s", stageDir, strings.Join(m, "\n"))
	}
	if dirs := testbin.CgroupsOf(old); len(dirs) > 0 {
		t.Errorf("cgroups of the killed daemon (pid %d) remain after the restart: %v", old, dirs)
	}
	list, err := d2.c.List(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("the restarted daemon lists %+v (%v); it reaps, it does not re-adopt", list, err)
	}
	// And it works.
	sb, err := d2.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d2.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("exec after the restart: %v %+v", err, res)
	}
}

// TestAbandonedCreateIsDestroyed: a client that goes away while its desktop
// boots never learns the desktop's id; the daemon must not keep it (it
// would hold budget under an id nobody has, until a TTL it may not have).
func TestAbandonedCreateIsDestroyed(t *testing.T) {
	require.Binary(t, "Xvfb")
	d := startDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
		errc <- err
	}()
	// The control: the create is under way in the daemon when the client
	// leaves (its sandbox is listed).
	if !testbin.Eventually(patience, func() bool { l, _ := d.c.List(context.Background()); return len(l) == 1 }) {
		t.Fatal("the desktop's sandbox never appeared: the test proves nothing")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the create answered before the client left; nothing was abandoned")
	}
	if !testbin.Eventually(patience, func() bool { l, _ := d.c.List(context.Background()); return len(l) == 0 }) {
		l, _ := d.c.List(context.Background())
		t.Fatalf("an abandoned create left %d sandboxes", len(l))
	}
}
