package api_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

// defaultToken is where a daemon with the default --data-dir keeps the
// token of its TCP listener.
const defaultToken = "/run/tine/token"

// TestTokenHiddenFromSandboxes: the bearer token of the TCP listener,
// generated under the default --data-dir, cannot be read from inside a
// sandbox, neither by a command nor through the file API (every sandbox
// sees the host's root as its read-only base, so the token must not lie on
// it).
func TestTokenHiddenFromSandboxes(t *testing.T) {
	_, statErr := os.Stat(defaultToken)
	d := startDaemon(t, defaultDataDir, "--listen", freePort(t))
	if errors.Is(statErr, os.ErrNotExist) {
		t.Cleanup(func() { os.Remove(defaultToken) })
	}
	raw, err := os.ReadFile(defaultToken)
	if err != nil {
		t.Fatalf("the daemon made no token in the default data dir: %v", err)
	}
	token := strings.TrimSpace(string(raw))
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat", defaultToken}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), token) {
		t.Fatalf("a sandbox reads the token: exit %d, stdout %q", res.ExitCode, res.Stdout)
	}
	if rc, err := d.c.ReadFile(ctx, sb.ID, defaultToken); err == nil {
		b, _ := io.ReadAll(rc)
		rc.Close()
		t.Fatalf("the file API reads the token of %s: %q", defaultToken, b)
	}
	// Nor is it under the directory the sandbox shows for the data dir.
	if infos, err := d.c.ReadDir(ctx, sb.ID, filepath.Dir(defaultToken)); err == nil {
		for _, i := range infos {
			if i.Name == "token" {
				t.Fatalf("the file API lists the token in %s", filepath.Dir(defaultToken))
			}
		}
	}
}
