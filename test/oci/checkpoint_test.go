package oci_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tine-run/tine/internal/probe"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// counterScript counts in its memory (n, and a nonce drawn at its start),
// appending each count to /count in the container's root with the
// outcome of a mknod of a block device, which CAP_MKNOD allows and
// Landlock refuses (EACCES), and to its stdout when stdout is set.
const counterScript = `nonce=$RANDOM$RANDOM$RANDOM; n=0
while :; do
  n=$((n+1))
  w=$(mknod /mk b 7 0 2>&1 && rm -f /mk && echo made)
  echo "$nonce $n ${w##*: }" >> /count
  [ -n "$TO_STDOUT" ] && echo "$nonce $n"
  sleep 0.1
done`

// count is one line of /count.
type count struct {
	nonce string
	n     int
	mknod string
}

func readCounts(t *testing.T, path string) []count {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []count
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		nonce, rest, _ := strings.Cut(sc.Text(), " ")
		n, mknod, _ := strings.Cut(rest, " ")
		v, err := strconv.Atoi(n)
		if err != nil {
			continue // a line being written
		}
		out = append(out, count{nonce, v, mknod})
	}
	return out
}

// requireCRIU skips without a usable criu (strict where TINE_STRICT says
// criu: CI installs it with scripts/install-criu).
func requireCRIU(t *testing.T) {
	require.CRIU(t, probe.MinCRIU)
	require.Binary(t, "nsenter")
}

// procStatus is the fields of a host process's /proc status.
func procStatus(pid int) map[string]string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// checkRestoredWalls checks what criu carried of each restored process's
// walls and that tine's Landlock domain holds again: Seccomp 2 (tine's
// filters), no_new_privs, CAP_MKNOD still effective (so mknod's EACCES in
// the counts is Landlock's, not a missing capability's).
func checkRestoredWalls(t *testing.T, pids []int, counts []count) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatal("no restored process to check")
	}
	for _, pid := range pids {
		st := procStatus(pid)
		if st["Name"] == "" {
			continue // a sleep that ended meanwhile
		}
		capEff, _ := strconv.ParseUint(st["CapEff"], 16, 64)
		if st["Seccomp"] != "2" || st["NoNewPrivs"] != "1" || capEff&(1<<27) == 0 {
			t.Errorf("restored process %d (%s): Seccomp %q NoNewPrivs %q CapEff %s, want 2, 1 and CAP_MKNOD", pid, st["Name"], st["Seccomp"], st["NoNewPrivs"], st["CapEff"])
		}
	}
	for _, c := range counts {
		if c.mknod != "Permission denied" {
			t.Errorf("mknod in the restored container at count %d: %q, want Landlock's Permission denied", c.n, c.mknod)
		}
	}
}

// containerPids are the host pids of a container's processes but its PID 1.
func containerPids(t *testing.T, link, root, id string) []int {
	t.Helper()
	b, err := exec.Command(link, "--root", root, "ps", "--format", "json", id).Output()
	if err != nil {
		t.Fatalf("tine-runc ps: %v", err)
	}
	var pids []int
	json.Unmarshal(b, &pids)
	return pids
}

// TestCheckpointRestore: a counter checkpointed with tine-runc checkpoint
// (which stops it, as runc does) and restored into a new container from
// the same bundle continues from its memory: the same nonce, the count
// after the last one it wrote, on the restore's stdout too; with its walls
// (Landlock again, which criu does not carry); and kill and delete leave
// nothing of it.
func TestCheckpointRestore(t *testing.T) {
	r := newRuntime(t)
	requireCRIU(t)
	id := fmt.Sprintf("ckpt-%d", os.Getpid())
	cfg := config("sh", "-c", counterScript)
	cfg.Process.Env = append(cfg.Process.Env, "TO_STDOUT=1")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	b := bundle(t, cfg)
	countFile := filepath.Join(b, "rootfs", "count")
	// The command's stdio are pipes, as containerd's shim gives.
	if out, err := r.runPiped(nil, "create", "--bundle", b, id); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { r.run("delete", "--force", id) })
	r.must("start", id)
	if !testbin.Eventually(20*time.Second, func() bool { return len(readCounts(t, countFile)) >= 3 }) {
		t.Fatalf("the counter never counted: %v", readCounts(t, countFile))
	}
	before := r.state(id).Pid
	beforePids := containerPids(t, r.link, r.root, id)

	images := filepath.Join(t.TempDir(), "images")
	work := filepath.Join(t.TempDir(), "work")
	r.must("checkpoint", "--image-path", images, "--work-path", work, id)
	if !testbin.Eventually(20*time.Second, func() bool { return r.state(id).Status == specs.StateStopped }) {
		t.Fatalf("still %s after checkpoint without --leave-running", r.state(id).Status)
	}
	r.must("delete", id)
	counts := readCounts(t, countFile)
	last := counts[len(counts)-1]
	for _, c := range counts {
		if c.mknod != "Permission denied" {
			t.Fatalf("mknod in the checkpointed container at count %d: %q, want Landlock's Permission denied", c.n, c.mknod)
		}
	}
	for _, pid := range append(beforePids, before) {
		if startTimeAlive(pid) {
			t.Fatalf("process %d of the checkpointed container still runs", pid)
		}
	}
	// The stopped counter stays stopped: nothing counts until restored.
	if again := readCounts(t, countFile); len(again) != len(counts) {
		t.Fatalf("the counter counted on after its checkpoint: %v", again[len(counts):])
	}

	var out lockedBuffer
	pidFile := filepath.Join(t.TempDir(), "pid")
	if msg, err := r.runPiped(&out, "restore", "--detach", "--bundle", b, "--image-path", images, "--work-path", work, "--pid-file", pidFile, "-no-subreaper", id); err != nil {
		t.Fatalf("restore: %v\n%s", err, msg)
	}
	s := r.state(id)
	pidText, _ := os.ReadFile(pidFile)
	if s.Status != specs.StateRunning || strconv.Itoa(s.Pid) != string(pidText) || s.Pid == before {
		t.Fatalf("after restore: %s, pid %d, pid file %q (checkpointed PID 1 %d)", s.Status, s.Pid, pidText, before)
	}
	if !testbin.Eventually(20*time.Second, func() bool { return len(readCounts(t, countFile)) >= len(counts)+3 }) {
		t.Fatalf("the restored counter never counted: %v", readCounts(t, countFile)[len(counts):])
	}
	after := readCounts(t, countFile)[len(counts):]
	// A fresh start would draw another nonce and count from 1.
	if after[0].nonce != last.nonce || after[0].n != last.n+1 {
		t.Fatalf("after restore the counter wrote %+v; the checkpointed one had reached %+v (a fresh start: another nonce, 1)", after[0], last)
	}
	if !testbin.Eventually(20*time.Second, func() bool { return strings.Contains(out.String(), fmt.Sprintf("%s %d\n", last.nonce, last.n+2)) }) {
		t.Errorf("the restored counter's stdout is not restore's: %q", out.String())
	}
	pids := containerPids(t, r.link, r.root, id)
	var restored []int
	for _, p := range pids {
		if p != s.Pid {
			restored = append(restored, p)
		}
	}
	checkRestoredWalls(t, restored, after)
	// exec, kill and delete handle it as any container.
	if got, err := r.run("exec", id, "sh", "-c", "grep -c . /count"); err != nil || atoi(got) < len(counts) {
		t.Errorf("exec into the restored container: %v %q", err, got)
	}
	r.must("kill", id, "KILL")
	if !testbin.Eventually(20*time.Second, func() bool { return r.state(id).Status == specs.StateStopped }) {
		t.Fatalf("the restored container is still %s after SIGKILL", r.state(id).Status)
	}
	r.must("delete", id)
	for _, p := range append(restored, s.Pid) {
		if startTimeAlive(p) {
			t.Errorf("process %d of the restored container still runs", p)
		}
	}
	if cg := memoryCgroup(cfg.Linux.CgroupsPath); cg != "" {
		t.Errorf("cgroup left after delete: %s", cg)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), b) {
		t.Errorf("a mount of the bundle is left:\n%s", mi)
	}
}

// TestCheckpointRefusals: options tine cannot honour, and images that are
// not tine-runc's, are refused with the reason, and a refused restore
// leaves no container.
func TestCheckpointRefusals(t *testing.T) {
	r := newRuntime(t)
	id := fmt.Sprintf("ckref-%d", os.Getpid())
	cfg := config("sleep", "3600")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	b := bundle(t, cfg)
	r.must("create", "--bundle", b, id)
	t.Cleanup(func() { r.run("delete", "--force", id) })
	r.must("start", id)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tcp-established"}, "--tcp-established is not supported"},
		{[]string{"--pre-dump"}, "--pre-dump is not supported"},
		{[]string{"--lazy-pages"}, "--lazy-pages is not supported"},
		{[]string{"--manage-cgroups-mode", "full"}, "--manage-cgroups-mode full is not supported"},
		{[]string{"--parent-path", "../parent"}, "--parent-path is not supported"},
	} {
		args := append([]string{"checkpoint", "--image-path", filepath.Join(t.TempDir(), "img")}, c.args...)
		if out, err := r.run(append(args, id)...); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("checkpoint %v: %v %q, want %q", c.args, err, out, c.want)
		}
	}
	if s := r.state(id); s.Status != specs.StateRunning {
		t.Errorf("a refused checkpoint left the container %s", s.Status)
	}
	// A directory that is no tine-runc checkpoint (runc's images, or none).
	other := fmt.Sprintf("ckref2-%d", os.Getpid())
	out, err := r.run("restore", "--detach", "--bundle", b, "--image-path", t.TempDir(), other)
	if err == nil || !strings.Contains(out, "no checkpoint made by tine-runc") {
		t.Errorf("restore from an empty directory: %v %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(r.root, other)); !os.IsNotExist(err) {
		t.Errorf("a refused restore left state: %v", err)
	}
}

// runPiped runs tine-runc with pipes as its stdout and stderr, as
// containerd's shim runs it, and returns once it exits (not when the
// container it made, which keeps the pipes, ends). What comes after its
// exit goes to rest (when not nil), which gets all of it.
func (r *runtime) runPiped(rest io.Writer, args ...string) (string, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(r.link, append([]string{"--root", r.root}, args...)...)
	cmd.Stdout, cmd.Stderr = pw, pw
	var own lockedBuffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if rest == nil {
			rest = io.Discard
		}
		io.Copy(io.MultiWriter(&own, rest), pr)
		pr.Close()
	}()
	r.t.Cleanup(func() { pr.Close() })
	err = cmd.Run()
	pw.Close()
	return own.String(), err
}

// lockedBuffer is a bytes.Buffer safe for one writer and other readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// preloadC is a library that, once loaded, leaves a file saying so: at
// $PWN_OUT, else /preload-ran in its process's root.
const preloadC = `#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void ran(void) {
	const char *out = getenv("PWN_OUT");
	int fd = open(out ? out : "/preload-ran", O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) { write(fd, "ran as root\n", 12); close(fd); }
}`

// TestCheckpointRefusesLoaderPreload: criu runs as root outside the
// container's walls, inside its mount namespace, and its dynamic loader
// reads /etc/ld.so.preload there. A container that names its own library
// in that file would run code in criu at a checkpoint; tine refuses the
// checkpoint instead, and the library never runs.
func TestCheckpointRefusesLoaderPreload(t *testing.T) {
	r := newRuntime(t)
	requireCRIU(t)
	require.Binary(t, "gcc")
	id := fmt.Sprintf("ckpre-%d", os.Getpid())
	cfg := config("sh", "-c", "echo /pwn.so > /etc/ld.so.preload; echo planted; exec sleep 3600")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	b := bundle(t, cfg)
	rootfs := filepath.Join(b, "rootfs")
	src := filepath.Join(t.TempDir(), "pwn.c")
	os.WriteFile(src, []byte(preloadC), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(rootfs, "pwn.so"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	// Negative control: the library runs wherever a loader loads it.
	ctl := filepath.Join(t.TempDir(), "ctl")
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{"LD_PRELOAD=" + filepath.Join(rootfs, "pwn.so"), "PWN_OUT=" + ctl}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ctl); err != nil {
		t.Fatalf("the library did not run when preloaded on the host, so its absence below proves nothing: %v", err)
	}
	os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
	if out, err := r.runPiped(nil, "create", "--bundle", b, id); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { r.run("delete", "--force", id) })
	r.must("start", id)
	if !testbin.Eventually(20*time.Second, func() bool { _, err := os.Stat(filepath.Join(rootfs, "etc/ld.so.preload")); return err == nil }) {
		t.Fatal("the container never wrote its /etc/ld.so.preload")
	}
	out, err := r.run("checkpoint", "--leave-running", "--image-path", filepath.Join(t.TempDir(), "img"), id)
	if _, serr := os.Stat(filepath.Join(rootfs, "preload-ran")); serr == nil {
		t.Errorf("the container's library ran inside criu, as root outside its walls (checkpoint: %v %s)", err, out)
	}
	if err == nil || !strings.Contains(out, "/etc/ld.so.preload") {
		t.Errorf("checkpoint of a container with /etc/ld.so.preload: %v %q, want it refused naming the file", err, out)
	}
	if s := r.state(id); s.Status != specs.StateRunning {
		t.Errorf("after the refused checkpoint the container is %s", s.Status)
	}
}

// TestContainerdCheckpointRestore goes containerd's own way: ctr
// checkpoints the task (pausing it, tine-runc checkpoint --leave-running,
// the images tarred into containerd's content store with the rw layer)
// and restores it into a new container from that checkpoint image
// (extracted, tine-runc restore by the shim). The counter continues from
// its memory over the restored rw layer, behind its walls, and kill and
// removal leave nothing of it.
func TestContainerdCheckpointRestore(t *testing.T) {
	c := startContainerd(t)
	requireCRIU(t)
	link := runcLink(t)
	const ref = "tine.test/busybox:latest"
	if err := c.ImportBusybox(ref); err != nil {
		t.Fatal(err)
	}
	stateRoot := filepath.Join("/run/containerd/runc", c.Namespace)
	state := func() (s specs.State) {
		b, _ := exec.Command(link, "--root", stateRoot, "state", "ck").Output()
		json.Unmarshal(b, &s)
		return s
	}
	if out, err := c.Ctr("run", "-d", "--runc-binary", link, ref, "ck", "sh", "-c", counterScript); err != nil {
		t.Fatalf("ctr run -d: %v\n%s", err, out)
	}
	countFile := func() string { return filepath.Join(state().Bundle, "rootfs", "count") }
	if !testbin.Eventually(20*time.Second, func() bool { return len(readCounts(t, countFile())) >= 3 }) {
		t.Fatalf("the counter never counted: %v", readCounts(t, countFile()))
	}
	first := state()
	firstPids := containerPids(t, link, stateRoot, "ck")
	const ckRef = "tine.test/ck:1"
	if out, err := c.Ctr("container", "checkpoint", "--rw", "--task", "ck", ckRef); err != nil {
		t.Fatalf("ctr container checkpoint: %v\n%s", err, out)
	}
	atCheckpoint := len(readCounts(t, countFile()))
	if s := state(); s.Status != specs.StateRunning {
		t.Errorf("after ctr's checkpoint (which leaves it running) the container is %s", s.Status)
	}
	// The first container goes; its checkpoint image stays.
	if out, err := c.Ctr("task", "kill", "-s", "SIGKILL", "ck"); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, out)
	}
	if !testbin.Eventually(20*time.Second, func() bool { out, _ := c.Ctr("task", "ls"); return strings.Contains(out, "STOPPED") }) {
		t.Fatal("the checkpointed container never stopped")
	}
	c.Ctr("task", "rm", "ck")
	if out, err := c.Ctr("container", "rm", "ck"); err != nil {
		t.Fatalf("ctr container rm: %v\n%s", err, out)
	}
	for _, pid := range append(firstPids, first.Pid) {
		if startTimeAlive(pid) {
			t.Fatalf("process %d of the first container still runs", pid)
		}
	}

	if out, err := c.Ctr("container", "restore", "--rw", "--live", "ck", ckRef); err != nil {
		// The task stays created with no process: task rm -f (containerd's
		// cleanup) would wait for its exit forever, a plain rm removes it.
		c.Ctr("task", "rm", "ck")
		c.Ctr("container", "rm", "ck")
		t.Fatalf("ctr container restore: %v\n%s", err, out)
	}
	restored := state()
	if restored.Status != specs.StateRunning || restored.Pid == first.Pid {
		t.Fatalf("after ctr's restore: %+v (first PID 1 %d)", restored, first.Pid)
	}
	if out, _ := c.Ctr("task", "ls"); !strings.Contains(out, "RUNNING") {
		t.Errorf("ctr task ls after restore:\n%s", out)
	}
	var counts []count
	if !testbin.Eventually(20*time.Second, func() bool { counts = readCounts(t, countFile()); return len(counts) >= atCheckpoint+3 }) {
		t.Fatalf("the restored counter never counted on: %d counts, %d at the checkpoint", len(counts), atCheckpoint)
	}
	// One nonce throughout (a fresh start draws another, and counts from
	// 1), each count one more than the last but once: containerd takes
	// the rw layer before the task's dump, and for criu the paused
	// container is thawed, so the counter may count once more in between.
	gaps := 0
	for i, c := range counts {
		if c.nonce != counts[0].nonce {
			t.Fatalf("count %d has nonce %s, the first %s: not the checkpointed counter's memory\n%v", i, c.nonce, counts[0].nonce, counts)
		}
		if i > 0 && c.n != counts[i-1].n+1 {
			if gaps++; c.n != counts[i-1].n+2 || gaps > 1 {
				t.Fatalf("the counts jump from %d to %d: %v", counts[i-1].n, c.n, counts)
			}
		}
	}
	pids := containerPids(t, link, stateRoot, "ck")
	var procs []int
	for _, p := range pids {
		if p != restored.Pid {
			procs = append(procs, p)
		}
	}
	checkRestoredWalls(t, procs, counts)
	out, err := c.Ctr("task", "exec", "--exec-id", "x1", "ck", "sh", "-c", "grep -c . /count; grep Seccomp: /proc/self/status")
	if err != nil || atoi(strings.Fields(out + " 0")[0]) < atCheckpoint || !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("ctr task exec into the restored container: %v\n%s", err, out)
	}
	if out, err := c.Ctr("task", "kill", "-s", "SIGKILL", "ck"); err != nil {
		t.Fatalf("ctr task kill: %v\n%s", err, out)
	}
	if !testbin.Eventually(20*time.Second, func() bool { out, _ := c.Ctr("task", "ls"); return strings.Contains(out, "STOPPED") }) {
		out, _ := c.Ctr("task", "ls")
		t.Fatalf("the restored container never stopped:\n%s", out)
	}
	if out, err := c.Ctr("task", "rm", "ck"); err != nil {
		t.Fatalf("ctr task rm: %v\n%s", err, out)
	}
	c.Ctr("container", "rm", "ck")
	if _, err := os.Stat(filepath.Join(stateRoot, "ck")); !os.IsNotExist(err) {
		t.Errorf("tine-runc state left: %v", err)
	}
	if cg := memoryCgroup("/" + c.Namespace + "/ck"); cg != "" {
		t.Errorf("cgroup left: %s", cg)
	}
	for _, pid := range append(procs, restored.Pid) {
		if startTimeAlive(pid) {
			t.Errorf("process %d of the restored container still runs", pid)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), restored.Bundle) {
		t.Errorf("a mount of the restored bundle is left:\n%s", mi)
	}
}

// TestCheckpointRestoreFileStdio: a container whose stdio are files of the
// host (the host's /dev/null as stdin, a file appended to as stdout, as
// tine-runc run >>file gives) restores with restore's own files there: criu reopens such
// a file, which the restored container's Landlock domain allows for
// those files alone.
func TestCheckpointRestoreFileStdio(t *testing.T) {
	r := newRuntime(t)
	requireCRIU(t)
	id := fmt.Sprintf("ckfile-%d", os.Getpid())
	cfg := config("sh", "-c", counterScript)
	cfg.Process.Env = append(cfg.Process.Env, "TO_STDOUT=1")
	cfg.Linux.CgroupsPath = "/tine-test/" + id
	b := bundle(t, cfg)
	countFile := filepath.Join(b, "rootfs", "count")
	if msg, err := r.runTo(filepath.Join(t.TempDir(), "created.out"), "create", "--bundle", b, id); err != nil {
		t.Fatalf("create: %v\n%s", err, msg)
	}
	t.Cleanup(func() { r.run("delete", "--force", id) })
	r.must("start", id)
	if !testbin.Eventually(20*time.Second, func() bool { return len(readCounts(t, countFile)) >= 2 }) {
		t.Fatalf("the counter never counted: %v", readCounts(t, countFile))
	}
	images := filepath.Join(t.TempDir(), "images")
	r.must("checkpoint", "--image-path", images, id)
	if !testbin.Eventually(20*time.Second, func() bool { return r.state(id).Status == specs.StateStopped }) {
		t.Fatalf("still %s after checkpoint", r.state(id).Status)
	}
	r.must("delete", id)
	counts := readCounts(t, countFile)
	last := counts[len(counts)-1]
	out := filepath.Join(t.TempDir(), "restored.out")
	if msg, err := r.runTo(out, "restore", "--detach", "--bundle", b, "--image-path", images, id); err != nil {
		t.Fatalf("restore: %v\n%s", err, msg)
	}
	want := fmt.Sprintf("%s %d\n", last.nonce, last.n+1)
	if !testbin.Eventually(20*time.Second, func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), want) }) {
		b, _ := os.ReadFile(out)
		t.Errorf("the restored counter's stdout, restore's file, has %q; want %q in it", b, want)
	}
	var procs []int
	for _, p := range containerPids(t, r.link, r.root, id) {
		if p != r.state(id).Pid {
			procs = append(procs, p)
		}
	}
	checkRestoredWalls(t, procs, readCounts(t, countFile)[len(counts):])
	r.must("kill", id, "KILL")
	if !testbin.Eventually(20*time.Second, func() bool { return r.state(id).Status == specs.StateStopped }) {
		t.Fatalf("the restored container is still %s after SIGKILL", r.state(id).Status)
	}
	r.must("delete", id)
}

// runTo runs tine-runc with its stdout and stderr appending to the file
// out, which a container's command keeps as its own, and the host's
// /dev/null as stdin.
func (r *runtime) runTo(out string, args ...string) (string, error) {
	// Appending: criu restores a file held for writing only so, or when
	// its size is the dumped one.
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(r.link, append([]string{"--root", r.root}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	b, _ := os.ReadFile(out)
	return string(b), err
}

// TestCRICheckpointUnimplemented records what a kubelet's checkpoint
// (CRI CheckpointContainer, crictl checkpoint) gets from containerd 1.6's
// CRI plugin with the tine handler: Unimplemented, before any runtime is
// asked. PATH's containerd is Debian 12's: containerd 2.x implements it,
// and TestCRICheckpoint runs it there.
func TestCRICheckpointUnimplemented(t *testing.T) {
	p := startCRIPod(t)
	id := p.container("ckpt", "echo up; exec sleep 3600", map[string]any{
		"security_context": map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 1, "ipc": 0}}})
	p.logsUntil(id, "up")
	out, err := p.run("checkpoint", "--export", filepath.Join(t.TempDir(), "ckpt.tar"), id)
	if err == nil || !strings.Contains(out, "Unimplemented") {
		t.Fatalf("crictl checkpoint: %v\n%s", err, out)
	}
	if st := p.must("inspect", "-o", "go-template", "--template", "{{.status.state}}", id); !strings.Contains(st, "RUNNING") {
		t.Errorf("after the refused checkpoint the container is %q", st)
	}
}
