package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// The sandbox sees only its own processes: its PID 1 (tine's init), the
// command as PID 2 and what the command starts; a host process is neither
// listed nor reachable by its pid.
func TestHostProcessesInvisible(t *testing.T) {
	h := setup(t)
	host := startHostProcess(t, "sleep", "300")
	hostPid := host.Process.Pid

	script := fmt.Sprintf(`echo begin-%[1]s
kill -0 1 && echo kill-pid1-ok
kill -0 $$ && echo kill-self-ok
echo pids: $(ls /proc | grep -E '^[0-9]+$')
kill -0 %[2]d 2>/dev/null && echo host-visible-by-kill
test -e /proc/%[2]d && echo host-visible-in-proc
ps -eo pid= | tr -s ' \n' ' ' | sed 's/^/ps: /'; echo
echo end-%[1]s`, h.marker, hostPid)
	r := h.run("run", "--", "bash", "-c", script)
	if r.Code != 0 || !strings.Contains(r.Stdout, "end-"+h.marker) {
		t.Fatalf("the probe did not run to its end:\n%s", r)
	}
	// Negative checks: kill -0 works on pids that do exist.
	for _, want := range []string{"kill-pid1-ok", "kill-self-ok"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("kill -0 of a sandbox pid failed (%s missing), so its failure on the host pid proves nothing:\n%s", want, r)
		}
	}
	if strings.Contains(r.Stdout, "host-visible") {
		t.Errorf("host process %d (sleep) is visible inside the sandbox:\n%s", hostPid, r)
	}
	for _, prefix := range []string{"pids:", "ps:"} {
		pids := pidsOnLine(t, r.Stdout, prefix)
		if len(pids) < 2 || pids[0] != 1 || pids[1] != 2 {
			t.Errorf("%s inside the sandbox lists %v, want 1, 2 and the command's children\n%s", prefix, pids, r)
		}
		for _, pid := range pids {
			if pid > 16 {
				t.Errorf("%s inside the sandbox lists pid %d, which is not a sandbox pid (host pids leak?)\n%s", prefix, pid, r)
			}
		}
	}
}

// pidsOnLine parses the sorted numbers on the stdout line starting with prefix.
func pidsOnLine(t *testing.T, stdout, prefix string) []int {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			var pids []int
			for _, f := range strings.Fields(rest) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("line %q: %q is not a pid", line, f)
				}
				pids = append(pids, n)
			}
			sort.Ints(pids)
			return pids
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, stdout)
	return nil
}

// Writes anywhere in the root succeed inside and never reach the host.
func TestRootWritesStayInside(t *testing.T) {
	h := setup(t)
	etc := "/etc/tine-escape-" + h.marker
	top := "/newfile-" + h.marker
	usr := "/usr/bin/tine-escape-" + h.marker
	script := fmt.Sprintf(`set -e
for f in %s %s %s; do echo "written-$f" > "$f"; cat "$f"; done
echo more >> /etc/hostname
rm -f /etc/passwd && test ! -e /etc/passwd && echo passwd-removed`, etc, top, usr)
	hostsBefore, _ := os.ReadFile("/etc/hostname")
	r := h.run("run", "--", "sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("writing to / inside the sandbox failed:\n%s", r)
	}
	for _, f := range []string{etc, top, usr} {
		if !strings.Contains(r.Stdout, "written-"+f) {
			t.Errorf("inside, %s did not read back what was written:\n%s", f, r)
		}
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			os.Remove(f)
			t.Errorf("%s written inside the sandbox appeared on the host (lstat: %v)", f, err)
		}
	}
	if !strings.Contains(r.Stdout, "passwd-removed") {
		t.Errorf("inside, rm /etc/passwd did not take effect:\n%s", r)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("the host's /etc/passwd is gone after the sandbox removed its copy: %v", err)
	}
	if after, _ := os.ReadFile("/etc/hostname"); string(after) != string(hostsBefore) {
		t.Errorf("the host's /etc/hostname changed: %q -> %q", hostsBefore, after)
	}
}

// A listener on the host's loopback is unreachable from inside, while the
// sandbox's own loopback works.
func TestHostLoopbackUnreachable(t *testing.T) {
	h := setup(t)
	require.Binary(t, python)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	probe := fmt.Sprintf(`if echo > /dev/tcp/127.0.0.1/%d; then echo connected; else echo refused; fi`, port)

	// Negative check: the same probe, run on the host, reaches the listener.
	out, err := execOutput("bash", "-c", probe)
	if err != nil || !strings.Contains(out, "connected") || !testbin.Eventually(2*time.Second, func() bool { return accepted.Load() == 1 }) {
		t.Fatalf("the probe does not reach the listener even from the host (output %q, err %v, accepted %d)", out, err, accepted.Load())
	}

	inner := `import socket
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
c = socket.create_connection(srv.getsockname(), timeout=5)
conn, _ = srv.accept()
c.sendall(b"ping")
print("inner-listener:", conn.recv(4).decode())`
	r := h.run("run", "--", "bash", "-c", probe+"\n"+python+" -c '"+inner+"'")
	if !strings.Contains(r.Stdout, "inner-listener: ping") {
		t.Errorf("a listener inside the sandbox on its own loopback is not reachable from inside:\n%s", r)
	}
	if !strings.Contains(r.Stdout, "refused") || strings.Contains(r.Stdout, "connected") {
		t.Errorf("the host's 127.0.0.1:%d was reachable from inside the sandbox:\n%s", port, r)
	}
	time.Sleep(100 * time.Millisecond) // let a stray accept land before counting
	if n := accepted.Load(); n != 1 {
		t.Errorf("the host listener accepted %d connections from inside the sandbox", n-1)
	}
}

// syscallProbe calls raw syscalls through ctypes and prints one
// "name ret errno" line each, so the test sees what the kernel answered.
const syscallProbe = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    e = ctypes.get_errno() if r < 0 else 0
    print(name, r, os.strerror(e) if e else "ok", flush=True)
    return r
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
call("getpid", 39)
call("mount", 165, ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/mnt"), ctypes.c_char_p(b"tmpfs"), 0, 0)
call("kexec_load", 246, 0, 0, 0, 0)
attr = ctypes.create_string_buffer(128)  # zeroed union bpf_attr
call("bpf_prog_load", 321, 5, attr, 128)
for name, pid in (("ptrace_pid1", 1), ("ptrace_hostpid", int(sys.argv[1]))):
    if call(name, 101, PTRACE_ATTACH, pid, 0, 0) == 0:
        # Attached: let the tracee go again so the run can end.
        os.waitpid(pid, 0x40000000)  # __WALL
        call(name + "_detach", 101, PTRACE_DETACH, pid, 0, 0)
print("probe-done", flush=True)
`

// Privileged syscalls are refused inside: mount, kexec_load, bpf, ptrace of
// a process the command does not own, and new user or mount namespaces.
//
// What "ptrace of an outside process" means here: a host process cannot be
// named at all (pid namespace), so attaching to a host pid number fails with
// ESRCH, or EPERM. The one process inside that is not the command's is the
// sandbox's PID 1, a forked tine that supervises the command and reports its
// wait status to the tine on the host over a pipe. A command that can attach
// to it can stop it (tine run then never returns after the command exits)
// or make it report a forged status. So attaching to PID 1 must be refused.
func TestPrivilegedSyscallsRefused(t *testing.T) {
	h := setup(t)
	require.Binary(t, python)
	host := startHostProcess(t, "sleep", "300")
	hostPid := host.Process.Pid

	// --timeout bounds the run should an attach to PID 1 wedge it.
	r := h.run("run", "--timeout", "20s", "--", python, "-c", syscallProbe, strconv.Itoa(hostPid), h.marker)
	got := map[string]string{}
	ret := map[string]int{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) == 3 {
			got[f[0]] = f[2]
			ret[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	// Negative check: the probe ran, and calls the kernel allows succeed.
	if got["getpid"] != "ok" || ret["getpid"] != 2 || !strings.Contains(r.Stdout, "probe-done") {
		t.Fatalf("the syscall probe did not run as the sandbox's PID 2:\n%s", r)
	}
	for _, c := range []struct{ name, want string }{
		{"mount", "Operation not permitted"},
		{"kexec_load", "Operation not permitted"},
		{"bpf_prog_load", "Operation not permitted"},
		{"ptrace_pid1", "Operation not permitted"},
	} {
		if got[c.name] != c.want {
			t.Errorf("%s inside the sandbox: got %q, want %q", c.name, got[c.name], c.want)
		}
	}
	if e := got["ptrace_hostpid"]; e != "No such process" && e != "Operation not permitted" {
		t.Errorf("ptrace(PTRACE_ATTACH, host pid %d) inside the sandbox: got %q, want ESRCH or EPERM", hostPid, e)
	}
	if r.Code != 0 {
		t.Errorf("the probe run did not end cleanly:\n%s", r)
	}

	r = h.run("run", "--", "sh", "-c", `command -v unshare >/dev/null && echo has-unshare
unshare -r true; echo userns=$?
unshare -m true; echo mountns=$?
unshare -n true; echo netns=$?`)
	if !strings.Contains(r.Stdout, "has-unshare") {
		t.Fatalf("unshare is not in the sandbox, its failing would prove nothing:\n%s", r)
	}
	for _, k := range []string{"userns", "mountns", "netns"} {
		if strings.Contains(r.Stdout, k+"=0") || !strings.Contains(r.Stdout, k+"=") {
			t.Errorf("unshare (%s) inside the sandbox did not fail:\n%s", k, r)
		}
	}
}

// Seccomp is in filter mode (2) under default and strict, off under unconfined.
func TestSeccompMode(t *testing.T) {
	h := setup(t)
	require.Feature(t, "seccomp")
	for policy, want := range map[string]string{"default": "2", "strict": "2", "unconfined": "0"} {
		r := h.run("run", "--seccomp", policy, "--", "grep", "^Seccomp:", "/proc/self/status")
		fields := strings.Fields(r.Stdout)
		if r.Code != 0 || len(fields) != 2 || fields[0] != "Seccomp:" {
			t.Errorf("--seccomp %s: no Seccomp: line from /proc/self/status:\n%s", policy, r)
			continue
		}
		if fields[1] != want {
			t.Errorf("--seccomp %s: Seccomp: %s, want %s", policy, fields[1], want)
		}
	}
}

// A read-only volume cannot be written from inside and the host directory
// stays untouched; a read-write volume can, and the write lands on the host.
func TestVolumeWrites(t *testing.T) {
	h := setup(t)
	require.Landlock(t, 1)
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig")
	if err := os.WriteFile(orig, []byte("host-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cat /data/orig
echo new > /data/new && echo wrote-new
echo changed >> /data/orig && echo appended-orig
rm -f /data/orig && echo removed-orig
mkdir /data/sub && echo made-sub
echo done`

	t.Run("ro", func(t *testing.T) {
		r := h.run("run", "-v", dir+":/data:ro", "--", "sh", "-c", script)
		if !strings.Contains(r.Stdout, "host-content") || !strings.Contains(r.Stdout, "done") {
			t.Fatalf("with -v %s:/data:ro the sandbox could not read the volume (so the write checks prove nothing):\n%s", dir, r)
		}
		for _, w := range []string{"wrote-new", "appended-orig", "removed-orig", "made-sub"} {
			if strings.Contains(r.Stdout, w) {
				t.Errorf("read-only volume: %s succeeded inside:\n%s", w, r)
			}
		}
		entries, _ := os.ReadDir(dir)
		if content, _ := os.ReadFile(orig); string(content) != "host-content\n" || len(entries) != 1 {
			t.Errorf("read-only volume: the host directory changed: orig %q, %d entries", content, len(entries))
		}
	})
	t.Run("rw", func(t *testing.T) {
		r := h.run("run", "-v", dir+":/data", "--", "sh", "-c", "echo from-sandbox > /data/new && echo wrote-new")
		if r.Code != 0 || !strings.Contains(r.Stdout, "wrote-new") {
			t.Fatalf("read-write volume: the write failed inside:\n%s", r)
		}
		if content, err := os.ReadFile(filepath.Join(dir, "new")); err != nil || string(content) != "from-sandbox\n" {
			t.Errorf("read-write volume: the write did not reach the host: %q, %v", content, err)
		}
	})
}

// /dev has the usual nodes and refuses new ones.
func TestDevUsable(t *testing.T) {
	h := setup(t)
	r := h.run("run", "--", "sh", "-c", `command -v mknod >/dev/null && echo has-mknod
echo x > /dev/null && echo null-ok
echo urandom=$(head -c 4 /dev/urandom | wc -c)
echo zero=$(head -c 3 /dev/zero | wc -c)
mknod /dev/sda2 b 8 2 && echo mknod-dev-ok
mknod /tmp/sda2 b 8 2 && echo mknod-tmp-ok
test -e /dev/sda2 && echo sda2-exists
echo done`)
	if !strings.Contains(r.Stdout, "has-mknod") || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("the /dev probe did not run (or mknod is missing, and its failing would prove nothing):\n%s", r)
	}
	for _, want := range []string{"null-ok", "urandom=4", "zero=3"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("/dev inside the sandbox: %s missing:\n%s", want, r)
		}
	}
	for _, bad := range []string{"mknod-dev-ok", "mknod-tmp-ok", "sda2-exists"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("/dev inside the sandbox: %s (creating a block device must fail):\n%s", bad, r)
		}
	}
}

// execOutput runs a host command and returns its stdout.
func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// The host's secrets are not readable through the host-root base: the
// sandbox's root is uid 0, which owns them, so they are masked.
func TestHostSecretsMasked(t *testing.T) {
	h := setup(t)
	shadow, err := os.ReadFile("/etc/shadow")
	if err != nil || len(shadow) == 0 {
		t.Skipf("needs a non-empty /etc/shadow on the host: %v", err)
	}
	marker := "secret-" + h.marker
	if err := os.WriteFile("/root/"+marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/root/" + marker) })
	r := h.run("run", "--", "sh", "-c", "echo started; wc -c < /etc/shadow; ls -A /root")
	if !strings.HasPrefix(r.Stdout, "started\n") {
		t.Fatalf("the command did not run: %s", r)
	}
	if strings.TrimSpace(strings.Split(r.Stdout, "\n")[1]) != "0" {
		t.Errorf("/etc/shadow is readable inside: %s", r)
	}
	if strings.Contains(r.Stdout, marker) {
		t.Errorf("the host's /root is visible inside: %s", r)
	}
	// A bind into /root lands on the empty /root; the host's stays hidden.
	dir := t.TempDir()
	r = h.run("run", "-v", dir+":/root/work", "--", "ls", "-A", "/root")
	if strings.Contains(r.Stdout, marker) || !strings.Contains(r.Stdout, "work") {
		t.Errorf("with a bind into /root, want only the bind there: %s", r)
	}
}
