package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostPathGone checks that the host path p does not exist, removing it
// (and failing) if a run created it.
func hostPathGone(t *testing.T, p, what string) {
	t.Helper()
	if _, err := os.Lstat(p); err == nil {
		os.RemoveAll(p)
		t.Errorf("%s: %s was created on the host", what, p)
	}
}

// minimalRootfs makes a root filesystem holding only sh, cat, ls, echo and
// the libraries they load, so that what a sandbox over it sees comes from
// it alone.
func minimalRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"sh", "cat", "ls", "echo"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("needs %s on the host: %v", name, err)
		}
		copyFile(bin, filepath.Join(root, "bin", name))
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					real, err := filepath.EvalSymlinks(f)
					if err != nil {
						t.Fatal(err)
					}
					copyFile(real, filepath.Join(root, f))
				}
			}
		}
	}
	return root
}

// A bind target whose path crosses a symlink in the base is resolved inside
// the sandbox's root, as the sandbox sees it: the host's /var/run -> /run
// leads to the sandbox's own fresh /run, and an absolute symlink in a
// --rootfs to the rootfs's directory. Before, the target was resolved
// against the host's / when the bind was set up: tine made directories on
// the host as root and the bind never appeared inside.
func TestBindTargetSymlinkStaysInside(t *testing.T) {
	h := setup(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("bound-"+h.marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("host root", func(t *testing.T) {
		// The attempt runs through the host's own symlink: prove it is there
		// and leads to the host's /run.
		if real, err := filepath.EvalSymlinks("/var/run"); err != nil || real != "/run" {
			t.Skipf("needs the host's /var/run to be a symlink to /run: %q, %v", real, err)
		}
		hostRun := "/run/" + h.marker
		if _, err := os.Lstat(hostRun); err == nil {
			t.Fatalf("%s exists before the run", hostRun)
		}
		t.Cleanup(func() { os.RemoveAll(hostRun) })
		for _, ro := range []string{"", ":ro"} {
			r := h.run("run", "--in-process", "-v", src+":/var/run/"+h.marker+ro, "--", "sh", "-c",
				"cat /var/run/"+h.marker+"/f && cat /run/"+h.marker+"/f && echo inside")
			if r.Code != 0 || strings.Count(r.Stdout, "bound-"+h.marker) != 2 || !strings.Contains(r.Stdout, "inside") {
				t.Errorf("-v %s:/var/run/%s%s: want the bind at the sandbox's /run/%s:\n%s", src, h.marker, ro, h.marker, r)
			}
			hostPathGone(t, hostRun, "a bind on /var/run/...")
		}
	})

	t.Run("rootfs", func(t *testing.T) {
		root := minimalRootfs(t)
		hostDir := "/etc/" + h.marker
		if _, err := os.Lstat(hostDir); err == nil {
			t.Fatalf("%s exists before the run", hostDir)
		}
		t.Cleanup(func() { os.RemoveAll(hostDir) })
		// An absolute symlink and one that climbs with ".." past the
		// rootfs: on the host both lead to the host's /etc.
		up := strings.Repeat("../", strings.Count(root, "/")+2) + "etc"
		for name, link := range map[string]string{"abs": "/etc", "up": up} {
			if err := os.Symlink(link, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
			if real, err := filepath.EvalSymlinks(filepath.Join(root, name)); err != nil || real != "/etc" {
				t.Fatalf("the planted %s -> %s does not lead to the host's /etc on the host: %q, %v", name, link, real, err)
			}
			r := h.run("run", "--in-process", "--rootfs", root, "-v", src+":/"+name+"/"+h.marker, "--", "sh", "-c",
				"cat /etc/"+h.marker+"/f && echo inside")
			if r.Code != 0 || !strings.Contains(r.Stdout, "bound-"+h.marker) || !strings.Contains(r.Stdout, "inside") {
				t.Errorf("--rootfs with /%s -> %s, -v %s:/%s/%s: want the bind at the rootfs's /etc/%s:\n%s", name, link, src, name, h.marker, h.marker, r)
			}
			hostPathGone(t, hostDir, "a bind through a --rootfs symlink")
			if entries, _ := os.ReadDir(filepath.Join(root, "etc")); len(entries) != 0 {
				t.Errorf("the rootfs's /etc changed on the host: %d entries", len(entries))
			}
		}
		// A symlink into a tree tine builds itself is refused like the tree.
		os.Symlink("/proc/sys", filepath.Join(root, "knobs"))
		r := h.run("run", "--in-process", "--rootfs", root, "-v", src+":/knobs/x", "--", "true")
		if r.Code != 2 || !strings.Contains(r.Stderr, "/proc") {
			t.Errorf("a bind through a symlink into /proc: want exit 2 naming /proc:\n%s", r)
		}
	})
}

// A sandbox can plant a symlink in a writable bind; a later run that binds
// that path must not bind what it points at (here the host's /root, which
// the sandbox otherwise never sees), but refuse with a usage error that
// says how to bind the real path.
func TestBindSourceSymlinkRefused(t *testing.T) {
	h := setup(t)
	shared := t.TempDir()
	secret := "/root/bindsecret-" + h.marker
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })

	// A first sandbox plants the link through its writable bind.
	r := h.run("run", "--in-process", "-v", shared+":/shared", "--", "ln", "-s", "/root", "/shared/work")
	link := filepath.Join(shared, "work")
	if target, err := os.Readlink(link); r.Code != 0 || err != nil || target != "/root" {
		t.Fatalf("the sandbox could not plant the symlink (so its refusal proves nothing): %q, %v\n%s", target, err, r)
	}
	// On the host the link reaches the host's /root.
	if _, err := os.Stat(filepath.Join(link, filepath.Base(secret))); err != nil {
		t.Fatalf("the planted link does not reach the host's /root on the host: %v", err)
	}
	for _, v := range []string{link + ":/work", link + ":/work:ro"} {
		r = h.run("run", "--in-process", "-v", v, "--", "ls", "-A", "/work")
		if strings.Contains(r.Stdout, filepath.Base(secret)) {
			t.Errorf("-v %s binds the host's /root:\n%s", v, r)
		}
		if r.Code != 2 || !strings.Contains(r.Stderr, "is a symlink") || !strings.Contains(r.Stderr, "bind the real path") {
			t.Errorf("-v %s: want exit 2 saying the source is a symlink and how to bind the real path:\n%s", v, r)
		}
	}
	// The real path binds.
	r = h.run("run", "--in-process", "-v", shared+":/work", "--", "ls", "-A", "/work")
	if r.Code != 0 || !strings.Contains(r.Stdout, "work") {
		t.Errorf("binding the directory itself fails:\n%s", r)
	}
}

// A read-only bind works wherever its target can be made: under the
// sandbox's fresh /tmp, /run and /dev/shm (the old sibling walk opened the
// host's /tmp entries there), under /var/tmp (beside /var/lock, a symlink
// into the fresh /run), nested in a writable bind, and of a single file.
// Each is readable, refuses writes, and leaves its surroundings writable.
// Landlock grants writes by subtree, so the directory holding a read-only
// bind is granted entry by entry: its existing entries stay writable, a
// new entry directly in it does not (docs/decisions/0004).
func TestReadOnlyBindsWorkEverywhere(t *testing.T) {
	h := setup(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("ro-"+h.marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rw := t.TempDir()
	if err := os.WriteFile(filepath.Join(rw, "next"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		binds []string
		file  string // read, then written, inside
		next  string // a writable place beside the bind
	}{
		{"tmp", []string{src + ":/tmp/ro:ro"}, "/tmp/ro/f", "/var/tmp/ok-" + h.marker},
		{"var-tmp", []string{src + ":/var/tmp/ro:ro"}, "/var/tmp/ro/f", "/tmp/ok"},
		{"run", []string{src + ":/run/ro:ro"}, "/run/ro/f", "/tmp/ok"},
		{"dev-shm", []string{src + ":/dev/shm/ro:ro"}, "/dev/shm/ro/f", "/tmp/ok"},
		{"nested", []string{rw + ":/data", src + ":/data/ro:ro"}, "/data/ro/f", "/data/next"},
		{"file", []string{filepath.Join(src, "f") + ":/etc/ro-" + h.marker + ":ro"}, "/etc/ro-" + h.marker, "/etc/hostname"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"run", "--in-process"}
			for _, b := range c.binds {
				args = append(args, "-v", b)
			}
			script := `cat FILE || exit 10
echo x >> FILE && echo wrote-bind
echo x >> NEXT && echo wrote-next`
			script = strings.NewReplacer("FILE", c.file, "NEXT", c.next).Replace(script)
			r := h.run(append(args, "--", "sh", "-c", script)...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "ro-"+h.marker) {
				t.Fatalf("the read-only bind is not readable at %s:\n%s", c.file, r)
			}
			if strings.Contains(r.Stdout, "wrote-bind") {
				t.Errorf("a write to the read-only bind %s succeeded:\n%s", c.file, r)
			}
			if !strings.Contains(r.Stderr, "Read-only file system") && !strings.Contains(r.Stderr, "Permission denied") {
				t.Errorf("the write to %s did not fail with EROFS or EACCES:\n%s", c.file, r)
			}
			if !strings.Contains(r.Stdout, "wrote-next") {
				t.Errorf("a write beside the read-only bind (%s) failed:\n%s", c.next, r)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(src, "f")); string(b) != "ro-"+h.marker+"\n" {
		t.Errorf("the read-only source changed on the host: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "next")); string(b) != "x\n" {
		t.Errorf("the write beside the nested bind did not reach the writable bind: %q", b)
	}
}

// pivot_root(".", ".") needs no directory for the old root: a sandbox's /
// holds what its base has and tine's own mount points, nothing else.
func TestNoOldRootInSandboxRoot(t *testing.T) {
	h := setup(t)
	root := minimalRootfs(t)
	r := h.run("run", "--in-process", "--rootfs", root, "--", "ls", "-a", "/")
	if r.Code != 0 {
		t.Fatalf("ls / failed:\n%s", r)
	}
	got := strings.Fields(r.Stdout)
	want := map[string]bool{".": true, "..": true, "bin": true, "etc": true, "tmp": true, "usr": true, "lib": true, "lib64": true,
		"proc": true, "dev": true, "run": true, "sys": true}
	for _, name := range got {
		if !want[name] {
			t.Errorf("the sandbox's / has %q, which neither the rootfs nor tine put there:\n%s", name, r)
		}
	}
	if !strings.Contains(r.Stdout, "bin") || !strings.Contains(r.Stdout, "proc") {
		t.Errorf("ls / does not show the rootfs and tine's mounts (so the check proves nothing):\n%s", r)
	}
}

// A directory given as stdin (or any stdio) would let the command open the
// host's files through /proc/self/fd/N, past the new root: `< /` and then
// cat /proc/self/fd/0/etc/shadow. tine refuses such stdio with a usage
// error; a file, a pipe or /dev/null is fine.
func TestStdioDirectoryCannotOpenHost(t *testing.T) {
	h := setup(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("host-secret-"+h.marker), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Control: outside a sandbox the directory descriptor opens the file.
	ctl := exec.Command("cat", "/proc/self/fd/0/secret")
	ctl.Stdin = d
	if out, err := ctl.Output(); err != nil || string(out) != "host-secret-"+h.marker {
		t.Fatalf("control: cat /proc/self/fd/0/secret with the directory as stdin on the host: %q, %v", out, err)
	}
	opath, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	op := os.NewFile(uintptr(opath), dir)
	defer op.Close()

	ns, err := os.Open("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	for _, c := range []struct {
		name  string
		which int
		f     *os.File
	}{{"stdin directory", 0, d}, {"stdout O_PATH", 1, op}, {"stderr directory", 2, d}, {"stdin namespace", 0, ns}} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(tineBin, "run", "--in-process", "--", "sh", "-c", "cat /proc/self/fd/"+string(rune('0'+c.which))+"/secret; echo ran")
			var stdout, stderr syncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			switch c.which {
			case 0:
				cmd.Stdin = c.f
			case 1:
				cmd.Stdout = c.f
			case 2:
				cmd.Stderr = c.f
			}
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if strings.Contains(stdout.String(), "host-secret") || strings.Contains(stdout.String(), "ran") {
				t.Errorf("the sandbox ran with %s and read %q", c.name, stdout.String())
			}
			if code != 2 || !strings.Contains(stderr.String(), "redirect it from a file, a pipe or /dev/null") {
				if c.which == 2 {
					// stderr is the directory: tine's message cannot be seen.
					if code != 2 {
						t.Errorf("%s: want exit 2, got %d (%v)", c.name, code, err)
					}
					return
				}
				t.Errorf("%s: want exit 2 and a message saying what to redirect from, got exit %d (%v), stderr %q", c.name, code, err, stderr.String())
			}
		})
	}
	// A regular file is the user's redirect, and works.
	f, err := os.Open(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := h.runWith(runConfig{stdin: f}, "run", "--in-process", "--", "cat")
	if r.Code != 0 || r.Stdout != "host-secret-"+h.marker {
		t.Errorf("a regular file as stdin: %s", r)
	}
}
