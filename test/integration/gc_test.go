package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/testbin"
)

// The os view's layers are kept while a run uses them and removed by
// `tine gc` once no tine does: a run holds the layer it stacks (a
// descriptor of it, locked), gc leaves that one and removes a layer no
// one holds, and the run, after gc, still sees its view.
func TestGCKeepsViewLayersInUse(t *testing.T) {
	h := setup(t)
	if os.Geteuid() != 0 {
		t.Skip("the view layers are made by root only")
	}
	arg := sleepArg()
	p := h.start(runConfig{}, "run", "--", "sh", "-c", "sleep "+arg+"; ls -a /home; echo done")
	if !testbin.Eventually(10*time.Second, func() bool { return len(hostProcs(argvIs("sleep", arg))) > 0 }) {
		t.Fatalf("sleep %s never showed up in the host's /proc\nstderr: %s", arg, p.stderr.String())
	}
	// Negative check: the run holds a view layer, so there is one to keep.
	held := heldViewLayer(t, p.pid())
	if held == "" {
		t.Fatalf("tine run (pid %d) holds no view layer; the layers are not where this test looks", p.pid())
	}
	unused := filepath.Join(filepath.Dir(held), "ffffffffffffffffffffffffffffffff")
	if err := os.MkdirAll(unused+"/etc", 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(unused) })
	out, err := exec.Command(tineBin, "gc").CombinedOutput()
	if err != nil {
		t.Fatalf("tine gc: %v\n%s", err, out)
	}
	if _, err := os.Stat(unused); !os.IsNotExist(err) {
		t.Errorf("tine gc left the unused layer %s (%v); it said:\n%s", unused, err, out)
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("tine gc removed the layer %s, which a run uses (%v); it said:\n%s", held, err, out)
	}
	for _, pid := range hostProcs(argvIs("sleep", arg)) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if r := p.wait(); r.Code != 0 || !strings.HasSuffix(r.Stdout, ".\n..\ndone\n") {
		t.Errorf("after gc, the run's /home is not its empty view:\n%s", r)
	}
}

// heldViewLayer returns the view layer tine process pid holds a
// descriptor of, "" when none.
func heldViewLayer(t *testing.T, pid int) string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		dir := filepath.Dir(target)
		if dir == "/run/tine/views" || dir == "/dev/shm/tine-views" {
			return target
		}
	}
	return ""
}
