package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// A live fork from the state of the session's last fork reuses that
// fork's snapshot (ADR 0013, session 9) only while the sandbox's files
// cannot have changed: each way of changing them — a cell of the session,
// an exec, a file written through the API, a cell of another session in
// the same sandbox, which nothing lets in — is followed by a fork whose
// child must see the change. Forks with nothing between them share a
// snapshot (the reuse is there to be tested).
func TestLiveForkKeepsItsSnapshotOnlyWhileNothingChanged(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, s := sandboxWithForkable(t, d)
	run := func(s *client.Session, code string) string {
		t.Helper()
		ex, err := s.Run(ctx, code)
		if err != nil || ex.Status != api.ExecOK {
			t.Fatalf("cell %q: %+v %v", code, ex, err)
		}
		return ex.Text()
	}
	run(s, "import os\nos.mkdir('/kept')")
	// fork forks s into one child, checks that the child sees exactly the
	// files of /kept named in want, deletes it and returns the snapshot.
	fork := func(want ...string) string {
		t.Helper()
		kids, res, err := s.Fork(ctx, 1)
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		defer d.c.Delete(ctx, res.Sandboxes[0].ID)
		if got := run(kids[0], "','.join(sorted(os.listdir('/kept')))"); got != "'"+strings.Join(want, ",")+"'" {
			t.Fatalf("the child's /kept holds %s, want %q", got, want)
		}
		return res.Snapshot
	}

	first := fork()
	if again := fork(); again != first {
		t.Fatalf("a fork with nothing changed since the last took snapshot %s, not the last's %s", again, first)
	}

	run(s, "open('/kept/by-cell', 'w').write('1')")
	afterCell := fork("by-cell")
	if afterCell == first {
		t.Fatal("a fork after a cell reused the snapshot from before it")
	}
	if again := fork("by-cell"); again != afterCell {
		t.Fatalf("a fork with nothing changed took snapshot %s, not %s", again, afterCell)
	}

	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo 1 > /kept/by-exec"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	afterExec := fork("by-cell", "by-exec")

	if _, err := d.c.WriteFile(ctx, sb.ID, "/kept/by-api", strings.NewReader("1"), nil); err != nil {
		t.Fatal(err)
	}
	if again := fork("by-api", "by-cell", "by-exec"); again == afterExec {
		t.Fatal("a fork after a file written through the API reused the snapshot from before it")
	}

	// Another session's interpreter runs in the sandbox: no snapshot is
	// kept while it does, since its cells change files without anything
	// being let in.
	other, err := d.c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	fork("by-api", "by-cell", "by-exec")
	run(other, "open('/kept/by-other', 'w').write('1')")
	fork("by-api", "by-cell", "by-exec", "by-other")
	withOther := fork("by-api", "by-cell", "by-exec", "by-other")
	if again := fork("by-api", "by-cell", "by-exec", "by-other"); again == withOther {
		t.Fatal("a snapshot was kept while another session ran in the sandbox")
	}
}

// sandboxWithForkable creates a sandbox and a forkable session in it.
func sandboxWithForkable(t *testing.T, d *daemon) (*api.Sandbox, *client.Session) {
	t.Helper()
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	return sb, s
}
