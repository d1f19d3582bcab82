package api_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

// detacher is a shell script that starts two processes which leave the
// command's session (setsid in the background, and a double fork that
// also leaves its parent), each writing its pid to a file under /tmp
// first, then, with stay, sleeps on in the foreground. Every process
// carries arg in its argv.
func detacher(arg string, stay bool) []string {
	script := fmt.Sprintf(`setsid sh -c 'echo $$ > /tmp/setsid.pid; exec sleep %[1]s' & `+
		`(setsid sh -c 'echo $$ > /tmp/orphan.pid; exec sleep %[1]s' &) ; `+
		`while [ ! -s /tmp/setsid.pid ] || [ ! -s /tmp/orphan.pid ]; do sleep 0.01; done; echo started`, arg)
	if stay {
		script += "; sleep " + arg
	}
	return []string{"/bin/sh", "-c", script}
}

// sandboxProcs lists, by another exec, the processes in the sandbox whose
// argv holds arg.
func sandboxProcs(t *testing.T, d *daemon, id, arg string) []string {
	t.Helper()
	res, err := d.c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c",
		`for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] || { tr '\0' ' ' < $p/cmdline; echo; } 2>/dev/null; done`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("list the sandbox's processes: %v %+v", err, res)
	}
	var found []string
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if strings.Contains(line, arg) {
			found = append(found, line)
		}
	}
	return found
}

// startedDetached is the negative control: both detached processes ran
// (they wrote their pid files).
func startedDetached(t *testing.T, d *daemon, id string) {
	t.Helper()
	res, err := d.c.Exec(context.Background(), id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat /tmp/setsid.pid /tmp/orphan.pid && rm /tmp/setsid.pid /tmp/orphan.pid"}})
	if err != nil || res.ExitCode != 0 || len(strings.Fields(string(res.Stdout))) != 2 {
		t.Fatalf("the detached processes never started (no pid files): %v %+v", err, res)
	}
}

// TestExecTimeoutKillsTree: a timeout kills everything the command started,
// also what left its process group and session, in each exec mode; the
// answer comes at the timeout.
func TestExecTimeoutKillsTree(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		name string
		run  func(req *api.ExecRequest) (*api.ExecExit, string, error)
	}{
		{"json", func(req *api.ExecRequest) (*api.ExecExit, string, error) {
			res, err := d.c.Exec(ctx, sb.ID, req)
			if err != nil {
				return nil, "", err
			}
			return &res.ExecExit, string(res.Stdout), nil
		}},
		{"stream", func(req *api.ExecRequest) (*api.ExecExit, string, error) { return stream(ctx, d, sb.ID, req) }},
		{"tty", func(req *api.ExecRequest) (*api.ExecExit, string, error) {
			req.TTY = true
			return stream(ctx, d, sb.ID, req)
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			arg := sleeperArg(marker())
			exit, out, err := m.run(&api.ExecRequest{Argv: detacher(arg, true), TimeoutMs: 2000})
			if err != nil || exit.ExitCode != 124 || exit.Reason != "timeout" {
				t.Fatalf("exec past its timeout: %v %+v (stdout %q)", err, exit, out)
			}
			startedDetached(t, d, sb.ID)
			if left := sandboxProcs(t, d, sb.ID, arg); len(left) > 0 {
				t.Fatalf("processes of the timed-out command remain in the sandbox:\n  %s", strings.Join(left, "\n  "))
			}
		})
	}

	// A command that ends by itself is answered when it ends, though what
	// it left in the background holds its output open; that stays.
	t.Run("exit-leaves-background", func(t *testing.T) {
		arg := sleeperArg(marker())
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: detacher(arg, false), TimeoutMs: 600_000})
		if err != nil || res.ExitCode != 0 || res.Reason != "exit" || string(res.Stdout) != "started\n" {
			t.Fatalf("exec that leaves processes behind: %v %+v", err, res)
		}
		startedDetached(t, d, sb.ID)
		if left := sandboxProcs(t, d, sb.ID, arg); len(left) != 2 {
			t.Fatalf("want the two background processes still running, found %q", left)
		}
	})
}

// stream runs req over the WebSocket and collects its stdout.
func stream(ctx context.Context, d *daemon, id string, req *api.ExecRequest) (*api.ExecExit, string, error) {
	st, err := d.c.ExecStream(ctx, id, req)
	if err != nil {
		return nil, "", err
	}
	go io.Copy(io.Discard, st.Stderr)
	out, _ := io.ReadAll(st.Stdout)
	exit, err := st.Wait()
	return exit, string(out), err
}
