package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tine-run/tine/api"
)

// APITarget is the bar for an exec through the daemon.
var APITarget = Target{Variant: "tine exec (JSON)", MaxRatio: 2, Text: "exec round trip of /bin/true p50 at most 2x the same-run fork+exec floor"}

// APIGroups is the daemon suite, against d: create→ready of a live
// sandbox, an exec round trip of /bin/true, and a 1 MiB file put and get,
// each next to a same-run floor done without tine.
func APIGroups(d *Daemon) ([]Group, func(), error) {
	ctx := context.Background()
	c := d.Client
	sb, err := c.Create(ctx, &api.SandboxSpec{})
	if err != nil {
		return nil, nil, fmt.Errorf("create the sandbox to measure: %w", err)
	}
	cleanup := func() { c.Delete(context.Background(), sb.ID) }
	floorDir, err := os.MkdirTemp("", "tine-bench-floor-")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	cleanup = func() { c.Delete(context.Background(), sb.ID); os.RemoveAll(floorDir) }

	forkExec := Variant{Name: "fork+exec floor", Func: func(context.Context) error { return exec.Command("/bin/true").Run() }}
	execJSON := Variant{Name: "tine exec (JSON)", Func: func(ctx context.Context) error {
		res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit code %d", res.ExitCode)
		}
		return nil
	}}
	execStream := Variant{Name: "tine exec (stream)", Func: func(ctx context.Context) error {
		st, err := c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		st.Stdin.Close()
		go io.Copy(io.Discard, st.Stdout)
		go io.Copy(io.Discard, st.Stderr)
		x, err := st.Wait()
		if err != nil {
			return err
		}
		if x.ExitCode != 0 {
			return fmt.Errorf("exit code %d", x.ExitCode)
		}
		return nil
	}}

	var created string
	create := Variant{Name: "tine create→ready", Func: func(ctx context.Context) error {
		s, err := c.Create(ctx, &api.SandboxSpec{})
		if err != nil {
			return err
		}
		created = s.ID
		return nil
	}, After: func(ctx context.Context) error { return c.Delete(ctx, created) }}

	payload := bytes.Repeat([]byte("tine bench "), (1<<20)/11+1)[:1<<20]
	put := Variant{Name: "tine put 1 MiB", Func: func(ctx context.Context) error {
		_, err := c.WriteFile(ctx, sb.ID, "/tmp/bench.bin", bytes.NewReader(payload), nil)
		return err
	}}
	get := Variant{Name: "tine get 1 MiB", Func: func(ctx context.Context) error {
		r, err := c.ReadFile(ctx, sb.ID, "/tmp/bench.bin")
		if err != nil {
			return err
		}
		defer r.Close()
		n, err := io.Copy(io.Discard, r)
		if err == nil && n != int64(len(payload)) {
			err = fmt.Errorf("read %d bytes, want %d", n, len(payload))
		}
		return err
	}}
	floorFile := filepath.Join(floorDir, "bench.bin")
	localRW := Variant{Name: "local write+read floor", Func: func(context.Context) error {
		if err := os.WriteFile(floorFile, payload, 0o644); err != nil {
			return err
		}
		_, err := os.ReadFile(floorFile)
		return err
	}}

	return []Group{
		{Name: "exec /bin/true", Reference: forkExec.Name, Subject: execJSON.Name, Variants: []Variant{forkExec, execJSON, execStream}, Targets: []Target{APITarget}},
		{Name: "live sandbox", Reference: forkExec.Name, Subject: create.Name, Variants: []Variant{forkExec, create}},
		{Name: "files", Reference: localRW.Name, Subject: put.Name, Variants: []Variant{localRW, put, get}},
	}, cleanup, nil
}
