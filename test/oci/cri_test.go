package oci_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/ctrd"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// crictlModule is the cri-tools release crictl is built from (a Go module
// the Go proxy serves; crictl speaks CRI v1, which containerd 1.6 serves).
const crictlModule = "sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0"

// checkpointctlModule reads the kubelet's checkpoint archives (the
// checkpoint-restore project's tool); v1.7.0 needs a go-criu release
// the Go proxy does not serve.
const checkpointctlModule = "github.com/checkpoint-restore/checkpointctl@v1.6.0"

var goTools struct {
	mu    sync.Mutex
	built map[string]string
}

// goTool builds the command of module once per test binary, next to the
// test's tine (in the directory TestMain removes), and returns its path;
// the Go build cache makes later builds a link.
func goTool(t *testing.T, module string) string {
	t.Helper()
	require.Binary(t, "go")
	goTools.mu.Lock()
	defer goTools.mu.Unlock()
	if p, ok := goTools.built[module]; ok {
		return p
	}
	dir := filepath.Dir(tineBin)
	cmd := exec.Command("go", "install", module)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", module, err, out)
	}
	path, _, _ := strings.Cut(module, "@")
	if goTools.built == nil {
		goTools.built = map[string]string{}
	}
	goTools.built[module] = filepath.Join(dir, filepath.Base(path))
	return goTools.built[module]
}

func crictl(t *testing.T) string { return goTool(t, crictlModule) }

// criPod is a containerd with its CRI plugin, a `tine` runtime handler
// running tine-runc, and a host-network pod sandbox made through crictl
// (runp), as a kubelet makes one.
type criPod struct {
	t               *testing.T
	c               *ctrd.Containerd
	crictl, runc    string
	dir, id, cgRoot string
	podConfig       string
	// image is what container runs: the imported busybox unless changed.
	image string
}

const (
	criPause   = "tine.test/pause:1"
	criBusybox = "tine.test/busybox:latest"
)

// startCRIPod starts the pod on PATH's containerd (Debian's 1.6).
func startCRIPod(t *testing.T) *criPod { return startCRIPodOn(t, ctrd.CRI{}) }

// startCRIPodOn starts the pod on the containerd in cri.BinDir (PATH's
// when empty) with cri.Path first on its PATH; the handler and the pause
// image are the pod's.
func startCRIPodOn(t *testing.T, cri ctrd.CRI) *criPod {
	require.Root(t)
	require.Feature(t, "cgroup")
	require.Binary(t, "busybox")
	if cri.BinDir == "" {
		for _, b := range ctrd.Binaries {
			require.Binary(t, b)
		}
	}
	p := &criPod{t: t, crictl: crictl(t), runc: runcLink(t), dir: t.TempDir(), cgRoot: fmt.Sprintf("/tine-cri-%d", os.Getpid()), image: criBusybox}
	cri.Handler, cri.Binary, cri.SandboxImage = "tine", p.runc, criPause
	c, err := ctrd.StartCRI(p.dir, cri)
	if err != nil {
		t.Fatal(err)
	}
	p.c = c
	t.Cleanup(func() {
		c.Stop()
		ctrd.RemoveCgroupTree(p.cgRoot)
	})
	// The pause container waits: busybox's sleep, for as long as the pod lives.
	if err := c.ImportBusybox(criPause, "sleep", "2147483647"); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportBusybox(criBusybox); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(p.dir, "logs"), 0o755)
	// Network NODE (2): host network, no CNI; ipc POD (0): the pod's own,
	// which its containers join by path; pid CONTAINER (1).
	p.podConfig = p.writeJSON("pod.json", map[string]any{
		"metadata":      map[string]any{"name": "tine-pod", "namespace": "default", "uid": fmt.Sprintf("uid-%d", os.Getpid()), "attempt": 1},
		"log_directory": filepath.Join(p.dir, "logs"),
		"linux": map[string]any{"cgroup_parent": p.cgRoot,
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 1, "ipc": 0}}},
	})
	out, err := p.run("runp", "--runtime", "tine", p.podConfig)
	if err != nil {
		t.Fatalf("crictl runp: %v\n%s\n%s", err, out, p.containerdLog())
	}
	p.id = lastLine(out)
	t.Cleanup(func() { p.run("stopp", p.id); p.run("rmp", p.id) })
	return p
}

func (p *criPod) run(args ...string) (string, error) { return p.c.Crictl(p.crictl, args...) }

func (p *criPod) must(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatalf("crictl %v: %v\n%s\n%s", args, err, out, p.containerdLog())
	}
	return out
}

func (p *criPod) writeJSON(name string, v any) string {
	p.t.Helper()
	b, _ := json.Marshal(v)
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// containerdLog is the tail of containerd's log, where the shim reports
// what the runtime said.
func (p *criPod) containerdLog() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "containerd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// container creates and starts a container of the busybox image running
// script, with the given linux section of its CRI config.
func (p *criPod) container(name, script string, linux map[string]any) string {
	p.t.Helper()
	cfg := p.writeJSON(name+".json", map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": p.image},
		"command":  []string{"sh", "-c", script},
		"log_path": name + ".log",
		"linux":    linux,
	})
	id := lastLine(p.must("create", p.id, cfg, p.podConfig))
	p.must("start", id)
	return id
}

// logsUntil waits for marker in the container's log and returns the log.
func (p *criPod) logsUntil(id, marker string) string {
	p.t.Helper()
	var out string
	if !testbin.Eventually(20*time.Second, func() bool { out, _ = p.run("logs", id); return strings.Contains(out, marker) }) {
		p.t.Fatalf("container %s never printed %q:\n%s", id, marker, out)
	}
	return out
}

// runtimePid is the pid tine-runc reports for a container of the pod.
func (p *criPod) runtimePid(id string) int {
	p.t.Helper()
	b, err := exec.Command(p.runc, "--root", filepath.Join(p.c.RuncRoot, ctrd.CRINamespace), "state", id).Output()
	var st struct{ Pid int }
	if err != nil || json.Unmarshal(b, &st) != nil || st.Pid == 0 {
		cfg, _ := os.ReadFile(filepath.Join(p.dir, "state/io.containerd.runtime.v2.task/k8s.io", id, "config.json"))
		p.t.Fatalf("tine-runc state %s: %v %s\nconfig: %s\n%s", id, err, b, cfg, p.containerdLog())
	}
	return st.Pid
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[len(l)-1])
}

func nsLink(pid int, ns string) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
	return l
}

// cgroupFile reads what the container sees at /sys/fs/cgroup: v1's
// hierarchy named dir, or v2's single tree.
const cgroupProbe = `for f in memory/memory.limit_in_bytes memory.max; do test -e /sys/fs/cgroup/$f && echo "memlimit $(cat /sys/fs/cgroup/$f)"; done
for f in cpu,cpuacct/cpu.shares cpu/cpu.shares cpu.weight; do test -e /sys/fs/cgroup/$f && echo "cpuweight $(cat /sys/fs/cgroup/$f)"; done
`

// TestCRIPod drives containerd's CRI plugin with crictl the way a kubelet
// does: a pod sandbox (the pause container) and a container in it, both
// run by tine-runc through the `tine` handler, the container as a
// non-root user with limits, an OOM score and CPU shares; its walls and
// its pod's namespaces are read from inside, exec goes through CRI's
// streaming server, and stopping and removing leave nothing.
func TestCRIPod(t *testing.T) {
	p := startCRIPod(t)
	pausePid := p.runtimePid(p.id)
	script := `grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status
echo "id $(id -u):$(id -g):$(id -G)"
echo "oom $(cat /proc/self/oom_score_adj)"
echo "ipc $(readlink /proc/self/ns/ipc)"
echo "uts $(readlink /proc/self/ns/uts)"
echo "net $(readlink /proc/self/ns/net)"
echo shm-from-walls > /dev/shm/walls && echo shm-written
` + cgroupProbe + `echo walls-done
exec sleep 3600`
	id := p.container("walls", script, map[string]any{
		"resources": map[string]any{"memory_limit_in_bytes": 64 << 20, "cpu_period": 100000, "cpu_quota": 50000, "cpu_shares": 512, "oom_score_adj": 500},
		"security_context": map[string]any{"run_as_user": map[string]any{"value": 1000}, "run_as_group": map[string]any{"value": 1000},
			"supplemental_groups": []int{2000}, "namespace_options": map[string]any{"network": 2, "pid": 1, "ipc": 0}},
	})
	out := p.logsUntil(id, "walls-done")
	m := lines(out)
	want := map[string]string{
		"Seccomp:": "2", "NoNewPrivs:": "1", "id": "1000:1000:1000 2000", "oom": "500", "memlimit": "67108864",
		// The pod's ipc namespace (the pause container's), the host's uts
		// and network namespaces (a host-network pod).
		"ipc": nsLink(pausePid, "ipc"), "uts": nsLink(os.Getpid(), "uts"), "net": nsLink(os.Getpid(), "net"),
	}
	for k, v := range want {
		if strings.TrimSpace(m[k]) != v {
			t.Errorf("%s %q inside, want %q\n%s", k, m[k], v, out)
		}
	}
	if w := strings.TrimSpace(m["cpuweight"]); w != "512" && w != "20" { // v1 shares, or v2's weight for 512
		t.Errorf("cpu weight %q inside, want shares 512\n%s", w, out)
	}
	// The pod's /dev/shm (containerd's, bound into the pause container) is
	// the container's: what it writes there is in the pod's directory.
	shm := filepath.Join(p.dir, "state", "io.containerd.grpc.v1.cri", "sandboxes", p.id, "shm", "walls")
	if b, err := os.ReadFile(shm); err != nil || string(b) != "shm-from-walls\n" || !strings.Contains(out, "shm-written") {
		t.Errorf("the pod's shm %s: %q, %v", shm, b, err)
	}
	if nsLink(pausePid, "ipc") == nsLink(os.Getpid(), "ipc") {
		t.Errorf("the pod's ipc namespace is the host's: the check above proves nothing")
	}
	// The container's PID 1 is tine's reaper, kept at -1000 where the
	// runtime may lower it (CAP_SYS_RESOURCE), not at the command's score.
	cpid := p.runtimePid(id)
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", cpid)); strings.TrimSpace(string(b)) == "500" {
		t.Errorf("the container's PID 1 has the command's oom_score_adj %s", b)
	}

	// Exec through CRI's streaming server runs as the container's user,
	// behind the same walls.
	out, err := p.run("exec", "-s", id, "sh", "-c", `echo "exec $(id -u) $(grep ^Seccomp: /proc/self/status)"`)
	if err != nil || !strings.Contains(out, "exec 1000 Seccomp:\t2") {
		t.Errorf("crictl exec: %v\n%s", err, out)
	}

	// Stop and remove: the runtime's state and the containers' cgroups go.
	p.must("stop", id)
	p.must("rm", id)
	p.must("stopp", p.id)
	p.must("rmp", p.id)
	if entries, _ := os.ReadDir(filepath.Join(p.c.RuncRoot, ctrd.CRINamespace)); len(entries) > 0 {
		t.Errorf("tine-runc state left: %v", entries)
	}
	for _, c := range []string{id, p.id} {
		if cg := memoryCgroup(p.cgRoot + "/" + c); cg != "" {
			t.Errorf("cgroup left: %s", cg)
		}
	}
	for _, pid := range []int{pausePid, cpid} {
		if startTimeAlive(pid) {
			t.Errorf("pid %d still runs", pid)
		}
	}
}

// lines maps "key value..." lines of out to their values.
func lines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			m[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return m
}
