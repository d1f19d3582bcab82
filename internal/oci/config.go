// Package oci is tine as an OCI runtime: it reads a bundle's config.json
// (the runtime-spec), turns it into a detached sandbox (sandbox.Spec with
// Detach), and keeps the containers' state under a root directory, for the
// command line containerd's runc shim and CRI-O call (create, start,
// state, kill, delete, exec, ps, pause, resume, update, features).
package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/kernel/seccomp/policy"
	"github.com/tine-run/tine/internal/sandbox"
	"golang.org/x/sys/unix"
)

// ErrUnsupported marks a config field tine cannot honour: it is refused,
// never ignored.
var ErrUnsupported = errors.New("not supported by tine")

// Container is a bundle's config turned into what tine runs.
type Container struct {
	Spec    sandbox.Spec
	Rlimits []Rlimit
	// Config is the bundle's config as read.
	Config *specs.Spec
	// JoinNS are the network, ipc and uts namespaces to join (a pod's, by
	// path, or the host's), opened at create into Spec.NetNS, IPCNS and
	// UTSNS.
	JoinNS map[specs.LinuxNamespaceType]string
	// CPUShares is the cgroup's CPU weight (0: the default).
	CPUShares uint64
}

// nsFile names a namespace type's file in /proc/PID/ns.
var nsFile = map[specs.LinuxNamespaceType]string{specs.NetworkNamespace: "net", specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts"}

// Rlimit is a process resource limit set on the container's process.
type Rlimit struct {
	Resource   int
	Soft, Hard uint64
}

// LoadBundle reads bundle/config.json and translates it.
func LoadBundle(bundle string) (*Container, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("read the bundle's config: %w", err)
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s/config.json: %w", bundle, err)
	}
	return Translate(&cfg, bundle)
}

// Translate turns an OCI config into a detached sandbox spec. Every field
// tine cannot honour is an error naming it (ErrUnsupported); tine's own
// walls (seccomp, Landlock, its masks, no_new_privs) are added where the
// config leaves room.
func Translate(cfg *specs.Spec, bundle string) (*Container, error) {
	c := &Container{Config: cfg, JoinNS: map[specs.LinuxNamespaceType]string{}}
	s := &c.Spec
	s.Detach = true
	s.Seccomp = seccomp.Default // tine's wall, on top of what the config asks
	unsupported := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrUnsupported)
	}
	if cfg.Root == nil || cfg.Root.Path == "" {
		return nil, errors.New("config.json has no root.path")
	}
	root := cfg.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	s.RootFS, s.RootInPlace, s.ReadOnlyRoot = root, true, cfg.Root.Readonly
	s.Hostname = cfg.Hostname
	if cfg.Hooks != nil && (len(cfg.Hooks.Prestart)+len(cfg.Hooks.CreateRuntime)+len(cfg.Hooks.CreateContainer)+len(cfg.Hooks.StartContainer)+len(cfg.Hooks.Poststart)+len(cfg.Hooks.Poststop) > 0) {
		return nil, unsupported("hooks")
	}

	p := cfg.Process
	if p == nil || len(p.Args) == 0 {
		return nil, errors.New("config.json has no process.args: nothing to run")
	}
	if p.CommandLine != "" {
		return nil, unsupported("process.commandLine (Windows)")
	}
	s.Args, s.Env, s.Workdir, s.TTY = p.Args, p.Env, p.Cwd, p.Terminal
	if p.User.Umask != nil {
		return nil, unsupported("process.user.umask")
	}
	if u := p.User; u.UID != 0 || u.GID != 0 || len(u.AdditionalGids) > 0 {
		s.User = &sandbox.User{UID: u.UID, GID: u.GID, Groups: u.AdditionalGids}
	}
	if p.ApparmorProfile != "" || p.SelinuxLabel != "" {
		return nil, unsupported("process.apparmorProfile / selinuxLabel (tine's walls are seccomp, Landlock and capabilities)")
	}
	if p.OOMScoreAdj != nil {
		if *p.OOMScoreAdj < -1000 || *p.OOMScoreAdj > 1000 {
			return nil, fmt.Errorf("process.oomScoreAdj %d: want -1000 to 1000", *p.OOMScoreAdj)
		}
		s.OOMScoreAdj = *p.OOMScoreAdj
	}
	if p.Scheduler != nil || p.IOPriority != nil || p.ExecCPUAffinity != nil {
		return nil, unsupported("process.scheduler, ioPriority and execCPUAffinity")
	}
	if p.Capabilities != nil {
		if err := sameCaps(p.Capabilities); err != nil {
			return nil, err
		}
		s.Capabilities = append([]string{}, p.Capabilities.Bounding...)
		// A user other than root keeps no capability across execve
		// unless it is ambient, which tine does not raise.
		if s.User != nil && s.User.UID != 0 && len(p.Capabilities.Ambient) > 0 {
			return nil, unsupported("process.capabilities.ambient for user %d (a non-root command gets no capabilities)", s.User.UID)
		}
	}
	for _, r := range p.Rlimits {
		res, ok := rlimits[r.Type]
		if !ok {
			return nil, unsupported("process.rlimits %s", r.Type)
		}
		c.Rlimits = append(c.Rlimits, Rlimit{Resource: res, Soft: r.Soft, Hard: r.Hard})
	}

	l := cfg.Linux
	if l == nil {
		return nil, errors.New("config.json has no linux section")
	}
	if err := translateLinux(l, c, unsupported); err != nil {
		return nil, err
	}
	if err := translateMounts(cfg.Mounts, s, unsupported); err != nil {
		return nil, err
	}
	return c, nil
}

type unsupportedFunc func(format string, a ...any) error

func translateLinux(l *specs.Linux, c *Container, unsupported unsupportedFunc) error {
	s := &c.Spec
	for _, ns := range l.Namespaces {
		switch ns.Type {
		case specs.PIDNamespace, specs.MountNamespace, specs.CgroupNamespace:
			if ns.Path != "" {
				return unsupported("joining the %s namespace at %s (tine makes its own; only network, ipc and uts namespaces can be joined)", ns.Type, ns.Path)
			}
		case specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace:
			if ns.Path != "" {
				c.JoinNS[ns.Type] = ns.Path
			}
		case specs.UserNamespace:
			return unsupported("a user namespace")
		default:
			return unsupported("namespace %q", ns.Type)
		}
	}
	// tine always makes new pid and mount namespaces: a config that
	// shares one with the host asks for what tine's walls are built on.
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace} {
		if !slices.ContainsFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == want }) {
			return unsupported("sharing the host's %s namespace (tine always makes its own)", want)
		}
	}
	// A network, ipc or uts namespace left out is the host's (a pod with
	// hostNetwork or hostIPC): the runtime's own is joined.
	for _, t := range []specs.LinuxNamespaceType{specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace} {
		if !slices.ContainsFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == t }) {
			c.JoinNS[t] = "/proc/self/ns/" + nsFile[t]
		}
	}
	if _, joined := c.JoinNS[specs.UTSNamespace]; joined && s.Hostname != "" && !slices.ContainsFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UTSNamespace }) {
		return fmt.Errorf("hostname %q without a uts namespace: it would rename the host (runc refuses it too)", s.Hostname)
	}
	if len(l.UIDMappings)+len(l.GIDMappings) > 0 {
		return unsupported("uid and gid mappings")
	}
	if err := checkSysctls(l.Sysctl, c, unsupported); err != nil {
		return err
	}
	if l.Seccomp != nil {
		// Stacked on tine's own policy: both apply.
		filter, err := policy.CompileProfile(l.Seccomp)
		if err != nil {
			return fmt.Errorf("linux.seccomp: %w: %w", err, ErrUnsupported)
		}
		s.CommandFilter = filter
	}
	if l.RootfsPropagation != "" && l.RootfsPropagation != "private" && l.RootfsPropagation != "rprivate" {
		return unsupported("rootfsPropagation %q", l.RootfsPropagation)
	}
	if l.MountLabel != "" || l.IntelRdt != nil || l.Personality != nil || len(l.Devices) > 0 || l.TimeOffsets != nil {
		return unsupported("linux.mountLabel, intelRdt, personality, devices or timeOffsets")
	}
	s.MaskedPaths, s.ReadOnlyPaths = l.MaskedPaths, l.ReadonlyPaths
	if l.CgroupsPath != "" {
		if strings.Contains(l.CgroupsPath, ":") {
			return unsupported("systemd cgroup path %q (tine drives cgroupfs: use an absolute path)", l.CgroupsPath)
		}
		s.CgroupPath = filepath.Clean("/" + l.CgroupsPath)
	}
	if r := l.Resources; r != nil {
		lim, err := limits(r, unsupported)
		if err != nil {
			return err
		}
		s.Limits = lim
		if r.CPU != nil && r.CPU.Shares != nil {
			c.CPUShares = *r.CPU.Shares
		}
	}
	return nil
}

// limits maps the resources tine enforces; every other one is refused.
func limits(r *specs.LinuxResources, unsupported unsupportedFunc) (cgroup.Limits, error) {
	var lim cgroup.Limits
	// The devices cgroup: tine's /dev is a read-only tmpfs holding only
	// null, zero, full, random, urandom and tty (and a devpts), so it
	// honours a policy that allows no more than those.
	for _, d := range r.Devices {
		if d.Allow && !standardDevice(d) {
			return lim, unsupported("device rule allowing %s %v:%v (tine's /dev holds only the standard nodes)", d.Type, ptrString(d.Major), ptrString(d.Minor))
		}
	}
	if m := r.Memory; m != nil {
		if m.Limit != nil && *m.Limit > 0 {
			lim.MemoryBytes = *m.Limit
		}
		if m.Reservation != nil || m.Kernel != nil || m.KernelTCP != nil || m.Swappiness != nil || m.DisableOOMKiller != nil || m.UseHierarchy != nil || m.CheckBeforeUpdate != nil {
			return lim, unsupported("memory settings other than limit and swap")
		}
	}
	if p := r.Pids; p != nil && p.Limit > 0 {
		lim.Pids = p.Limit
	}
	if c := r.CPU; c != nil {
		if c.Quota != nil && *c.Quota > 0 {
			period := uint64(100000)
			if c.Period != nil && *c.Period > 0 {
				period = *c.Period
			}
			lim.CPUs = float64(*c.Quota) / float64(period)
		}
		if c.Shares != nil && *c.Shares != 0 && (*c.Shares < 2 || *c.Shares > 262144) {
			return lim, fmt.Errorf("cpu.shares %d: want 2 to 262144", *c.Shares)
		}
		if c.RealtimeRuntime != nil || c.RealtimePeriod != nil || c.Cpus != "" || c.Mems != "" || c.Idle != nil || c.Burst != nil {
			return lim, unsupported("cpu settings other than shares, quota and period")
		}
	}
	if r.BlockIO != nil || len(r.HugepageLimits) > 0 || r.Network != nil || len(r.Rdma) > 0 || len(r.Unified) > 0 {
		return lim, unsupported("blockIO, hugepage, network, rdma or unified resources")
	}
	return lim, nil
}

// standardDevices are the nodes tine's /dev has: null, zero, full, random,
// urandom, tty, /dev/console (5:1), ptmx (5:2) and the devpts (136:*).
var standardDevices = [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}, {136, -1}}

func standardDevice(d specs.LinuxDeviceCgroup) bool {
	if d.Type != "c" || d.Major == nil {
		return false
	}
	for _, s := range standardDevices {
		if *d.Major == s[0] && (s[1] < 0 || d.Minor != nil && *d.Minor == s[1]) {
			return true
		}
	}
	return false
}

func ptrString(p *int64) string {
	if p == nil {
		return "*"
	}
	return strconv.FormatInt(*p, 10)
}

// sameCaps accepts one capability set for every kind (bounding, effective,
// permitted; inheritable and ambient empty or the same): tine gives the
// command one set.
func sameCaps(c *specs.LinuxCapabilities) error {
	norm := func(l []string) string { l = slices.Clone(l); slices.Sort(l); return strings.Join(l, ",") }
	want := norm(c.Bounding)
	for _, other := range [][]string{c.Effective, c.Permitted} {
		if norm(other) != want {
			return fmt.Errorf("capabilities: bounding, effective and permitted sets that differ: %w", ErrUnsupported)
		}
	}
	for _, other := range [][]string{c.Inheritable, c.Ambient} {
		if len(other) > 0 && norm(other) != want {
			return fmt.Errorf("capabilities: inheritable or ambient sets other than the bounding set: %w", ErrUnsupported)
		}
	}
	return sandbox.CheckCapabilities(c.Bounding)
}

var rlimits = map[string]int{
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_CPU": unix.RLIMIT_CPU,
	"RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_LOCKS": unix.RLIMIT_LOCKS,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO, "RLIMIT_RTTIME": unix.RLIMIT_RTTIME, "RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_STACK": unix.RLIMIT_STACK,
}

// ownMounts are the destinations tine mounts itself, the way the
// runtime-spec's defaults describe them: /proc, a tmpfs /dev with the
// standard nodes, its devpts and shm, and a read-only /sys.
var ownMounts = map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/dev/shm": "tmpfs", "/sys": "sysfs"}

func translateMounts(mounts []specs.Mount, s *sandbox.Spec, unsupported unsupportedFunc) error {
	for _, m := range mounts {
		dest := filepath.Clean(m.Destination)
		if !filepath.IsAbs(dest) {
			return fmt.Errorf("mount destination %q is not absolute", m.Destination)
		}
		flags, data, bind, ro, propagation := mountOptions(m.Options)
		if propagation != "" {
			return unsupported("mount propagation %q at %s (a container's mounts are private)", propagation, dest)
		}
		typ := m.Type
		if bind && (typ == "" || typ == "none" || typ == "bind") {
			typ = "bind"
		}
		if t, ok := ownMounts[dest]; ok && t == typ {
			continue // tine makes it
		}
		switch typ {
		case "cgroup", "cgroup2":
			if dest != "/sys/fs/cgroup" || !ro {
				return unsupported("a %s mount at %s (only a read-only one at /sys/fs/cgroup, which shows the container its own cgroup)", typ, dest)
			}
			s.CgroupFS = true
		case "bind":
			s.Binds = append(s.Binds, sandbox.Bind{Source: m.Source, Target: dest, ReadOnly: ro})
		case "tmpfs", "mqueue":
			s.Mounts = append(s.Mounts, sandbox.Mount{Type: typ, Source: typ, Target: dest, Flags: flags, Data: data})
		default:
			return unsupported("a %s mount at %s", typ, dest)
		}
	}
	return nil
}

// mountFlags are the mount(8) options that are flags; the rest is data.
var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"sync": unix.MS_SYNCHRONOUS, "dirsync": unix.MS_DIRSYNC, "noatime": unix.MS_NOATIME,
	"nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME, "strictatime": unix.MS_STRICTATIME,
}

func mountOptions(opts []string) (flags uintptr, data string, bind, ro bool, propagation string) {
	var rest []string
	for _, o := range opts {
		switch o {
		case "bind", "rbind":
			bind = true
		case "rw", "private", "rprivate", "suid", "dev", "exec", "atime":
		case "shared", "rshared", "slave", "rslave", "unbindable", "runbindable":
			propagation = o
		default:
			if f, ok := mountFlags[o]; ok {
				flags |= f
				ro = ro || o == "ro"
			} else {
				rest = append(rest, o)
			}
		}
	}
	return flags, strings.Join(rest, ","), bind, ro, propagation
}
