package security

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// fdAudit lists every descriptor of the process running it (and of the
// pids given as arguments, when /proc lets it read theirs) and prints
// "LEAK ..." for each that reaches outside: a directory from which a host
// file (argv[1], its path on the host) can be opened by walking up, or a
// socket whose peer is the daemon's socket (argv[2]). The test runs the
// same audit on the host with a host directory open as its control.
const fdAudit = `import os, socket, sys
secret, daemon_sock = sys.argv[1], sys.argv[2]
pids = ["self"] + sys.argv[3:]
seen = 0
for pid in pids:
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError as e:
        print("unlisted", pid, e.strerror); continue
    for fd in fds:
        link = "/proc/%s/fd/%s" % (pid, fd)
        seen += 1
        try:
            target = os.readlink(link)
        except OSError:
            continue
        up = link + "/.." * 40 + secret
        try:
            with open(up) as f:
                print("LEAK dir", pid, fd, target, f.read()); continue
        except OSError:
            pass
        if target.startswith("socket:") and pid == "self":
            try:
                s = socket.socket(fileno=os.dup(int(fd)))
                peer = s.getpeername()
                if isinstance(peer, str) and peer == daemon_sock:
                    print("LEAK daemon-socket", pid, fd)
            except OSError:
                pass
print("audited", seen)
`

// TestNoLeakedDescriptors audits every descriptor a sandboxed command
// holds, in `tine run`, in a daemon's exec and in its streamed exec (runc
// CVE-2024-21626 leaked a host directory this way): none may be a directory
// outside the root nor a connection to the daemon's socket. The control:
// the same audit on the host, holding a host directory and a connection to
// the daemon open, reports both.
func TestNoLeakedDescriptors(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	dir, _ := hostDirWithSecret(t)
	secretPath := dir + "/secret"

	// Control: on the host, with a directory and a daemon connection open.
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conn, err := netDialUnix(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctl := exec.Command(python, "-c", fdAudit, secretPath, d.sock)
	ctl.ExtraFiles = []*os.File{f, fileOf(t, conn)}
	out, _ := ctl.CombinedOutput()
	if !strings.Contains(string(out), "LEAK dir") || !strings.Contains(string(out), "LEAK daemon-socket") {
		t.Fatalf("control: the audit on the host does not see the open host directory and daemon connection:\n%s", out)
	}

	check := func(where string, stdout string) {
		t.Helper()
		if !strings.Contains(stdout, "audited ") || strings.Contains(stdout, "audited 0") {
			t.Errorf("%s: the audit did not run:\n%s", where, stdout)
		}
		if strings.Contains(stdout, "LEAK") {
			t.Errorf("%s: a descriptor reaches outside:\n%s", where, stdout)
		}
	}
	r := tineRun(t, "--", python, "-c", fdAudit, secretPath, d.sock, "1")
	check("tine run", r.Stdout+r.Stderr)

	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{python, "-c", fdAudit, secretPath, d.sock, "1"}})
	if err != nil {
		t.Fatal(err)
	}
	check("exec", string(res.Stdout)+string(res.Stderr))
	st, err := d.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{python, "-c", fdAudit, secretPath, d.sock, "1"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Stdin.Close()
	tty, _ := io.ReadAll(st.Stdout)
	st.Wait()
	check("exec with a terminal", string(tty))
}

func netDialUnix(path string) (*net.UnixConn, error) {
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
}

// fileOf returns a descriptor of conn for a child process.
func fileOf(t *testing.T, conn *net.UnixConn) *os.File {
	t.Helper()
	f, err := conn.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestWorkdirThroughProcFd sets the working directory to /proc/self/fd/N
// and to /proc/1/cwd (runc CVE-2024-21626: a leaked host directory as the
// cwd), through `tine run -w` and an exec's workdir. Each either is refused
// or starts inside the sandbox: the command cannot open a host file by
// walking up. The control: the same walk from a host directory, on the
// host, opens it.
func TestWorkdirThroughProcFd(t *testing.T) {
	gate(t)
	t.Parallel()
	dir, secret := hostDirWithSecret(t)
	walk := "cat " + strings.Repeat("../", 40) + dir[1:] + "/secret; echo ran"
	if out, _ := (&exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", walk}, Dir: dir}).Output(); !strings.Contains(string(out), secret) {
		t.Fatalf("control: the walk up from %s does not reach the host file on the host: %q", dir, out)
	}
	var dirs []string
	for n := 3; n <= 12; n++ {
		dirs = append(dirs, "/proc/self/fd/"+strconv.Itoa(n))
	}
	dirs = append(dirs, "/proc/1/cwd", "/proc/1/root", "/proc/self/cwd")
	ran := 0
	for _, wd := range dirs {
		r := tineRun(t, "-w", wd, "--", "/bin/sh", "-c", walk)
		if strings.Contains(r.Stdout, secret) {
			t.Errorf("tine run -w %s reached the host file:\n%s", wd, r)
		}
		if strings.Contains(r.Stdout, "ran") {
			ran++
		}
	}
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, wd := range dirs {
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", walk}, Workdir: wd})
		if err == nil && strings.Contains(string(res.Stdout), secret) {
			t.Errorf("exec with workdir %s reached the host file: %q", wd, res.Stdout)
		}
		if err == nil && strings.Contains(string(res.Stdout), "ran") {
			ran++
		}
	}
	// Control for the inside runs: the commands did run (the ones whose
	// workdir exists inside), so the walk was made.
	if ran == 0 {
		t.Errorf("control: no command ran with any of the workdirs %v; the walk was never made", dirs)
	}
	d.healthy("execs with /proc workdirs")
}

// TestHostBinaryNotWritable is runc CVE-2019-5736's shape: the host's tine
// binary, which every sandbox's PID 1 runs, executed inside through
// /proc/self/exe, then opened for writing through the /proc/PID/exe of the
// process running it — while it runs and after it was killed, through an
// O_PATH descriptor reopened by /proc/self/fd. The control: the host binary
// does run inside (the exec prints its log) and the O_PATH open succeeds;
// the effect: every write fails and the host binary's hash is unchanged.
func TestHostBinaryNotWritable(t *testing.T) {
	gate(t)
	t.Parallel()
	// What every sandbox's PID 1 runs is the daemon's binary: the full
	// program that the front (tineBin) execs for tine serve.
	hostBin := tineBin + "-full"
	sum := func() [32]byte {
		b, err := os.ReadFile(hostBin)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	before := sum()
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The host binary as a long-running process inside: tine serve.
	served := make(chan *api.ExecResult, 1)
	go func() {
		res, _ := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/proc/self/exe", "serve", "--socket", "/tmp/inner.sock", "--data-dir", "/tmp/inner", "--pool", "0"}, TimeoutMs: 120000})
		served <- res
	}()
	attack := fmt.Sprintf(`import os, time
while True:  # the exec's timeout_ms bounds the wait
    pids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open("/proc/%%s/cmdline" %% p, "rb").read().startswith(b"/proc/self/exe\0serve\0"):
                pids.append(p)
        except OSError:
            pass  # gone meanwhile
    if pids and os.path.exists("/tmp/inner.sock"): break
    time.sleep(0.02)
pid = pids[0]
print("exe", os.readlink("/proc/%%s/exe" %% pid))
def write(path, what):
    try:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"#!/bin/sh\n# overwritten by %[1]s\n"); os.close(fd)
        print(what, "WROTE")
    except OSError as e:
        print(what, e.strerror)
write("/proc/%%s/exe" %% pid, "running")
fd = os.open("/proc/%%s/exe" %% pid, os.O_PATH); print("opath ok")
os.kill(int(pid), 9)
time.sleep(0.2)
write("/proc/self/fd/%%d" %% fd, "reopened")
`, marker())
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{python, "-c", attack}, TimeoutMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if !strings.Contains(out, "exe "+hostBin+"\n") || !strings.Contains(out, "opath ok") {
		t.Fatalf("control: the host binary %s was not reached through /proc/PID/exe (exit %d, %s):\n%s", hostBin, res.ExitCode, res.Reason, out)
	}
	select {
	case r := <-served:
		if r == nil || !strings.Contains(string(r.Stderr), "listening") {
			t.Errorf("control: the host binary did not serve inside: %+v", r)
		}
	case <-time.After(patience):
		t.Fatal("the inner tine serve outlived its SIGKILL")
	}
	if strings.Contains(out, "WROTE") {
		t.Errorf("a sandbox wrote to the host's tine binary:\n%s", out)
	}
	if sum() != before {
		t.Errorf("the host's tine binary %s changed", hostBin)
	}
	d.healthy("the /proc/PID/exe attack")
}

// TestHostViewOfDescriptors audits from the host what the sandbox cannot
// read itself: every descriptor of each sandbox's PID 1 (tine's
// supervisor, whose /proc entries the command is refused) and of an exec'd
// command. A directory whose mount is not in the sandbox's mount table is
// a host directory; a socket whose peer the daemon accepted on its
// listening socket is a daemon connection. The control: the same audit
// flags a host directory and a daemon connection the test itself holds.
func TestHostViewOfDescriptors(t *testing.T) {
	gate(t)
	require.Binary(t, "ss")
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	dir, _ := hostDirWithSecret(t)
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseUint(marker()[:8], 16, 64)
	arg := "3600." + strconv.FormatUint(n, 10)
	go d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", arg + "1"}})
	run := exec.Command(tineBin, "run", "--in-process", "--", "sleep", arg+"2")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill(); run.Wait() })
	var execd, runCmd []int
	if !testbin.Eventually(patience, func() bool {
		execd, runCmd = hostPidsArgv("sleep", arg+"1"), hostPidsArgv("sleep", arg+"2")
		return len(execd) == 1 && len(runCmd) == 1
	}) {
		t.Fatalf("the sleeping commands did not start: %v %v", execd, runCmd)
	}
	runPid1 := parentOf(t, runCmd[0])

	// Control: a host directory and a daemon connection, held by this test.
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conn, err := netDialUnix(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cf := fileOf(t, conn)
	// The daemon sees the connection only once it accepted it: a request
	// on it makes sure.
	fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: tine\r\n\r\n")
	conn.Read(make([]byte, 512))
	self := os.Getpid()
	flagged := fdProblems(t, self, sb.Pid, d.sock, []int{int(f.Fd()), int(cf.Fd())})
	if len(flagged) != 2 {
		t.Fatalf("control: the audit flags %v of this test's host directory and daemon connection, want both", flagged)
	}
	for what, pid := range map[string][2]int{
		"the daemon sandbox's PID 1": {sb.Pid, sb.Pid},
		"an exec'd command":          {execd[0], sb.Pid},
		"tine run's PID 1":           {runPid1, runPid1},
		"tine run's command":         {runCmd[0], runPid1},
	} {
		if p := fdProblems(t, pid[0], pid[1], d.sock, nil); len(p) > 0 {
			t.Errorf("%s (host pid %d) holds: %v", what, pid[0], p)
		}
	}
}

// parentOf returns pid's parent.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// fdProblems audits the descriptors of pid (only fds, when given) against
// the mount table of nsPid's mount namespace and the daemon's connections.
func fdProblems(t *testing.T, pid, nsPid int, daemonSock string, fds []int) []string {
	t.Helper()
	mounts := map[string]bool{}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", nsPid))
	if err != nil {
		t.Fatalf("read the mount table of pid %d: %v", nsPid, err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			mounts[f[0]] = true
		}
	}
	peers := daemonPeers(t, daemonSock)
	if fds == nil {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatalf("list the descriptors of pid %d: %v", pid, err)
		}
		for _, e := range entries {
			n, _ := strconv.Atoi(e.Name())
			fds = append(fds, n)
		}
	}
	var problems []string
	for _, fd := range fds {
		link := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
		target, err := os.Readlink(link)
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok && peers[strings.TrimSuffix(ino, "]")] {
			problems = append(problems, fmt.Sprintf("fd %d: a connection to the daemon's socket", fd))
			continue
		}
		if st, err := os.Stat(link); err == nil && st.IsDir() {
			if pid == nsPid && fd == keptUpperSlot && target == "/upper" && sameDevice(link, fmt.Sprintf("/proc/%d/root/tmp", nsPid)) {
				// A live sandbox's PID 1 keeps its own writable layer open
				// for snapshots: a directory of the sandbox's stage tmpfs
				// (the one its /tmp is on), no path into the host.
				continue
			}
			info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
			for _, l := range strings.Split(string(info), "\n") {
				if id, ok := strings.CutPrefix(l, "mnt_id:"); ok && !mounts[strings.TrimSpace(id)] {
					problems = append(problems, fmt.Sprintf("fd %d: directory %s of a mount outside the sandbox", fd, target))
				}
			}
		}
	}
	return problems
}

// keptUpperSlot is where a live sandbox's PID 1 keeps its writable layer
// (internal/sandbox's slotUpper).
const keptUpperSlot = 12

// sameDevice reports whether paths a and b are on one filesystem.
func sameDevice(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// daemonPeers returns the inodes of the sockets connected to the daemon's
// listening socket at sock (the peers of what it accepted), from ss.
func daemonPeers(t *testing.T, sock string) map[string]bool {
	t.Helper()
	out, err := exec.Command("ss", "-xaH").Output()
	if err != nil {
		t.Fatalf("ss -xa: %v", err)
	}
	peers := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		// netid state recv-q send-q local port peer port
		if f := strings.Fields(l); len(f) >= 8 && f[4] == sock && f[1] == "ESTAB" {
			peers[f[7]] = true
		}
	}
	return peers
}
