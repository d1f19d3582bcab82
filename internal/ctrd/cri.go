package ctrd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CRINamespace is the containerd namespace the CRI plugin works in.
const CRINamespace = "k8s.io"

// CRI is what StartCRI configures: a runtime handler and the pod
// sandbox's (pause) image.
type CRI struct {
	// Handler names the runtime handler (RuntimeClass handler) whose shim,
	// io.containerd.runc.v2, runs Binary as its runtime.
	Handler, Binary string
	// SandboxImage is the pause image, imported beforehand (no registry).
	SandboxImage string
	// BinDir, when set, holds the containerd to run (Containerd.BinDir).
	BinDir string
	// Path are directories put first on containerd's PATH: criu's, since
	// containerd 2.x's CheckpointContainer first runs `criu` from PATH (go-criu)
	// to check its version.
	Path []string
}

// StartCRI starts containerd with its CRI plugin on (for crictl, as a
// kubelet drives it): everything under dir, no AppArmor, cgroupfs, the
// streaming server (exec, attach) on a free loopback port, no CNI
// configuration (host-network pods only), the runtime's state under dir,
// OOM scores kept at or above containerd's own (restrict_oom_score_adj:
// lowering them needs CAP_SYS_RESOURCE, which a CI container may lack).
func StartCRI(dir string, cri CRI) (*Containerd, error) {
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), Namespace: CRINamespace,
		RuncRoot: filepath.Join(dir, "runc-root"), BinDir: cri.BinDir, path: cri.Path}
	for _, d := range []string{"cni-bin", "cni-conf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := c.prepare(); err != nil {
		return nil, err
	}
	tables := criTables1
	if c.version >= 2 {
		tables = criTables2
	}
	if err := c.start(c.config("", tables(dir, c.RuncRoot, cri)...)); err != nil {
		return nil, err
	}
	yaml := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", c.CRIEndpoint(), c.CRIEndpoint())
	if err := os.WriteFile(filepath.Join(dir, "crictl.yaml"), []byte(yaml), 0o644); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// criTables1 configures containerd 1.x's CRI plugin (config version 2):
// one plugin, io.containerd.grpc.v1.cri.
func criTables1(dir, runcRoot string, cri CRI) []string {
	p := `plugins."io.containerd.grpc.v1.cri"`
	rt := p + `.containerd.runtimes.` + cri.Handler
	return []string{
		fmt.Sprintf("[%s]\n  sandbox_image = %q\n  disable_apparmor = true\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n  enable_tls_streaming = false\n  restrict_oom_score_adj = true\n", p, cri.SandboxImage),
		fmt.Sprintf("[%s.containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = %q\n", p, cri.Handler),
		runtimeTable(rt, runcRoot, cri),
		fmt.Sprintf("[%s.cni]\n  bin_dir = %q\n  conf_dir = %q\n", p, filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf")),
	}
}

// criTables2 configures containerd 2.x's (config version 3), which split
// the CRI plugin in three: images (the pause image is a pinned one),
// runtime (handlers, AppArmor, OOM scores, CNI) and the gRPC service with
// the streaming server.
func criTables2(dir, runcRoot string, cri CRI) []string {
	img, run, svc := `plugins."io.containerd.cri.v1.images"`, `plugins."io.containerd.cri.v1.runtime"`, `plugins."io.containerd.grpc.v1.cri"`
	return []string{
		fmt.Sprintf("[%s]\n  snapshotter = \"overlayfs\"\n[%s.pinned_images]\n  sandbox = %q\n", img, img, cri.SandboxImage),
		fmt.Sprintf("[%s]\n  disable_apparmor = true\n  restrict_oom_score_adj = true\n[%s.containerd]\n  default_runtime_name = %q\n", run, run, cri.Handler),
		runtimeTable(run+`.containerd.runtimes.`+cri.Handler, runcRoot, cri),
		fmt.Sprintf("[%s.cni]\n  bin_dirs = [%q]\n  conf_dir = %q\n", run, filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf")),
		fmt.Sprintf("[%s]\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n  enable_tls_streaming = false\n", svc),
	}
}

// runtimeTable is the handler's table at rt: the runc shim running
// cri.Binary with its state under runcRoot, cgroupfs.
func runtimeTable(rt, runcRoot string, cri CRI) string {
	return fmt.Sprintf("[%s]\n  runtime_type = \"io.containerd.runc.v2\"\n[%s.options]\n  BinaryName = %q\n  Root = %q\n  SystemdCgroup = false\n", rt, rt, cri.Binary, runcRoot)
}

// CRIEndpoint is the CRI endpoint for crictl's --runtime-endpoint.
func (c *Containerd) CRIEndpoint() string { return "unix://" + c.Socket }

// Crictl runs crictl (at path) against this containerd and returns its
// output, through a file as Ctr does.
func (c *Containerd) Crictl(crictl string, args ...string) (string, error) {
	out, err := os.CreateTemp(c.Dir, "crictl-out")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.Command(crictl, append([]string{"--config", filepath.Join(c.Dir, "crictl.yaml")}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	return strings.TrimSpace(string(b)), err
}

// RemoveCgroupTree removes the cgroup directory at path and the empty
// groups below it, in every hierarchy: a pod's cgroup_parent, with what
// a failed test's containers left there.
func RemoveCgroupTree(path string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + path)
	for _, d := range append(dirs, "/sys/fs/cgroup"+path) {
		removeTree(d)
	}
}

// removeTree removes the empty directories of a cgroup tree, deepest first.
func removeTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}
