package sandbox

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// spareLayer is a layer on a tmpfs of its own holding one file.
func spareLayer(t testing.TB, name, content string) string {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(dir+"/"+name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// spareCgroups are the directories of a spare's cgroup, in every
// hierarchy (known once it is ready, whether or not PID 1 joined yet).
func spareCgroups(t *testing.T, sp *Spare) []string {
	if sp.sp.group == nil {
		t.Fatal("the spare has no cgroup")
	}
	var dirs []string
	for _, d := range sp.sp.group.Dirs() {
		dirs = append(dirs, d)
	}
	if len(dirs) == 0 {
		t.Fatal("the spare's cgroup has no directory")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the spare's cgroup %s: %v", d, err)
		}
	}
	return dirs
}

// leftDirs are those of dirs still there.
func leftDirs(dirs []string) []string {
	var left []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}

// stageMounts are the daemon's (this test's) mounts at or under the stage
// directory: a spare's stage must never be one of them.
func stageMounts(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], StageDir) {
			out = append(out, l)
		}
	}
	return out
}

func spareParent(t *testing.T) *Sandbox {
	require.Root(t)
	require.Feature(t, "cgroup")
	parent, err := Create(&Spec{Hostname: "parent", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Destroy() })
	return parent
}

func spareSpec(parent *Sandbox) *Spec {
	return &Spec{Hostname: "spare", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent}
}

// A spare fork child exists (its PID 1 in a cgroup of tine's) before it
// has a root, and no stage of it is mounted in the daemon's namespace;
// Complete gives it one over the layers of the moment, on the spec's own
// (both layers' files are there), and it is then an ordinary fork child: its writes land in
// its own upper, not in the parent's root nor in the layers.
func TestForkSpareCompletesOverLateLayers(t *testing.T) {
	parent := spareParent(t)
	top, below := spareLayer(t, "top", "t"), spareLayer(t, "below", "b")
	before := stageMounts(t)
	spec := spareSpec(parent)
	spec.Layers = []string{below}     // an image's: known ahead
	sp, err := CreateSpare(spec, top) // top's mount is kept for Complete
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	if err := unix.Kill(sp.Pid(), 0); err != nil {
		t.Fatalf("the spare's PID 1 %d before Complete: %v", sp.Pid(), err)
	}
	spareCgroups(t, sp)
	if m := stageMounts(t); !slices.Equal(m, before) {
		t.Fatalf("the spare mounted in the daemon's namespace: %q, before %q", m, before)
	}
	child, err := sp.Complete([]string{top})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Destroy()
	if child.Pid() != sp.Pid() {
		t.Fatalf("the completed child's PID 1 is %d, the spare's was %d", child.Pid(), sp.Pid())
	}
	if got := child.Spec().Layers; !slices.Equal(got, []string{top, below}) {
		t.Fatalf("the completed child's layers %q", got)
	}
	out, o := execOutput(t, child, &ExecSpec{Args: []string{"/bin/sh", "-c", "cat /top /below; hostname; echo w > /etc/spare-marker && cat /etc/spare-marker"}})
	if o.ExitCode != 0 || out != "tbspare\nw\n" {
		t.Fatalf("exec in the completed spare: %q %+v", out, o)
	}
	for _, dir := range []string{parent.Root() + "/etc", top + "/etc", below + "/etc"} {
		if _, err := os.Stat(dir + "/spare-marker"); !os.IsNotExist(err) {
			t.Fatalf("the spare's write is in %s: %v", dir, err)
		}
	}
	up, err := child.OpenUpper()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if b, err := os.ReadFile("/proc/self/fd/" + strconv.Itoa(int(up.Fd())) + "/etc/spare-marker"); err != nil || string(b) != "w\n" {
		t.Fatalf("the spare's writable layer (what its snapshot copies) lacks its write: %q %v", b, err)
	}
	if _, err := sp.Complete([]string{top}); err == nil {
		t.Fatal("a second Complete of one spare succeeded")
	}
}

// A spare builds its /proc, /dev and /sys while it waits for its root
// (Plan.buildAhead): before Complete they are mounted under its stage,
// none on its root; once complete, they are the child's, and its root's
// mount is listed with them.
func TestForkSpareBuildsItsKernelTreesAhead(t *testing.T) {
	parent := spareParent(t)
	layer := spareLayer(t, "layer", "a")
	sp, err := CreateSpare(spareSpec(parent), layer)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	ahead := StageDir + "/ahead"
	want := []string{ahead + "/proc proc", ahead + "/dev tmpfs", ahead + "/dev/pts devpts", ahead + "/proc/sys proc", ahead + "/sys sysfs"}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(sp.Pid()) + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if sep := slices.Index(f, "-"); sep > 4 {
				got = append(got, f[4]+" "+f[sep+1])
				if strings.HasPrefix(f[4], StageDir+"/root/") {
					t.Fatalf("the spare mounted on its root before it had one: %s", l)
				}
			}
		}
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(got, w) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spare's mounts before Complete lack some of %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	child, err := sp.Complete([]string{layer})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Destroy()
	shape := mountShape(t, child)
	for _, m := range []string{"/proc rw,nosuid,nodev,noexec,relatime proc", "/dev/pts rw,nosuid,noexec,relatime devpts", "/sys ro,nosuid,nodev,noexec,relatime sysfs", "/proc/sys ro,nosuid,nodev,noexec,relatime proc"} {
		if !strings.Contains(shape, m) {
			t.Fatalf("the completed spare's mounts lack %q:\n%s", m, shape)
		}
	}
}

// mountShape is a sandbox's mount table as an exec sees it: mount point,
// options, type and super options (pids and ids stripped), the layer
// paths in the root overlay's options replaced by their count.
func mountShape(t *testing.T, sb *Sandbox) string {
	out, o := execOutput(t, sb, &ExecSpec{Args: []string{"/bin/cat", "/proc/self/mountinfo"}})
	if o.ExitCode != 0 {
		t.Fatalf("mountinfo: %+v", o)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		sep := slices.Index(f, "-")
		// A lowerdir+ each (the fsconfig of a spare's root) is one
		// lowerdir of as many layers.
		opts := f[sep+3]
		if n := strings.Count(opts, "lowerdir+="); n > 0 {
			opts = regexp.MustCompile(`(lowerdir\+=[^,]*,)+`).ReplaceAllString(opts, "lowerdir="+strings.Repeat(":", n-1)+",")
		}
		super := regexp.MustCompile(`lowerdir=[^,]*|upperdir=[^,]*|workdir=[^,]*|size=\d+k?|nr_inodes=\d+k?`).ReplaceAllStringFunc(opts, func(s string) string {
			k, v, _ := strings.Cut(s, "=")
			return k + "#" + strconv.Itoa(strings.Count(v, ":")+1)
		})
		lines = append(lines, strings.Join([]string{f[4], f[5], f[sep+1], super}, " "))
	}
	// Sorted: a spare builds its /proc, /dev and /sys before its root
	// (Plan.buildAhead), and mountinfo lists mounts in the order they were
	// made.
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// A child made from a spare is walled as one made without: the same mounts
// with the same options (a lowerdir+ layer each is one lowerdir), the
// same capabilities, seccomp and no_new_privs in an exec, its own pid
// namespace nested in the parent's.
func TestForkSpareChildIsWalledAsAnyForkChild(t *testing.T) {
	parent := spareParent(t)
	layer := spareLayer(t, "layer", "l")
	plain := spareSpec(parent)
	plain.Layers = []string{layer}
	made, err := Create(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer made.Destroy()
	sp, err := CreateSpare(spareSpec(parent), layer)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	spared, err := sp.Complete([]string{layer})
	if err != nil {
		t.Fatal(err)
	}
	defer spared.Destroy()
	if a, b := mountShape(t, made), mountShape(t, spared); a != b {
		t.Fatalf("mounts of a fork child:\n%s\nof one made from a spare:\n%s", a, b)
	}
	status := func(sb *Sandbox) string {
		out, o := execOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", "grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status; readlink /proc/self/ns/pid /proc/self/ns/user /proc/self/ns/mnt"}})
		if o.ExitCode != 0 {
			t.Fatalf("status: %q %+v", out, o)
		}
		return out
	}
	a, b := status(made), status(spared)
	strip := regexp.MustCompile(`(pid|user|mnt):\[\d+\]`)
	if strip.ReplaceAllString(a, "$1") != strip.ReplaceAllString(b, "$1") {
		t.Fatalf("an exec in a fork child:\n%s\nin one made from a spare:\n%s", a, b)
	}
	if la, lb := strings.Split(a, "\n"), strings.Split(b, "\n"); len(la) < 4 || slices.ContainsFunc(la[len(la)-4:len(la)-1], func(l string) bool { return slices.Contains(lb, l) }) {
		t.Fatalf("the two children share a pid, user or mount namespace:\n%s\n%s", a, b)
	}
}

// A discarded spare leaves nothing: its PID 1 is gone, its cgroups are
// removed, no stage is mounted in the daemon's namespace, and its own
// mount namespace is freed (no process is in it).
func TestForkSpareDiscardLeavesNothing(t *testing.T) {
	parent := spareParent(t)
	before := stageMounts(t)
	fds := openFDs(t)
	sp, err := CreateSpare(spareSpec(parent))
	if err != nil {
		t.Fatal(err)
	}
	pid, groups := sp.Pid(), spareCgroups(t, sp)
	sp.Discard()
	sp.Discard() // idempotent
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the discarded spare's PID 1 %d: %v, want it gone", pid, err)
	}
	if left := leftDirs(groups); len(left) > 0 {
		t.Fatalf("the discarded spare's cgroups are left: %v", left)
	}
	if m := stageMounts(t); !slices.Equal(m, before) {
		t.Fatalf("a stage is left mounted: %q, before %q", m, before)
	}
	if now := openFDs(t); now != fds {
		t.Fatalf("%d descriptors open after the discard, %d before (the early target made ahead?)", now, fds)
	}
	if _, err := sp.Complete(nil); err == nil {
		t.Fatal("Complete after Discard succeeded")
	}
	<-sp.Done()
}

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A spare goes with its parent: the parent's Destroy does not hang on it,
// its PID 1 is gone and its cgroups removed, and it cannot be completed.
func TestForkSpareDiesWithItsParent(t *testing.T) {
	parent := spareParent(t)
	sp, err := CreateSpare(spareSpec(parent))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	pid, groups := sp.Pid(), spareCgroups(t, sp)
	if err := parent.Destroy(); err != nil {
		t.Fatal(err)
	}
	<-sp.Done()
	if _, err := sp.Complete(nil); err == nil {
		t.Fatal("a spare completed after its parent was destroyed")
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the spare's PID 1 %d after its parent's Destroy: %v, want it gone", pid, err)
	}
	if left := leftDirs(groups); len(left) > 0 {
		t.Fatalf("the spare's cgroups are left: %v", left)
	}
}

// A spare whose PID 1 was killed ends on its own (its start reaps it and
// removes its cgroups); Complete then says it is gone, and the parent
// lives on.
func TestForkSpareWhosePID1Died(t *testing.T) {
	parent := spareParent(t)
	sp, err := CreateSpare(spareSpec(parent))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	pid, groups := sp.Pid(), spareCgroups(t, sp)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sp.Done()
	if _, err := sp.Complete(nil); !errors.Is(err, ErrSandboxGone) {
		t.Fatalf("Complete of a spare whose PID 1 died: %v, want ErrSandboxGone", err)
	}
	if left := leftDirs(groups); len(left) > 0 {
		t.Fatalf("the dead spare's cgroups are left: %v", left)
	}
	if out, o := execOutput(t, parent, &ExecSpec{Args: []string{"/bin/echo", "up"}}); o.ExitCode != 0 || out != "up\n" {
		t.Fatalf("the parent after its spare died: %q %+v", out, o)
	}
}

// A spare's mount namespace keeps of the host's mounts only what it needs:
// a tmpfs mounted on the host before the spare was made, which no layer
// or bind of it lies under, is not in its PID 1's mounts (it is in the
// daemon's: the control), while a kept one is, until the root is
// attached and pivoted to.
func TestForkSpareHoldsNoForeignMount(t *testing.T) {
	parent := spareParent(t)
	foreign, kept := spareLayer(t, "f", "f"), spareLayer(t, "k", "k")
	has := func(pid, dir string) bool {
		b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
				return true
			}
		}
		return false
	}
	if !has("self", foreign) || !has("self", kept) {
		t.Fatalf("the host does not have the test's mounts %s, %s: the check proves nothing", foreign, kept)
	}
	sp, err := CreateSpare(spareSpec(parent), kept)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	pid := strconv.Itoa(sp.Pid())
	if has(pid, foreign) {
		t.Errorf("the spare's PID 1 holds the host's mount %s", foreign)
	}
	if !has(pid, kept) {
		t.Errorf("the spare's PID 1 lacks the kept mount %s", kept)
	}
	child, err := sp.Complete([]string{kept})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Destroy()
	if out, o := execOutput(t, child, &ExecSpec{Args: []string{"/bin/cat", "/k"}}); o.ExitCode != 0 || out != "k" {
		t.Fatalf("the completed spare's layer file: %q %+v", out, o)
	}
}
