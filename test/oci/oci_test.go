// Package oci_test runs tine as an OCI runtime, black-box: the runc-style
// command line on bundles made here, and under Debian's containerd with
// ctr, the way containerd's runc shim calls it.
package oci_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tine-run/tine/internal/ctrd"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

var tineBin string

func TestMain(m *testing.M) { testbin.Main(m, &tineBin) }

// runcLink is tine-runc, built next to the test's tine: the OCI runtime
// binary, runc's command line.
func runcLink(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(tineBin), "tine-runc")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("tine-runc was not built next to tine: %v", err)
	}
	return bin
}

// makeRootfs writes a root holding Debian's static busybox.
func makeRootfs(t *testing.T, dir string) {
	t.Helper()
	require.Binary(t, "busybox")
	if err := ctrd.BusyboxRoot(dir); err != nil {
		t.Fatal(err)
	}
}

// config is a config.json like containerd's for args.
func config(args ...string) *specs.Spec {
	dockerCaps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	limit := int64(96 << 20)
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: "oci-test",
		Root:     &specs.Root{Path: "rootfs"},
		Process: &specs.Process{
			Args: args, Env: []string{"PATH=/bin"}, Cwd: "/",
			Capabilities:    &specs.LinuxCapabilities{Bounding: dockerCaps, Effective: dockerCaps, Permitted: dockerCaps},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=65536k"}},
		},
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}},
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace}},
			MaskedPaths:   []string{"/proc/kcore", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/sys"},
		},
	}
}

// bundle makes a bundle directory for cfg and returns it.
func bundle(t *testing.T, cfg *specs.Spec) string {
	t.Helper()
	dir := t.TempDir()
	makeRootfs(t, filepath.Join(dir, "rootfs"))
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runtime runs the runc-style command line with state under root.
type runtime struct {
	t          *testing.T
	link, root string
}

func newRuntime(t *testing.T) *runtime {
	require.Root(t)
	require.Feature(t, "cgroup")
	// The tests' containers live below /tine-test; tine-runc (like runc)
	// leaves a cgroupsPath's parents, and a config without one gets
	// /tine-oci/ID.
	t.Cleanup(func() { ctrd.RemoveEmptyCgroup("/tine-test"); ctrd.RemoveEmptyCgroup("/tine-oci") })
	return &runtime{t: t, link: runcLink(t), root: t.TempDir()}
}

// run runs tine-runc with its output in a file: a created container
// keeps create's stdio as its command's, so a pipe would not end.
func (r *runtime) run(args ...string) (string, error) {
	out, err := os.CreateTemp(r.t.TempDir(), "out")
	if err != nil {
		r.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(r.link, append([]string{"--root", r.root}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	return string(b), err
}

func (r *runtime) must(args ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("tine-runc %v: %v\n%s", args, err, out)
	}
	return out
}

func (r *runtime) state(id string) specs.State {
	r.t.Helper()
	var s specs.State
	if err := json.Unmarshal([]byte(r.must("state", id)), &s); err != nil {
		r.t.Fatal(err)
	}
	return s
}

// memoryCgroup is the host directory of a container's memory cgroup.
func memoryCgroup(path string) string {
	for _, d := range []string{"/sys/fs/cgroup/memory" + path, "/sys/fs/cgroup" + path} {
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	return ""
}

func TestLifecycle(t *testing.T) {
	r := newRuntime(t)
	id := fmt.Sprintf("life-%d", os.Getpid())
	cfg := config("sh", "-c", "touch /started-in-place; sleep 3600")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	b := bundle(t, cfg)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r.must("create", "--bundle", b, "--pid-file", pidFile, id)
	t.Cleanup(func() { r.run("delete", "--force", id) })

	s := r.state(id)
	pidText, _ := os.ReadFile(pidFile)
	if s.Status != specs.StateCreated || strconv.Itoa(s.Pid) != string(pidText) {
		t.Fatalf("after create: status %s pid %d, pid file %q", s.Status, s.Pid, pidText)
	}
	// Created, not started: the process exists in its own namespaces, the
	// command has not run.
	mine, _ := os.Readlink("/proc/self/ns/pid")
	theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.Pid))
	if theirs == "" || theirs == mine {
		t.Fatalf("the container's PID 1 (%d) is not in a pid namespace of its own: %q vs %q", s.Pid, theirs, mine)
	}
	marker := filepath.Join(b, "rootfs", "started-in-place")
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran before start")
	}
	if cg := memoryCgroup(cfg.Linux.CgroupsPath); cg == "" {
		t.Fatalf("no memory cgroup at %s", cfg.Linux.CgroupsPath)
	} else if b, _ := os.ReadFile(cg + "/memory.limit_in_bytes"); len(b) > 0 && strings.TrimSpace(string(b)) != strconv.Itoa(96<<20) {
		t.Errorf("memory limit %s, want %d", b, 96<<20)
	}

	r.must("start", id)
	// The rootfs is written in place: the file appears in the bundle.
	if !testbin.Eventually(20*time.Second, func() bool { _, err := os.Stat(marker); return err == nil }) {
		t.Fatal("the command never wrote into the bundle's rootfs")
	}
	if s := r.state(id); s.Status != specs.StateRunning {
		t.Fatalf("after start: %s", s.Status)
	}
	if out, err := r.run("start", id); err == nil {
		t.Errorf("a second start succeeded: %s", out)
	}
	var pids []int
	json.Unmarshal([]byte(r.must("ps", "--format", "json", id)), &pids)
	if len(pids) < 2 {
		t.Errorf("ps lists %v: want PID 1 and the command", pids)
	}
	// exec: in the container's namespaces and walls, its exit code back;
	// detached, it runs on with its pid in the pid file.
	out, err := r.run("exec", id, "sh", "-c", `hostname; grep Seccomp: /proc/self/status; ls /started-in-place; exit 5`)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 || !strings.Contains(out, "oci-test\n") || !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "/started-in-place") {
		t.Errorf("exec: %v\n%s", err, out)
	}
	execPid := filepath.Join(t.TempDir(), "exec.pid")
	r.must("exec", "--detach", "--pid-file", execPid, id, "sleep", "3600")
	execPidText, _ := os.ReadFile(execPid)
	json.Unmarshal([]byte(r.must("ps", "--format", "json", id)), &pids)
	if !slices.Contains(pids, atoi(string(execPidText))) {
		t.Errorf("the detached exec's pid %q is not among the container's %v", execPidText, pids)
	}
	r.must("pause", id)
	if s := r.state(id); s.Status != "paused" {
		t.Errorf("after pause: %s", s.Status)
	}
	r.must("resume", id)
	if out, err := r.run("delete", id); err == nil || !strings.Contains(out, "--force") {
		t.Errorf("delete of a running container: %v %s", err, out)
	}
	r.must("kill", id, "KILL")
	if !testbin.Eventually(20*time.Second, func() bool { return r.state(id).Status == specs.StateStopped }) {
		t.Fatalf("still %s after SIGKILL", r.state(id).Status)
	}
	r.must("delete", id)
	if _, err := os.Stat(filepath.Join(r.root, id)); !os.IsNotExist(err) {
		t.Errorf("state left after delete: %v", err)
	}
	if cg := memoryCgroup(cfg.Linux.CgroupsPath); cg != "" {
		t.Errorf("cgroup left after delete: %s", cg)
	}
	if out, err := r.run("state", id); err == nil {
		t.Errorf("state of a deleted container: %s", out)
	}
}

// TestMountParentsMade: a tmpfs whose target's parents the rootfs lacks
// is mounted, the parents made (runtime-tools' mounts case).
func TestMountParentsMade(t *testing.T) {
	r := newRuntime(t)
	cfg := config("sh", "-c", `grep ' /new/deep/tmp tmpfs ' /proc/self/mounts && echo mounted`)
	cfg.Mounts = append(cfg.Mounts, specs.Mount{Destination: "/new/deep/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid"}})
	out, err := r.run("run", "--bundle", bundle(t, cfg), fmt.Sprintf("mnt-%d", os.Getpid()))
	if err != nil || !strings.Contains(out, "mounted") {
		t.Fatalf("tmpfs at /new/deep/tmp: %v\n%s", err, out)
	}
}

func TestRunExitCodeAndWalls(t *testing.T) {
	r := newRuntime(t)
	b := bundle(t, config("sh", "-c", `hostname; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; cat /proc/kcore 2>&1 | head -c 20; echo; exit 7`))
	out, err := r.run("run", "--bundle", b, fmt.Sprintf("run-%d", os.Getpid()))
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("exit: %v, want 7\n%s", err, out)
	}
	for _, want := range []string{"oci-test\n", "Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t00000000a80425fb"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ELF") {
		t.Errorf("/proc/kcore is readable:\n%s", out)
	}
}

func TestBadConfigLeavesNothing(t *testing.T) {
	r := newRuntime(t)
	cfg := config("true")
	cfg.Linux.Sysctl = map[string]string{"vm.overcommit_memory": "1"}
	id := fmt.Sprintf("bad-%d", os.Getpid())
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	log := filepath.Join(t.TempDir(), "log.json")
	out, err := r.run("--log", log, "--log-format", "json", "create", "--bundle", bundle(t, cfg), id)
	if err == nil || !strings.Contains(out, "linux.sysctl vm.overcommit_memory") {
		t.Fatalf("create with a host sysctl: %v\n%s", err, out)
	}
	var entry struct{ Level, Msg string }
	b, _ := os.ReadFile(log)
	if json.Unmarshal(bytes.TrimSpace(b), &entry); entry.Level != "error" || !strings.Contains(entry.Msg, "linux.sysctl") {
		t.Errorf("log: %q", b)
	}
	if _, err := os.Stat(filepath.Join(r.root, id)); !os.IsNotExist(err) {
		t.Errorf("state left: %v", err)
	}
	if cg := memoryCgroup(cfg.Linux.CgroupsPath); cg != "" {
		t.Errorf("cgroup left: %s", cg)
	}
	// A command that is not in the root fails create, not start.
	cfg = config("no-such-command")
	out, err = r.run("create", "--bundle", bundle(t, cfg), id)
	if err == nil || !strings.Contains(out, "no-such-command: not found") {
		t.Fatalf("create of a missing command: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(r.root, id)); !os.IsNotExist(err) {
		t.Errorf("state left: %v", err)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(strings.TrimSpace(s)); return n }

// TestConfigSeccompProfileIsStacked: the config's own profile applies to
// the command (a mkdir it refuses fails) and tine's stays (two filters).
func TestConfigSeccompProfileIsStacked(t *testing.T) {
	r := newRuntime(t)
	cfg := config("sh", "-c", `grep -E '^Seccomp_filters:' /proc/self/status; mkdir /tmp/refused && echo made`)
	cfg.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"mkdir", "mkdirat"}, Action: specs.ActErrno}}}
	out, _ := r.run("run", "--bundle", bundle(t, cfg), fmt.Sprintf("seccomp-%d", os.Getpid()))
	if !strings.Contains(out, "Seccomp_filters:\t2") || strings.Contains(out, "made") || !strings.Contains(out, "not permitted") {
		t.Fatalf("want two filters and mkdir refused:\n%s", out)
	}
	// The negative control: without the profile, the same mkdir works.
	cfg.Linux.Seccomp = nil
	out, _ = r.run("run", "--bundle", bundle(t, cfg), fmt.Sprintf("seccomp-%d", os.Getpid()))
	if !strings.Contains(out, "made") {
		t.Fatalf("mkdir without the profile:\n%s", out)
	}
}

// TestSysctlsInTheContainersNamespaces: namespaced sysctls are set in the
// container's network and IPC namespaces, and the host's stay as they
// were (the negative control: the host's values differ from those set).
func TestSysctlsInTheContainersNamespaces(t *testing.T) {
	r := newRuntime(t)
	host := func(k string) string { b, _ := os.ReadFile("/proc/sys/" + k); return strings.TrimSpace(string(b)) }
	shm, port := host("kernel/shmmni"), host("net/ipv4/ip_unprivileged_port_start")
	if shm == "1234" || port == "81" {
		t.Fatalf("the host already has the values the test sets (%s, %s)", shm, port)
	}
	cfg := config("sh", "-c", `echo "shmmni $(cat /proc/sys/kernel/shmmni) port $(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)"`)
	cfg.Linux.Sysctl = map[string]string{"kernel.shmmni": "1234", "net.ipv4.ip_unprivileged_port_start": "81"}
	out, err := r.run("run", "--bundle", bundle(t, cfg), fmt.Sprintf("sysctl-%d", os.Getpid()))
	if err != nil || !strings.Contains(out, "shmmni 1234 port 81") {
		t.Fatalf("sysctls inside: %v\n%s", err, out)
	}
	if host("kernel/shmmni") != shm || host("net/ipv4/ip_unprivileged_port_start") != port {
		t.Errorf("the host's sysctls changed")
	}
}

// TestUpdate changes a running container's limits (runc update, flags and
// --resources - as containerd's shim sends it) and refuses what tine
// does not enforce.
func TestUpdate(t *testing.T) {
	r := newRuntime(t)
	id := fmt.Sprintf("update-%d", os.Getpid())
	cfg := config("sleep", "3600")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	r.must("create", "--bundle", bundle(t, cfg), id)
	t.Cleanup(func() { r.run("delete", "--force", id) })
	r.must("start", id)
	cg := memoryCgroup(cfg.Linux.CgroupsPath)
	read := func(dir, f string) string {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		return strings.TrimSpace(string(b))
	}
	limitFile := "memory.limit_in_bytes"
	if _, err := os.Stat(filepath.Join(cg, limitFile)); err != nil {
		limitFile = "memory.max"
	}
	if got := read(cg, limitFile); got != strconv.Itoa(96<<20) {
		t.Fatalf("memory limit before update %q", got)
	}
	r.must("update", "--memory", strconv.Itoa(48<<20), "--pids-limit", "77", id)
	if got := read(cg, limitFile); got != strconv.Itoa(48<<20) {
		t.Errorf("memory limit after update %q, want %d", got, 48<<20)
	}
	pidsDir := strings.Replace(cg, "/memory/", "/pids/", 1)
	if got := read(pidsDir, "pids.max"); got != "77" {
		t.Errorf("pids.max after update %q", got)
	}
	// containerd's shim: the resources as JSON on stdin.
	cmd := exec.Command(r.link, "--root", r.root, "update", "--resources", "-", id)
	cmd.Stdin = strings.NewReader(`{"cpu":{"shares":300,"quota":20000,"period":100000}}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update --resources -: %v\n%s", err, out)
	}
	cpuDir := ""
	for _, d := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"} {
		if _, err := os.Stat(d + cfg.Linux.CgroupsPath); err == nil {
			cpuDir = d + cfg.Linux.CgroupsPath
			break
		}
	}
	if s, w := read(cpuDir, "cpu.shares"), read(cpuDir, "cpu.weight"); s != "300" && w != "12" {
		t.Errorf("cpu weight after update: shares %q, weight %q (in %s)", s, w, cpuDir)
	}
	if q, m := read(cpuDir, "cpu.cfs_quota_us"), read(cpuDir, "cpu.max"); q != "20000" && m != "20000 100000" {
		t.Errorf("cpu quota after update: %q / %q", q, m)
	}
	out, err := r.run("update", "--resources", writeFile(t, `{"blockIO":{"weight":100}}`), id)
	if err == nil || !strings.Contains(out, "blockIO") {
		t.Errorf("update of blockIO: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJoinNamespacesByPath: a container joins another's uts and ipc
// namespaces by path (as a pod's containers join the pause container's):
// it has that one's host name, which it did not set, and the same
// namespaces; one of another type at the path is refused.
func TestJoinNamespacesByPath(t *testing.T) {
	r := newRuntime(t)
	pod := fmt.Sprintf("pod-%d", os.Getpid())
	cfg := config("sleep", "3600")
	cfg.Hostname = "the-pod"
	cfg.Linux.CgroupsPath = "/tine-test/" + pod
	r.must("create", "--bundle", bundle(t, cfg), pod)
	t.Cleanup(func() { r.run("delete", "--force", pod) })
	r.must("start", pod)
	pid := r.state(pod).Pid

	member := config("sh", "-c", `echo "host $(hostname) ipc $(readlink /proc/self/ns/ipc) uts $(readlink /proc/self/ns/uts)"`)
	member.Hostname = ""
	for i, n := range member.Linux.Namespaces {
		if n.Type == specs.IPCNamespace || n.Type == specs.UTSNamespace {
			member.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/%s", pid, n.Type)
		}
	}
	out, err := r.run("run", "--bundle", bundle(t, member), pod+"-member")
	want := fmt.Sprintf("host the-pod ipc %s uts %s", nsLink(pid, "ipc"), nsLink(pid, "uts"))
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("member: %v\n%s\nwant %q", err, out, want)
	}
	if nsLink(pid, "ipc") == nsLink(os.Getpid(), "ipc") {
		t.Fatal("the pod's ipc namespace is the host's: the check proves nothing")
	}
	for i, n := range member.Linux.Namespaces {
		if n.Type == specs.IPCNamespace {
			member.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/net", pid)
		}
	}
	if out, err := r.run("run", "--bundle", bundle(t, member), pod+"-wrong"); err == nil || !strings.Contains(out, "not a namespace of type ipc") {
		t.Errorf("a net namespace as the ipc one: %v\n%s", err, out)
	}
}

// TestPreserveFDs: --preserve-fds N passes descriptors 3 to 3+N-1 to the
// container's command as its own 3 to 3+N-1, and no other.
func TestPreserveFDs(t *testing.T) {
	r := newRuntime(t)
	dir := t.TempDir()
	var files []*os.File
	for _, n := range []string{"three", "four", "five"} {
		f, err := os.Create(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	cfg := config("sh", "-c", `echo to-three >&3; echo to-four >&4; echo to-five >&5 || echo five-closed; ls /proc/self/fd | tr '\n' ' '`)
	out, err := os.CreateTemp(dir, "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(r.link, "--root", r.root, "run", "--preserve-fds", "2", "--bundle", bundle(t, cfg), fmt.Sprintf("fds-%d", os.Getpid()))
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = out, out, files // 3, 4 and 5; 5 is not preserved
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	if err != nil || !strings.Contains(string(b), "five-closed") {
		t.Fatalf("run --preserve-fds 2: %v\n%s", err, b)
	}
	for n, want := range map[string]string{"three": "to-three\n", "four": "to-four\n", "five": ""} {
		if got, _ := os.ReadFile(filepath.Join(dir, n)); string(got) != want {
			t.Errorf("%s got %q, want %q (output %s)", n, got, want, b)
		}
	}
}
