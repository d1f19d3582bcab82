package oci_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
)

// containerd is a containerd of the test's own: its root, state and
// socket in a temporary directory, the CRI plugin off.
type containerd struct {
	t    *testing.T
	dir  string
	sock string
	ns   string
	cmd  *exec.Cmd
}

func startContainerd(t *testing.T) *containerd {
	require.Root(t)
	require.Feature(t, "cgroup")
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "busybox"} {
		require.Binary(t, b)
	}
	dir := t.TempDir()
	c := &containerd{t: t, dir: dir, sock: filepath.Join(dir, "containerd.sock"), ns: fmt.Sprintf("tine-test-%d", os.Getpid())}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	log, _ := os.Create(filepath.Join(dir, "containerd.log"))
	c.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	if !eventually(func() bool { _, err := c.ctr("version"); return err == nil }) {
		b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
		t.Fatalf("containerd did not come up:\n%s", b)
	}
	return c
}

func (c *containerd) ctr(args ...string) (string, error) {
	out, err := os.CreateTemp(c.dir, "ctr-out")
	if err != nil {
		return "", err
	}
	defer out.Close()
	cmd := exec.Command("ctr", append([]string{"--address", c.sock, "--namespace", c.ns}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	return string(b), err
}

// stop ends containerd and undoes its mounts (snapshots of containers a
// failed test left).
func (c *containerd) stop() {
	if out, _ := c.ctr("task", "ls", "-q"); out != "" {
		for _, id := range strings.Fields(out) {
			c.ctr("task", "kill", "-s", "SIGKILL", id)
			time.Sleep(200 * time.Millisecond)
			c.ctr("task", "rm", "-f", id)
		}
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], c.dir) {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
	os.RemoveAll(filepath.Join("/run/containerd/runc", c.ns))
}

// importBusybox imports an image whose one layer is a busybox root,
// written here as a docker save archive.
func (c *containerd) importBusybox(ref string) {
	t := c.t
	root := filepath.Join(t.TempDir(), "rootfs")
	makeRootfs(t, root)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, _ := tar.FileInfoHeader(fi, link)
		h.Name, _ = filepath.Rel(root, p)
		tw.WriteHeader(h)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			tw.Write(b)
		}
		return nil
	})
	tw.Close()
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	layerID := sum(layer.Bytes())
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": []string{"sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}}})
	manifest, _ := json.Marshal([]map[string]any{{"Config": sum(config) + ".json", "RepoTags": []string{ref}, "Layers": []string{layerID + "/layer.tar"}}})
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{{sum(config) + ".json", config}, {layerID + "/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		aw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))})
		aw.Write(f.data)
	}
	aw.Close()
	path := filepath.Join(t.TempDir(), "busybox.tar")
	os.WriteFile(path, archive.Bytes(), 0o644)
	if out, err := c.ctr("image", "import", path); err != nil {
		t.Fatalf("ctr image import: %v\n%s", err, out)
	}
}

// TestContainerd runs containers from an imported image through
// containerd's runc shim with tine as its runtime binary.
func TestContainerd(t *testing.T) {
	c := startContainerd(t)
	link := runcLink(t)
	const ref = "tine.test/busybox:latest"
	c.importBusybox(ref)

	// Foreground, removed after: output and exit code come back.
	out, err := c.ctr("run", "--rm", "--runc-binary", link, ref, "fg", "sh", "-c",
		`echo "in $(hostname)"; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; exit 4`)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 || !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("ctr run: %v\n%s", err, out)
	}

	// Detached: it runs under the shim, tine-runc reports it, a kill ends
	// it, and nothing of it is left once removed.
	if out, err := c.ctr("run", "-d", "--runc-binary", link, ref, "bg", "sleep", "3600"); err != nil {
		t.Fatalf("ctr run -d: %v\n%s", err, out)
	}
	stateRoot := filepath.Join("/run/containerd/runc", c.ns)
	var st struct {
		Status string
		Pid    int
	}
	b, err := exec.Command(link, "--root", stateRoot, "state", "bg").Output()
	if json.Unmarshal(b, &st); err != nil || st.Status != "running" {
		t.Fatalf("tine-runc state bg: %v %s", err, b)
	}
	if ppid := statFields(st.Pid); len(ppid) < 2 || !strings.Contains(comm(ppid[1]), "containerd-shim") {
		t.Errorf("the container's PID 1 (%d) is not a child of containerd's shim: parent %v", st.Pid, ppid)
	}
	if out, _ := c.ctr("task", "ls"); !strings.Contains(out, "RUNNING") {
		t.Errorf("ctr task ls:\n%s", out)
	}
	if out, err := c.ctr("task", "kill", "-s", "SIGKILL", "bg"); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, out)
	}
	if !eventually(func() bool { out, _ := c.ctr("task", "ls"); return strings.Contains(out, "STOPPED") }) {
		out, _ := c.ctr("task", "ls")
		t.Fatalf("never stopped:\n%s", out)
	}
	if out, err := c.ctr("task", "rm", "bg"); err != nil {
		t.Fatalf("ctr task rm: %v\n%s", err, out)
	}
	c.ctr("container", "rm", "bg")
	if _, err := os.Stat(filepath.Join(stateRoot, "bg")); !os.IsNotExist(err) {
		t.Errorf("tine-runc state left: %v", err)
	}
	if cg := memoryCgroup("/" + c.ns + "/bg"); cg != "" {
		t.Errorf("cgroup left: %s", cg)
	}
	if startTimeAlive(st.Pid) {
		t.Errorf("the container's PID 1 (%d) still runs", st.Pid)
	}
}

func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

func startTimeAlive(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
