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
		{"umask", func(c *specs.Spec) { m := uint32(0o22); c.Process.User.Umask = &m }, "process.user.umask"},
		{"ambient capabilities of a user", func(c *specs.Spec) {
			c.Process.User.UID = 1000
			c.Process.Capabilities.Ambient = c.Process.Capabilities.Bounding
		}, "ambient for user 1000"},
		{"seccomp notify", func(c *specs.Spec) {
			c.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, ListenerPath: "/run/listener"}
		}, "listener path"},
		{"hooks", func(c *specs.Spec) { c.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}} }, "hooks"},
		{"writable cgroup mount", func(c *specs.Spec) {
			c.Mounts = append(c.Mounts, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"})
		}, "cgroup mount at /sys/fs/cgroup"},
		{"cgroup mount elsewhere", func(c *specs.Spec) {
			c.Mounts = append(c.Mounts, specs.Mount{Destination: "/cg", Type: "cgroup", Source: "cgroup", Options: []string{"ro"}})
		}, "cgroup mount at /cg"},
		{"extra capability", func(c *specs.Spec) {
			for _, l := range []*[]string{&c.Process.Capabilities.Bounding, &c.Process.Capabilities.Effective, &c.Process.Capabilities.Permitted} {
				*l = append(*l, "CAP_SYS_ADMIN")
			}
		}, "CAP_SYS_ADMIN"},
		{"host pid namespace", func(c *specs.Spec) {
			c.Linux.Namespaces = slices.DeleteFunc(c.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.PIDNamespace })
		}, "sharing the host's pid namespace"},
		{"host mount namespace", func(c *specs.Spec) {
			c.Linux.Namespaces = slices.DeleteFunc(c.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.MountNamespace })
		}, "sharing the host's mount namespace"},
		{"joined pid namespace", func(c *specs.Spec) {
			for i := range c.Linux.Namespaces {
				if c.Linux.Namespaces[i].Type == specs.PIDNamespace {
					c.Linux.Namespaces[i].Path = "/proc/1/ns/pid"
				}
			}
		}, "joining the pid namespace"},
		{"host sysctl", func(c *specs.Spec) { c.Linux.Sysctl = map[string]string{"vm.overcommit_memory": "1"} }, "linux.sysctl vm.overcommit_memory: not a namespaced sysctl"},
		{"hostname in the host's uts namespace", func(c *specs.Spec) {
			c.Hostname = "renamed"
			c.Linux.Namespaces = slices.DeleteFunc(c.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UTSNamespace })
		}, `hostname "renamed" without a uts namespace`},
		{"shared propagation", func(c *specs.Spec) {
			c.Mounts = append(c.Mounts, specs.Mount{Destination: "/mnt", Type: "bind", Source: "/etc", Options: []string{"rbind", "rshared"}})
		}, `mount propagation "rshared" at /mnt`},
		{"sysctl of the host's network", func(c *specs.Spec) {
			c.Linux.Namespaces = slices.DeleteFunc(c.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
			c.Linux.Sysctl = map[string]string{"net.ipv4.ip_forward": "1"}
		}, "in the host's network namespace"},
		{"device", func(c *specs.Spec) {
			major := int64(8)
			c.Linux.Resources.Devices = append(c.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "b", Major: &major, Access: "rwm"})
		}, "device rule allowing b 8"},
		{"systemd cgroup", func(c *specs.Spec) { c.Linux.CgroupsPath = "system.slice:cri:x" }, "systemd cgroup path"},
	}
	cases = append(cases, []struct {
		name   string
		change func(*specs.Spec)
		want   string
	}{
		{"bad oom score", func(c *specs.Spec) { v := 1001; c.Process.OOMScoreAdj = &v }, "oomScoreAdj 1001: want -1000 to 1000"},
		{"bad cpu shares", func(c *specs.Spec) { s := uint64(1); c.Linux.Resources.CPU = &specs.LinuxCPU{Shares: &s} }, "cpu.shares 1: want 2 to 262144"},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig(t)
			tc.change(cfg)
			_, err := Translate(cfg, "/bundle")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if !errors.Is(err, ErrUnsupported) && !slices.Contains([]string{"extra capability", "bad oom score", "bad cpu shares", "hostname in the host's uts namespace"}, tc.name) {
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

// TestTranslateKubeletFields: what the CRI plugin asks for a pod's
// container is honoured: the pod's ipc, uts and network namespaces by
// path, a non-root user, the cgroup mount, an OOM score and CPU shares;
// namespaces left out are the host's (hostNetwork).
func TestTranslateKubeletFields(t *testing.T) {
	cfg := ctrConfig(t)
	cfg.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
		{Type: specs.IPCNamespace, Path: "/proc/42/ns/ipc"}, {Type: specs.UTSNamespace, Path: "/proc/42/ns/uts"}}
	cfg.Process.User = specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534, 10}}
	cfg.Mounts = append(cfg.Mounts, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}})
	oom, shares := 998, uint64(2)
	cfg.Process.OOMScoreAdj = &oom
	cfg.Linux.Resources.CPU = &specs.LinuxCPU{Shares: &shares}
	c, err := Translate(cfg, "/bundle")
	if err != nil {
		t.Fatal(err)
	}
	want := map[specs.LinuxNamespaceType]string{specs.IPCNamespace: "/proc/42/ns/ipc", specs.UTSNamespace: "/proc/42/ns/uts", specs.NetworkNamespace: "/proc/self/ns/net"}
	if len(c.JoinNS) != 3 {
		t.Errorf("namespaces joined %v, want %v", c.JoinNS, want)
	}
	for k, v := range want {
		if c.JoinNS[k] != v {
			t.Errorf("namespaces joined %v, want %v", c.JoinNS, want)
		}
	}
	s := c.Spec
	if s.User == nil || s.User.UID != 65534 || s.User.GID != 65534 || !slices.Equal(s.User.Groups, []uint32{65534, 10}) {
		t.Errorf("user %+v", s.User)
	}
	if !s.CgroupFS || s.OOMScoreAdj != 998 || c.CPUShares != 2 {
		t.Errorf("cgroup fs %v, oom score %d, cpu shares %d", s.CgroupFS, s.OOMScoreAdj, c.CPUShares)
	}
}
