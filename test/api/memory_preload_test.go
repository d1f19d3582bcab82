package api_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
)

// fullCapsPreloadC is a library that, loaded into a process holding
// CAP_SYS_ADMIN (criu, not a sandbox's own processes), appends a line to
// $PWN_OUT, else /preload-ran in that process's root.
const fullCapsPreloadC = `#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void ran(void) {
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY);
	if (fd < 0) return;
	int n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return;
	buf[n] = 0;
	char *c = strstr(buf, "CapEff:");
	if (!c || !(strtoull(c + 7, 0, 16) & (1ULL << 21))) return; /* CAP_SYS_ADMIN */
	const char *out = getenv("PWN_OUT");
	fd = open(out ? out : "/preload-ran", O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) { write(fd, "ran with CAP_SYS_ADMIN\n", 23); close(fd); }
}`

// TestMemorySnapshotRefusesLoaderPreload: criu runs in the sandbox's mount
// namespace as root with every capability and no wall, and its dynamic
// loader reads /etc/ld.so.preload there. A sandbox that names its own
// library in that file (which its own processes then load, without
// CAP_SYS_ADMIN) is refused a memory snapshot (409), and the library never
// runs with criu's capabilities.
func TestMemorySnapshotRefusesLoaderPreload(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "gcc")
	dir := t.TempDir()
	so := filepath.Join(dir, "pwn.so")
	os.WriteFile(filepath.Join(dir, "pwn.c"), []byte(fullCapsPreloadC), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, filepath.Join(dir, "pwn.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	// Negative control: preloaded into a process with CAP_SYS_ADMIN (this
	// test's root), it runs and says so.
	ctl := filepath.Join(dir, "ctl")
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{"LD_PRELOAD=" + so, "PWN_OUT=" + ctl}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ctl); err != nil {
		t.Fatalf("the library did not run when preloaded into a root process, so its absence below proves nothing: %v", err)
	}

	d := startDaemon(t, "--pool", "0")
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(so)
	if _, err := d.c.WriteFile(ctx, sb.ID, "/root/pwn.so", bytes.NewReader(b), nil); err != nil {
		t.Fatal(err)
	}
	sh(t, d.c, sb.ID, "echo /root/pwn.so > /etc/ld.so.preload; sleep 3600 </dev/null >/dev/null 2>&1 &")
	_, err = d.c.Snapshot(ctx, sb.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	wantStatus(t, "a memory snapshot of a sandbox with /etc/ld.so.preload", err, http.StatusConflict)
	if err == nil || !strings.Contains(err.Error(), "/etc/ld.so.preload") {
		t.Errorf("the refusal does not name the file: %v", err)
	}
	if out := sh(t, d.c, sb.ID, "cat /preload-ran 2>/dev/null; true"); out != "" {
		t.Errorf("the sandbox's library ran with criu's capabilities: %q", out)
	}
}
