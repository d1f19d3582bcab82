package checkpoint

// criu's RPC service (`criu swrk`), started inside a live sandbox's
// namespaces. go-criu's own launcher cannot do that (it execs criu
// directly) and hands criu a socket without close-on-exec, which any
// other process the daemon starts meanwhile would inherit; its rpc
// messages are used as they are.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"github.com/tine-run/tine/internal/capped"
	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/sysmon"
	"google.golang.org/protobuf/proto"
)

// nsenter is util-linux's: it joins a process's namespaces, forks (so the
// child is inside the pid namespace too) and execs the command.
const nsenter = "nsenter"

// The descriptors criu gets: its RPC socket and the images directory.
const (
	fdSocket = 3
	fdImages = 4
)

// criuTimeout bounds one request: a criu stuck on a process (one in
// uninterruptible sleep cannot be seized) must not hold the snapshot or
// fork request, nor the sandbox, forever.
const criuTimeout = 5 * time.Minute

// maxLog is how much of criu's log (its stderr) is kept for errors.
const maxLog = 64 << 10

// session is one criu swrk process inside a sandbox's namespaces.
type session struct {
	cmd  *exec.Cmd
	sock *os.File
	log  *capped.Buffer
	// extra is criu's descriptor of startCRIU's first extra file.
	extra int
}

// namespaces are the ones criu joins, as nsenter's options: all of the
// sandbox's, so criu dumps and restores processes only. (Outside the IPC
// namespace criu would capture System V IPC too, but restoring it writes
// IPC sysctls, which the sandbox's read-only /proc/sys and the restoring
// criu's Landlock domain refuse: ADR 0016.)
var namespaces = []struct{ file, option string }{
	{"pid", "--pid"}, {"mnt", "--mount"}, {"net", "--net"}, {"ipc", "--ipc"}, {"uts", "--uts"}, {"cgroup", "--cgroup"},
}

// startCRIU starts criu swrk in the namespaces of host process pid1 (a
// sandbox's PID 1), with images as its images directory and extra as its
// descriptors from session.extra up. The namespaces are opened here and
// handed over as descriptors: a criu in a Landlock domain may not open
// another domain's /proc/<pid>/ns. A non-nil wall is called on the locked
// OS thread criu is then started from (it puts the thread in a Landlock
// domain that criu inherits).
func startCRIU(criu *launcher, pid1 int, images *os.File, wall func() error, extra []*os.File) (*session, error) {
	files := []*os.File{nil, images}
	var nsFiles []*os.File
	args := []string{}
	defer func() {
		for _, f := range nsFiles {
			f.Close()
		}
	}()
	for _, ns := range namespaces {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid1, ns.file))
		if err != nil {
			return nil, fmt.Errorf("open the sandbox's %s namespace: %w", ns.file, err)
		}
		args = append(args, fmt.Sprintf("%s=/proc/self/fd/%d", ns.option, fdSocket+len(files)))
		files = append(files, f)
		nsFiles = append(nsFiles, f)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("criu socket: %w", err)
	}
	// Ours non-blocking, so Go's poller serves it and a deadline holds.
	unix.SetNonblock(pair[0], true)
	sock, theirs := os.NewFile(uintptr(pair[0]), "criu-rpc"), os.NewFile(uintptr(pair[1]), "criu-rpc")
	defer theirs.Close()
	files[0] = theirs
	hostRoot, err := os.OpenFile("/", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("open the host's root: %w", err)
	}
	defer hostRoot.Close()
	rootFD := fdSocket + len(files)
	files = append(files, hostRoot)
	s := &session{sock: sock, log: capped.New(maxLog), extra: fdSocket + len(files)}
	files = append(files, extra...)
	s.cmd = exec.Command(nsenter, append(append(args, "--"), criu.argv(rootFD, "swrk", strconv.Itoa(fdSocket))...)...)
	s.cmd.ExtraFiles = files
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.Env = criu.env(rootFD)
	if err := startOn(s.cmd, wall); err != nil {
		sock.Close()
		return nil, err
	}
	return s, nil
}

// startOn starts cmd from an OS thread of its own, walled in by wall
// first when it is not nil, and with tine's own timer slack: a daemon
// thread may have inherited the wider one of the Go runtime's sysmon
// (internal/kernel/sysmon), which criu, and what it restores, must not.
func startOn(cmd *exec.Cmd, wall func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, and its domain, end with this goroutine.
		runtime.LockOSThread()
		if s := sysmon.ChildSlack(); s > 0 {
			unix.Prctl(unix.PR_SET_TIMERSLACK, s, 0, 0, 0)
		}
		if wall != nil {
			if err := wall(); err != nil {
				done <- fmt.Errorf("wall criu in: %w", err)
				return
			}
		}
		done <- cmd.Start() // forks from this thread
	}()
	return <-done
}

// criuPid returns the host pid of criu itself: nsenter's only child. Call
// it once criu answered a request (it exists then).
func (s *session) criuPid() (int, error) {
	pid := s.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, fmt.Errorf("find criu: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("find criu: nsenter has %d children", len(f))
	}
	return strconv.Atoi(f[0])
}

// call sends one request and returns criu's answer, acknowledging the
// notifications (pre-dump, post-restore, ...) that come before it. criu
// ends after one request unless it is asked to keep the session open.
func (s *session) call(typ rpc.CriuReqType, opts *rpc.CriuOpts, keepOpen bool) (*rpc.CriuResp, error) {
	req := &rpc.CriuReq{Type: &typ, Opts: opts, KeepOpen: proto.Bool(keepOpen)}
	buf := make([]byte, 64<<10)
	for {
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		s.sock.SetDeadline(time.Now().Add(criuTimeout))
		if _, err := s.sock.Write(b); err != nil {
			return nil, s.failed(fmt.Errorf("send criu %s request: %w", typ, err))
		}
		n, err := s.sock.Read(buf)
		if err == nil && n == 0 {
			err = errors.New("criu closed its socket")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if pid, err := s.criuPid(); err == nil {
				unix.Kill(pid, unix.SIGKILL) // its tracees are let go
			}
			s.cmd.Process.Kill()
			err = fmt.Errorf("no answer after %s", criuTimeout)
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("%w: criu %s: %w: %s", ErrCRIU, typ, err, lastError(s.log.String()))
		}
		resp := &rpc.CriuResp{}
		if err := proto.Unmarshal(buf[:n], resp); err != nil {
			return nil, fmt.Errorf("criu %s: bad answer: %w", typ, err)
		}
		if !resp.GetSuccess() {
			why := criuReason(resp, s.log.String())
			s.close()
			return nil, fmt.Errorf("%w: criu %s: %s", ErrCRIU, typ, why)
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			return resp, nil
		}
		ack := rpc.CriuReqType_NOTIFY
		req = &rpc.CriuReq{Type: &ack, NotifySuccess: proto.Bool(true)}
	}
}

// failed ends criu after a failure and returns err.
func (s *session) failed(err error) error {
	s.close() // its exit status says no more than err
	return fmt.Errorf("%w: %w", ErrCRIU, err)
}

// close ends the session: criu exits once its socket closes.
func (s *session) close() error {
	s.sock.Close()
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("criu: %w: %s", err, lastError(s.log.String()))
	}
	return nil
}

// criuReason is the most telling reason criu gave: the first error lines
// of its log, else its error message, with the errno it reported.
func criuReason(resp *rpc.CriuResp, log string) string {
	why := lastError(log)
	if m := strings.TrimSpace(resp.GetCrErrmsg()); why == "" && !isNoise(m) {
		why = m
	}
	if why == "" {
		// Nothing but noise: the log's end says most.
		why = "no error in its log, which ends: " + logTail(log, 3)
	}
	if resp.GetCrErrno() != 0 {
		why += " (" + unix.Errno(resp.GetCrErrno()).Error() + ")"
	}
	for _, h := range hints {
		if strings.Contains(why, h.seen) {
			why += " — " + h.means
		}
	}
	return why
}

// hints explain criu failures seen here in the user's terms.
var hints = []struct{ seen, means string }{
	{"Can't get 1:16 opt", "criu 4.1 cannot dump internet sockets (a listening or connected TCP socket) on Linux 6.16 and later, which refuse SO_PASSCRED on them: close them before the snapshot, take an fs snapshot, or install criu >= 4.2 (SUITE=sid scripts/install-criu)"},
	{"Can't lookup mount", "a process holds a file from outside the sandbox (descriptors the daemon passed in): start it with in-sandbox stdio, e.g. </dev/null >/dev/null 2>&1"},
	{"External socket is used", "a process is connected to a process of another tree under PID 1: processes that talk must be started from one parent"},
	{"not found; Dump files", "a unix socket is connected to something outside the sandbox, such as an open ACI session of a desktop: close it before the memory snapshot"},
	{"SysVIPC shmem map", "a process maps System V shared memory (an X client using MIT-SHM, such as Chromium, or an app's own segment), which criu cannot carry out of a sandbox: take an fs snapshot"},
	{"No such file or directory", "a file a restored process had open is not in the snapshot's files (/tmp, /run and /dev/shm are not captured)"},
}

// noise are errors criu logs on every run here, whatever happens next:
// RLIMIT_NOFILE without CAP_SYS_RESOURCE, its probe for a tun device.
var noise = []string{"RLIMIT_NOFILE", "Unable to create tun"}

func isNoise(line string) bool {
	return slices.ContainsFunc(noise, func(n string) bool { return strings.Contains(line, n) })
}

// logTail is the last n lines of log, joined.
func logTail(log string, n int) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "; ")
}

// lastError picks criu's first error lines that are not noise nor a
// consequence of an earlier one ("Dumping FAILED").
func lastError(log string) string {
	var errs []string
	for line := range strings.Lines(log) {
		_, rest, ok := strings.Cut(line, "Error (")
		if !ok {
			continue
		}
		if _, msg, ok := strings.Cut(rest, "): "); ok {
			rest = msg
		}
		rest = strings.TrimSpace(rest)
		if strings.HasSuffix(rest, "FAILED.") || isNoise(rest) {
			continue
		}
		errs = append(errs, rest)
		if len(errs) == 3 {
			break
		}
	}
	return strings.Join(errs, "; ")
}
