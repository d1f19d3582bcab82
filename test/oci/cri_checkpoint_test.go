package oci_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/tine-run/tine/internal/ctrd"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/probe"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// startCRIPod2 is a tine pod on containerd >= 2.0 (strict in CI under
// "containerd2": scripts/install-containerd2), whose CRI plugin
// implements CheckpointContainer, with criu's directory on its PATH (it
// checks criu's version before asking the runtime).
func startCRIPod2(t *testing.T) (*criPod, *imagetest.Registry) {
	require.Feature(t, "containerd2")
	requireCRIU(t)
	dir, _, err := probe.Containerd2Dir()
	if err != nil {
		t.Fatal(err)
	}
	criu, err := probe.CRIUPath()
	if err != nil {
		t.Fatal(err)
	}
	p := startCRIPodOn(t, ctrd.CRI{BinDir: dir, Path: []string{filepath.Dir(criu)}})
	// The container's image comes from a registry (in-process, on a
	// loopback port: plain HTTP), as a kubelet's do: a restore pulls the
	// checkpoint's base image by its digest (containerd 2.1 always does,
	// even when the image is there). /run as images have it: criu reads
	// its kernel cache there at a restore.
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}},
		imagetest.BusyboxLayer(t), imagetest.Layer(t, imagetest.File{Name: "run/", Dir: true, Mode: 0o755}))
	p.image = reg.Push(t, "busybox:1", img)
	p.must("pull", p.image)
	return p, reg
}

// archiveEntries reads a (gzipped) tar file, a checkpoint archive say: its entries' names, and the
// contents of those named in want.
func archiveEntries(t *testing.T, path string, want ...string) (names []string, files map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files = map[string][]byte{}
	var r io.Reader = bufio.NewReader(f)
	if magic, _ := r.(*bufio.Reader).Peek(2); string(magic) == "\x1f\x8b" { // the rw layer is gzipped
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, files
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		names = append(names, name)
		for _, w := range want {
			if name == w {
				b, _ := io.ReadAll(tr)
				files[name] = b
			}
		}
	}
}

// countsIn parses counterScript's stdout lines ("nonce n") out of a CRI
// log (each line "time stream tag text").
func countsIn(log string) []count {
	var out []count
	for _, l := range strings.Split(log, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		f = f[len(f)-2:]
		if n, err := strconv.Atoi(f[1]); err == nil && len(f[0]) > 3 {
			out = append(out, count{nonce: f[0], n: n})
		}
	}
	return out
}

// TestCRICheckpoint is a kubelet's checkpoint API (POST /checkpoint, CRI
// CheckpointContainer) on a container of a `tine` pod, through containerd
// 2.x's CRI plugin with crictl: the archive holds tine-runc's checkpoint
// (its criu images and tine-oci.json, whose command pid is the counter's)
// and containerd's own files (spec, config, status, the rw layer holding
// /count), and the container runs on, as the CRI says (Forensic Container
// Checkpointing leaves it running). Then a kubelet's restore, a
// CreateContainer whose image is the archive, in the same pod: the
// restored counter continues from its memory (the nonce it drew at its
// start, the count after the checkpointed one), behind its walls.
func TestCRICheckpoint(t *testing.T) {
	p, reg := startCRIPod2(t)
	// Host network, the pod's ipc: as TestCRIPod's container; pid
	// CONTAINER (1), so that the counter is the container's command.
	linux := map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 1, "ipc": 0}}}
	// An orphan, which the container's PID 1 adopts, is a second tree for
	// criu: its images go in as tree-1.*.
	id := p.container("counter", "(exec sleep 2147483646 &)\nTO_STDOUT=1\n"+counterScript, linux)
	var before []count
	if !testbin.Eventually(20*time.Second, func() bool { out, _ := p.run("logs", id); before = countsIn(out); return len(before) >= 3 }) {
		t.Fatalf("the counter never counted: %v", before)
	}
	cpid := p.runtimePid(id)
	archive := filepath.Join(t.TempDir(), "counter.tar")
	if out, err := p.run("checkpoint", "--export", archive, id); err != nil {
		t.Fatalf("crictl checkpoint: %v\n%s\n%s", err, out, p.containerdLog())
	}

	// The archive: containerd's files and, under checkpoint/, what
	// tine-runc checkpoint wrote into the shim's image path.
	names, files := archiveEntries(t, archive, "checkpoint/tine-oci.json", "config.dump", "spec.dump", "rootfs-diff.tar")
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, want := range []string{"checkpoint/tine-oci.json", "checkpoint/inventory.img", "checkpoint/pstree.img", "checkpoint/tree-1.pstree.img",
		"rootfs-diff.tar", "spec.dump", "config.dump", "status.dump"} {
		if !have[want] {
			t.Errorf("the archive has no %s: %v", want, names)
		}
	}
	// Negative control: the images are tine-runc's (runc writes no
	// tine-oci.json), of this container's command (tine's PID 1 is not
	// dumped: the command is pid 2 of the container's pid namespace).
	var img struct{ Version, Command int }
	if err := json.Unmarshal(files["checkpoint/tine-oci.json"], &img); err != nil || img.Version < 1 || img.Command != 2 {
		t.Errorf("checkpoint/tine-oci.json: %v %s; want tine-runc's, command pid 2", err, files["checkpoint/tine-oci.json"])
	}
	var cfg struct {
		ID      string `json:"id"`
		Runtime string `json:"runtime"`
	}
	if json.Unmarshal(files["config.dump"], &cfg); cfg.ID != id || cfg.Runtime != "io.containerd.runc.v2" {
		t.Errorf("config.dump: %s; want container %s, the runc shim", files["config.dump"], id)
	}
	if !strings.Contains(string(files["spec.dump"]), p.runc) && !strings.Contains(string(files["spec.dump"]), "counter") {
		t.Errorf("spec.dump is not the counter's spec: %.300s", files["spec.dump"])
	}

	// checkpointctl, which reads one set of criu images per archive, finds
	// the counter's process tree in it: its shell as pid 2.
	tree, err := exec.Command(goTool(t, checkpointctlModule), "inspect", "--ps-tree", archive).CombinedOutput()
	if err != nil || !strings.Contains(string(tree), "[2]  sh") {
		t.Errorf("checkpointctl inspect --ps-tree: %v\n%s", err, tree)
	}

	// The rw layer is the counter's: its /count, in its nonce, behind
	// Landlock (mknod refused) as it counted.
	diff := filepath.Join(t.TempDir(), "rootfs-diff.tar")
	os.WriteFile(diff, files["rootfs-diff.tar"], 0o600)
	_, layer := archiveEntries(t, diff, "count")
	countFile := filepath.Join(t.TempDir(), "count")
	os.WriteFile(countFile, layer["count"], 0o600)
	if c := readCounts(t, countFile); len(c) < len(before) || c[0].nonce != before[0].nonce || c[0].mknod != "Permission denied" {
		t.Errorf("/count in the archive's rw layer: %+v; want the counter's (nonce %s), mknod refused", c, before[0].nonce)
	}

	// The container runs on: the same process, counting on in its memory.
	if st := p.must("inspect", "-o", "go-template", "--template", "{{.status.state}}", id); !strings.Contains(st, "RUNNING") {
		t.Fatalf("after the checkpoint the container is %q", st)
	}
	if got := p.runtimePid(id); got != cpid {
		t.Errorf("after the checkpoint the container's PID 1 is %d, was %d", got, cpid)
	}
	var after []count
	if !testbin.Eventually(20*time.Second, func() bool { out, _ := p.run("logs", id); after = countsIn(out); return len(after) >= len(before)+3 }) {
		t.Fatalf("the counter stopped counting after the checkpoint: %v", after)
	}
	if after[len(after)-1].nonce != before[0].nonce {
		t.Fatalf("another counter after the checkpoint: %v", after)
	}

	// The kubelet's restore, through CreateContainer, is what containerd
	// 2.2.7 turned off by default and 2.4 removed: with a newer containerd
	// (sid moves on) the checkpoint above, the kubelet's checkpoint API, is
	// what is left to test.
	if _, v, err := probe.Containerd2Dir(); err == nil && !restoresViaCreate(v) {
		t.Logf("containerd %s: restore through CreateContainer is off or gone from 2.2.7 on; tested the checkpoint only", v)
		return
	}
	// The kubelet's restore: the original goes, and a container whose
	// image is the archive is created in the pod and started.
	p.must("stop", id)
	p.must("rm", id)
	if startTimeAlive(cpid) {
		t.Fatalf("the checkpointed container's PID 1 %d still runs", cpid)
	}
	restoreCounter(t, p, "restored", archive, linux, before, cpid)

	// The archive as a checkpoint image (an index whose annotation names
	// the checkpointed container, its one layer the archive's files), as
	// a pod spec would name it, pulled from the registry: the same restore.
	ckLayer, err := tarball.LayerFromFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: imagetest.Image(t, v1.Config{}, ckLayer),
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	idx = mutate.Annotations(idx, map[string]string{checkpointAnnotation: "counter"}).(v1.ImageIndex)
	ref, err := name.ParseReference(reg.Host + "/counter-checkpoint:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	p.must("pull", ref.String())
	restoreCounter(t, p, "from-image", ref.String(), linux, before, cpid)
}

// restoresViaCreate says whether containerd version v restores a
// checkpoint through CRI's CreateContainer with its default config: 2.0 up
// to 2.2.6.
func restoresViaCreate(v string) bool {
	var major, minor, patch int
	fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch)
	return major == 2 && (minor < 2 || minor == 2 && patch < 7)
}

// checkpointAnnotation marks a checkpoint image for containerd 2.1's CRI
// (checkpointctl's lib.CheckpointAnnotationName, which it reads).
const checkpointAnnotation = "org.criu.checkpoint.container.name"

// restoreCounter is a kubelet's restore of the checkpointed counter: a
// container created in the pod from image (the archive's path, or a
// checkpoint image), started, checked, stopped and removed. before are
// the counts logged before the checkpoint; cpid the checkpointed PID 1.
func restoreCounter(t *testing.T, p *criPod, name, image string, linux map[string]any, before []count, cpid int) {
	t.Helper()
	rcfg := p.writeJSON(name+".json", map[string]any{
		"metadata": map[string]any{"name": "counter"},
		"image":    map[string]any{"image": image},
		"log_path": name + ".log",
		"linux":    linux,
	})
	rid := lastLine(p.must("create", p.id, rcfg, p.podConfig))
	t.Cleanup(func() { p.run("stop", rid); p.run("rm", rid) })
	// containerd copies the archive's log (as it was at the checkpoint)
	// to the new container's at its creation: what the restored counter
	// logs comes after.
	logFile := filepath.Join(p.dir, "logs", name+".log")
	b, err := os.ReadFile(logFile)
	archived := countsIn(string(b))
	if err != nil || len(archived) < len(before) {
		t.Fatalf("the restored container's log before its start: %v, %d counts; the archive's should be there", err, len(archived))
	}
	p.must("start", rid)
	var restored []count
	if !testbin.Eventually(20*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		restored = countsIn(string(b))[len(archived):]
		return len(restored) >= 3
	}) {
		out, _ := p.run("logs", rid)
		t.Fatalf("%s: the restored counter never counted:\n%s\n%s", name, out, p.containerdLog())
	}
	// Its memory is the checkpointed counter's: the same nonce, and a
	// count at least the one logged before the checkpoint (a fresh start
	// draws another nonce and counts from 1), at most one past the
	// archive's last, consecutive after.
	lo, hi := before[len(before)-1].n, archived[len(archived)-1].n+1
	if r := restored[0]; r.nonce != before[0].nonce || r.n < lo || r.n > hi {
		t.Fatalf("the restored counter starts at %+v; the checkpointed one (nonce %s) was between %d and %d", r, before[0].nonce, lo, hi)
	}
	t.Logf("%s: checkpointed counter %s logged %d..%d; the restored one counts on from %d", name, before[0].nonce, lo, hi-1, restored[0].n)
	for i := 1; i < len(restored); i++ {
		if restored[i].nonce != restored[0].nonce || restored[i].n != restored[i-1].n+1 {
			t.Fatalf("the restored counter's counts: %v", restored)
		}
	}
	rpid := p.runtimePid(rid)
	if rpid == cpid {
		t.Errorf("the restored container's PID 1 is the checkpointed one's (%d)", cpid)
	}
	var procs []int
	for _, pid := range containerPids(t, p.runc, filepath.Join(p.c.RuncRoot, ctrd.CRINamespace), rid) {
		if pid != rpid {
			procs = append(procs, pid)
		}
	}
	checkRestoredWalls(t, procs, nil)
	orphan := false
	for _, pid := range procs {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), "2147483646") {
			orphan = true
		}
	}
	if !orphan {
		t.Errorf("the orphaned sleep (the second tree) was not restored: processes %v", procs)
	}
	// What the restored counter appends to /count (over the archive's rw
	// layer): its nonce, and Landlock's refusal of its mknod.
	out, err := p.run("exec", "-s", rid, "sh", "-c", "grep ^Seccomp: /proc/self/status; tail -n 1 /count")
	if err != nil || !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, before[0].nonce+" ") || !strings.HasSuffix(out, "Permission denied") {
		t.Errorf("crictl exec into the restored container: %v\n%s", err, out)
	}
	p.must("stop", rid)
	p.must("rm", rid)
	for _, pid := range append(procs, rpid) {
		if startTimeAlive(pid) {
			t.Errorf("process %d of the restored container still runs", pid)
		}
	}
	if cg := memoryCgroup(p.cgRoot + "/" + rid); cg != "" {
		t.Errorf("cgroup left: %s", cg)
	}
}
