// Package ctrd runs a containerd of its own (root, state and socket in a
// directory, the CRI plugin off) and drives it with ctr: for the tests and
// the benchmark of tine as containerd's runtime (test/oci, tine bench oci).
package ctrd

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/probe"
)

// Containerd is a running containerd and the ctr namespace its callers use.
type Containerd struct {
	Dir, Socket, Namespace string
	// RuncRoot is where the runc shim's runtime keeps its state: the
	// shim's default (/run/containerd/runc/NAMESPACE) for ctr, under Dir
	// with the CRI plugin.
	RuncRoot string
	// BinDir, when set, holds the containerd, ctr and shim to run instead
	// of PATH's (scripts/install-containerd2's 2.x next to Debian's 1.6).
	BinDir string
	// version is containerd's major version: its config's version follows.
	version int
	// path are directories put first on containerd's PATH, after BinDir.
	path []string
	cmd  *exec.Cmd
}

// Binaries are what Start needs on PATH.
var Binaries = []string{"containerd", "ctr", "containerd-shim-runc-v2"}

// Start starts containerd with everything under dir, and waits until it
// answers.
func Start(dir, namespace string) (*Containerd, error) {
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), Namespace: namespace,
		RuncRoot: filepath.Join("/run/containerd/runc", namespace)}
	if err := c.prepare(); err != nil {
		return nil, err
	}
	if err := c.start(c.config("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")); err != nil {
		return nil, err
	}
	return c, nil
}

// bin is the path of one of Binaries: BinDir's, or the name for PATH.
func (c *Containerd) bin(name string) string {
	if c.BinDir != "" {
		return filepath.Join(c.BinDir, name)
	}
	return name
}

// major is the major version of the containerd at bin.
func major(bin string) (int, error) {
	v, err := probe.ContainerdVersion(bin)
	if err != nil {
		return 0, err
	}
	var m int
	if _, err := fmt.Sscanf(v, "%d", &m); err != nil {
		return 0, fmt.Errorf("%s --version: no version in %q", bin, v)
	}
	return m, nil
}

// config is containerd's config with everything under Dir: top-level
// keys top, then tables. containerd 1.x reads version 2, 2.x version 3
// (which renamed the CRI plugin's tables, not these).
func (c *Containerd) config(top string, tables ...string) string {
	version := 2
	if c.version >= 2 {
		version = 3
	}
	return fmt.Sprintf("version = %d\nroot = %q\nstate = %q\n%s[grpc]\n  address = %q\n[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %q\n",
		version, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), top, c.Socket, filepath.Join(c.Dir, "opt")) + strings.Join(tables, "")
}

// prepare finds the programs and reads containerd's version, which the
// config depends on.
func (c *Containerd) prepare() error {
	for _, b := range Binaries {
		if _, err := exec.LookPath(c.bin(b)); err != nil {
			if c.BinDir != "" {
				return fmt.Errorf("%s: %w (scripts/install-containerd2 puts containerd 2.x there)", c.bin(b), err)
			}
			return fmt.Errorf("%s is not installed (Debian: apt-get install containerd)", b)
		}
	}
	var err error
	c.version, err = major(c.bin("containerd"))
	return err
}

// start writes config and starts containerd, BinDir first on its PATH so
// that its shim is BinDir's too.
func (c *Containerd) start(config string) error {
	dir := c.Dir
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	c.cmd = exec.Command(c.bin("containerd"), "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = log, log
	first := c.path
	if c.BinDir != "" {
		first = append([]string{c.BinDir}, first...)
	}
	if len(first) > 0 {
		c.cmd.Env = append(os.Environ(), "PATH="+strings.Join(append(first, os.Getenv("PATH")), string(os.PathListSeparator)))
	}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := c.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := c.Ctr("version"); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			return fmt.Errorf("containerd did not come up:\n%s", b)
		}
	}
}

// CtrArgs is the start of a ctr command line for this containerd.
func (c *Containerd) CtrArgs() []string {
	return []string{c.bin("ctr"), "--address", c.Socket, "--namespace", c.Namespace}
}

// Ctr runs ctr and returns its output. The output goes through a file: a
// container's command holds ctr's stdio, so a pipe might not end with ctr.
func (c *Containerd) Ctr(args ...string) (string, error) {
	out, err := os.CreateTemp(c.Dir, "ctr-out")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	argv := append(c.CtrArgs(), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	return string(b), err
}

// Stop removes the tasks left, ends containerd, and undoes its mounts.
func (c *Containerd) Stop() {
	if out, err := c.Ctr("task", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			c.Ctr("task", "kill", "-s", "SIGKILL", id)
			time.Sleep(200 * time.Millisecond)
			c.Ctr("task", "rm", "-f", id)
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
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], c.Dir) {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
	os.RemoveAll(c.RuncRoot)
	RemoveEmptyCgroup("/" + c.Namespace)
}

// BusyboxTools are the applets linked in a busybox root (the escape
// attempts of test/oci use the tools of a root: mount, mknod, nsenter, ...).
var BusyboxTools = []string{"sh", "cat", "echo", "grep", "sleep", "touch", "ls", "hostname", "true", "head",
	"id", "readlink", "mount", "umount", "mknod", "mkfifo", "mkdir", "rm", "nsenter", "unshare", "chroot", "dd", "kill", "sysctl", "stat"}

// BusyboxRoot writes a root holding Debian's static busybox (package
// busybox-static) and its applets' links.
func BusyboxRoot(dir string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return errors.New("busybox is not installed (Debian: apt-get install busybox-static)")
	}
	// /run as images have it: criu reads its kernel cache there at a restore.
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	for _, n := range BusyboxTools {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", n)); err != nil {
			return err
		}
	}
	return nil
}

// ImportBusybox imports an image tagged ref whose one layer is a busybox
// root, written as a docker save archive; its command is cmd (sh if none:
// a pause image's is one that waits).
func (c *Containerd) ImportBusybox(ref string, cmd ...string) error {
	if len(cmd) == 0 {
		cmd = []string{"sh"}
	}
	root := filepath.Join(c.Dir, "busybox-root")
	os.RemoveAll(root)
	if err := BusyboxRoot(root); err != nil {
		return err
	}
	defer os.RemoveAll(root)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(root, p)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	tw.Close()
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	layerID := sum(layer.Bytes())
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": cmd},
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
	path := filepath.Join(c.Dir, "busybox.tar")
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		return err
	}
	defer os.Remove(path)
	if out, err := c.Ctr("image", "import", path); err != nil {
		return fmt.Errorf("ctr image import: %v\n%s", err, out)
	}
	return nil
}

// RemoveEmptyCgroup removes the cgroup directory at path (below each
// hierarchy's root) where it is empty: the parents containerd's
// cgroupsPath made (/NAMESPACE), which runtimes leave, as runc does.
func RemoveEmptyCgroup(path string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + path)
	for _, d := range append(dirs, "/sys/fs/cgroup"+path) {
		syscall.Rmdir(d)
	}
}
