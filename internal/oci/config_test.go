package oci

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ctrConfig is the config.json containerd 1.6's ctr run wrote for
// `ctr run --memory-limit 67108864 IMAGE cfg sleep 30` (testdata).
func ctrConfig(t *testing.T) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile("testdata/ctr-run.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

func TestTranslateContainerdConfig(t *testing.T) {
	c, err := Translate(ctrConfig(t), "/bundle")
	if err != nil {
		t.Fatalf("containerd's own config is refused: %v", err)
	}
	s := c.Spec
	if !s.Detach || !s.RootInPlace || s.RootFS != "/bundle/rootfs" {
		t.Errorf("root: detach %v, in place %v, %q", s.Detach, s.RootInPlace, s.RootFS)
	}
	if !slices.Equal(s.Args, []string{"sleep", "30"}) || s.CgroupPath != "/default/cfg" {
		t.Errorf("args %v, cgroup %q", s.Args, s.CgroupPath)
	}
	if s.Limits.MemoryBytes != 64<<20 {
		t.Errorf("memory limit %d, want 64 MiB", s.Limits.MemoryBytes)
	}
	if len(s.Capabilities) != 14 || s.Seccomp == "" {
		t.Errorf("capabilities %v, seccomp %q: want Docker's 14 and tine's policy", s.Capabilities, s.Seccomp)
	}
	// /dev/mqueue and /run are mounted from the config; /proc, /dev,
	// /dev/pts, /dev/shm and /sys are tine's own.
	var targets []string
	for _, m := range s.Mounts {
		targets = append(targets, m.Type+":"+m.Target)
	}
	if !slices.Equal(targets, []string{"mqueue:/dev/mqueue", "tmpfs:/run"}) {
		t.Errorf("mounts from the config: %v", targets)
	}
	for _, m := range s.Mounts {
		if m.Target == "/run" && (m.Flags&unix.MS_NOSUID == 0 || !strings.Contains(m.Data, "size=65536k")) {
			t.Errorf("/run: flags %#x data %q", m.Flags, m.Data)
		}
	}
	if len(c.Rlimits) != 1 || c.Rlimits[0].Resource != unix.RLIMIT_NOFILE || c.Rlimits[0].Hard != 1024 {
		t.Errorf("rlimits %+v", c.Rlimits)
	}
}

// TestTranslateRefuses: what tine cannot honour is an error naming it,
// never ignored. The negative control is the unmodified config above.
func TestTranslateRefuses(t *testing.T) {
	cases := []struct {
		name   string
		change func(*specs.Spec)
		want   string
	}{
		{"user", func(c *specs.Spec) { c.Process.User.UID = 1000 }, "process.user 1000"},
		{"seccomp notify", func(c *specs.Spec) {
			c.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, ListenerPath: "/run/listener"}
		}, "listener path"},
		{"hooks", func(c *specs.Spec) { c.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}} }, "hooks"},
		{"cgroup mount", func(c *specs.Spec) {
			c.Mounts = append(c.Mounts, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"})
		}, "cgroup mount at /sys/fs/cgroup"},
		{"extra capability", func(c *specs.Spec) {
			for _, l := range []*[]string{&c.Process.Capabilities.Bounding, &c.Process.Capabilities.Effective, &c.Process.Capabilities.Permitted} {
				*l = append(*l, "CAP_SYS_ADMIN")
			}
		}, "CAP_SYS_ADMIN"},
		{"host pid namespace", func(c *specs.Spec) {
			c.Linux.Namespaces = slices.DeleteFunc(c.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.PIDNamespace })
		}, "sharing the host's pid namespace"},
		{"joined ipc namespace", func(c *specs.Spec) {
			c.Linux.Namespaces = append(c.Linux.Namespaces, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/proc/1/ns/ipc"})
		}, "joining the ipc namespace"},
		{"device", func(c *specs.Spec) {
			major := int64(8)
			c.Linux.Resources.Devices = append(c.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "b", Major: &major, Access: "rwm"})
		}, "device rule allowing b 8"},
		{"systemd cgroup", func(c *specs.Spec) { c.Linux.CgroupsPath = "system.slice:cri:x" }, "systemd cgroup path"},
		{"cpu shares", func(c *specs.Spec) { s := uint64(2); c.Linux.Resources.CPU.Shares = &s }, "cpu.shares 2"},
		{"oom score", func(c *specs.Spec) { v := 500; c.Process.OOMScoreAdj = &v }, "oomScoreAdj 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig(t)
			tc.change(cfg)
			_, err := Translate(cfg, "/bundle")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if !errors.Is(err, ErrUnsupported) && tc.name != "extra capability" {
				t.Errorf("%v is not ErrUnsupported", err)
			}
		})
	}
}

func TestTranslateStacksTheConfigsSeccompProfile(t *testing.T) {
	cfg := ctrConfig(t)
	cfg.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"mkdirat", "mkdir"}, Action: specs.ActErrno}}}
	c, err := Translate(cfg, "/bundle")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Spec.CommandFilter) == 0 || c.Spec.Seccomp == "" {
		t.Fatalf("filter of %d instructions, tine's mode %q: want both", len(c.Spec.CommandFilter), c.Spec.Seccomp)
	}
}
