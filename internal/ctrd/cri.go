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
}

// StartCRI starts containerd with its CRI plugin on (for crictl, as a
// kubelet drives it): everything under dir, no AppArmor, cgroupfs, the
// streaming server (exec, attach) on a free loopback port, no CNI
// configuration (host-network pods only), the runtime's state under dir,
// OOM scores kept at or above containerd's own (restrict_oom_score_adj:
// lowering them needs CAP_SYS_RESOURCE, which a CI container may lack).
func StartCRI(dir string, cri CRI) (*Containerd, error) {
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), Namespace: CRINamespace,
		RuncRoot: filepath.Join(dir, "runc-root")}
	for _, d := range []string{"cni-bin", "cni-conf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	p := `plugins."io.containerd.grpc.v1.cri"`
	rt := p + `.containerd.runtimes.` + cri.Handler
	tables := []string{
		fmt.Sprintf("[%s]\n  sandbox_image = %q\n  disable_apparmor = true\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n  enable_tls_streaming = false\n  restrict_oom_score_adj = true\n", p, cri.SandboxImage),
		fmt.Sprintf("[%s.containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = %q\n", p, cri.Handler),
		fmt.Sprintf("[%s]\n  runtime_type = \"io.containerd.runc.v2\"\n[%s.options]\n  BinaryName = %q\n  Root = %q\n  SystemdCgroup = false\n", rt, rt, cri.Binary, c.RuncRoot),
		fmt.Sprintf("[%s.cni]\n  bin_dir = %q\n  conf_dir = %q\n", p, filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf")),
	}
	if err := c.start(c.config("", tables...)); err != nil {
		return nil, err
	}
	yaml := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", c.CRIEndpoint(), c.CRIEndpoint())
	if err := os.WriteFile(filepath.Join(dir, "crictl.yaml"), []byte(yaml), 0o644); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
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
