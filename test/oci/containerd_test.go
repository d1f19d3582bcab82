package oci_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/ctrd"
	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

func startContainerd(t *testing.T) *ctrd.Containerd {
	require.Root(t)
	require.Feature(t, "cgroup")
	for _, b := range append([]string{"busybox"}, ctrd.Binaries...) {
		require.Binary(t, b)
	}
	c, err := ctrd.Start(t.TempDir(), fmt.Sprintf("tine-test-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// TestContainerd runs containers from an imported image through
// containerd's runc shim with tine as its runtime binary.
func TestContainerd(t *testing.T) {
	c := startContainerd(t)
	link := runcLink(t)
	const ref = "tine.test/busybox:latest"
	if err := c.ImportBusybox(ref); err != nil {
		t.Fatal(err)
	}

	// Foreground, removed after: output and exit code come back.
	out, err := c.Ctr("run", "--rm", "--runc-binary", link, ref, "fg", "sh", "-c",
		`echo "in $(hostname)"; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; exit 4`)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 || !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("ctr run: %v\n%s", err, out)
	}

	// Detached: it runs under the shim, tine-runc reports it, a kill ends
	// it, and nothing of it is left once removed.
	if out, err := c.Ctr("run", "-d", "--runc-binary", link, ref, "bg", "sleep", "3600"); err != nil {
		t.Fatalf("ctr run -d: %v\n%s", err, out)
	}
	stateRoot := filepath.Join("/run/containerd/runc", c.Namespace)
	var st struct {
		Status string
		Pid    int
	}
	b, err := exec.Command(link, "--root", stateRoot, "state", "bg").Output()
	if json.Unmarshal(b, &st); err != nil || st.Status != "running" {
		t.Fatalf("tine-runc state bg: %v %s", err, b)
	}
	if ppid := procstat.Fields(st.Pid); len(ppid) < 2 || !strings.Contains(comm(ppid[1]), "containerd-shim") {
		t.Errorf("the container's PID 1 (%d) is not a child of containerd's shim: parent %v", st.Pid, ppid)
	}
	if out, _ := c.Ctr("task", "ls"); !strings.Contains(out, "RUNNING") {
		t.Errorf("ctr task ls:\n%s", out)
	}
	// exec through the shim (tine-runc exec --process --detach).
	out, err = c.Ctr("task", "exec", "--exec-id", "x1", "bg", "sh", "-c", `echo "exec in $(hostname)"; grep Seccomp: /proc/self/status; exit 6`)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 || !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("ctr task exec: %v\n%s", err, out)
	}
	if out, err := c.Ctr("task", "kill", "-s", "SIGKILL", "bg"); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, out)
	}
	if !testbin.Eventually(20*time.Second, func() bool { out, _ := c.Ctr("task", "ls"); return strings.Contains(out, "STOPPED") }) {
		out, _ := c.Ctr("task", "ls")
		t.Fatalf("never stopped:\n%s", out)
	}
	if out, err := c.Ctr("task", "rm", "bg"); err != nil {
		t.Fatalf("ctr task rm: %v\n%s", err, out)
	}
	c.Ctr("container", "rm", "bg")
	if _, err := os.Stat(filepath.Join(stateRoot, "bg")); !os.IsNotExist(err) {
		t.Errorf("tine-runc state left: %v", err)
	}
	if cg := memoryCgroup("/" + c.Namespace + "/bg"); cg != "" {
		t.Errorf("cgroup left: %s", cg)
	}
	if startTimeAlive(st.Pid) {
		t.Errorf("the container's PID 1 (%d) still runs", st.Pid)
	}
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

func startTimeAlive(pid int) bool {
	f := procstat.Fields(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
