// Package handoff is the protocol by which `tine run` hands a one-shot run
// to a running daemon: the spec, and the CLI's own stdin, stdout and stderr
// passed as descriptors (SCM_RIGHTS), so the command reads and writes them
// directly; signals travel to the command; the outcome comes back exactly as
// an in-process run reports it.
//
// On the daemon's unix socket the client sends
//
//	POST /v1/run HTTP/1.1
//	Upgrade: tine-run
//	Connection: Upgrade
//	Content-Length: N
//
//	{"args": [...], ...}                        (a Request)
//
// The daemon answers 101 Switching Protocols (or an HTTP error with an
// api.Error body). Then the client sends one byte carrying its three stdio
// descriptors; from there on both sides exchange JSON lines (Frame): the
// daemon sends {"started": ...} or {"error": ...}, the client may send
// {"signal": N}, and the daemon ends with {"outcome": ...}. A client that
// disconnects has its run killed.
package handoff

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
	"golang.org/x/sys/unix"
)

// Path is the route of the hand-off; Protocol its Upgrade token.
const (
	Path     = "/v1/run"
	Protocol = "tine-run"
)

// Request is a one-shot run: tine run's flags.
type Request struct {
	Args     []string `json:"args"`
	Env      []string `json:"env,omitempty"`
	Workdir  string   `json:"workdir,omitempty"`
	Hostname string   `json:"hostname,omitempty"`
	RootFS   string   `json:"rootfs,omitempty"`
	// Layers are stacked over RootFS, topmost first (an image's, resolved
	// by tine run, which holds the image's lease while the run lasts);
	// User runs the command as the image's USER.
	Layers    []string      `json:"layers,omitempty"`
	User      *sandbox.User `json:"user,omitempty"`
	HostView  string        `json:"host_view,omitempty"`
	UserNS    bool          `json:"userns,omitempty"`
	DiskBytes int64         `json:"disk_bytes,omitempty"`
	Binds     []api.Bind    `json:"binds,omitempty"`
	Limits    api.Limits    `json:"limits,omitzero"`
	TimeoutMs int64         `json:"timeout_ms,omitempty"`
	Seccomp   string        `json:"seccomp,omitempty"`
}

// Frame is one JSON line after the upgrade.
type Frame struct {
	Started *Started         `json:"started,omitempty"`
	Error   *api.Error       `json:"error,omitempty"`
	Signal  int              `json:"signal,omitempty"`
	Outcome *sandbox.Outcome `json:"outcome,omitempty"`
}

// Started says how the daemon runs the command.
type Started struct {
	// Pooled is true when a ready sandbox from the daemon's pool took it.
	Pooled bool `json:"pooled"`
}

// FromSpec turns a sandbox spec into a request.
func FromSpec(s *sandbox.Spec) Request {
	r := Request{Args: s.Args, Env: s.Env, Workdir: s.Workdir, Hostname: s.Hostname, RootFS: s.RootFS, Layers: s.Layers, User: s.User, HostView: string(s.HostView), UserNS: s.UserNS,
		DiskBytes: s.DiskBytes, TimeoutMs: s.Timeout.Milliseconds(), Seccomp: string(s.Seccomp),
		Limits: api.Limits{MemoryBytes: s.Limits.MemoryBytes, CPUs: s.Limits.CPUs, Pids: s.Limits.Pids}}
	for _, b := range s.Binds {
		r.Binds = append(r.Binds, api.Bind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	return r
}

// ErrNoDaemon means no daemon answers on the socket: run in-process.
var ErrNoDaemon = errors.New("no daemon")

// Session is the client's side of a hand-off.
type Session struct {
	conn    *net.UnixConn
	r       *bufio.Reader
	Started Started
}

// Dial hands req to the daemon on socket with stdio as the command's
// stdin, stdout and stderr. ErrNoDaemon when nothing listens there; an
// *api.Error when the daemon refused the run.
func Dial(socket string, req Request, stdio [3]*os.File) (*Session, error) {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDaemon, err)
	}
	conn := c.(*net.UnixConn)
	var body []byte
	if c := req.Limits.CPUs; math.IsNaN(c) || math.IsInf(c, 0) {
		body, err = json.Marshal(req) // its error says what is wrong
	} else {
		body = req.appendJSON(make([]byte, 0, 512))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: tine\r\nUpgrade: %s\r\nConnection: Upgrade\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", Path, Protocol, len(body))
	conn.Write(body)
	br := bufio.NewReader(conn)
	status, answer, err := readAnswer(br)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: read the daemon's answer: %v", ErrNoDaemon, err)
	}
	if !strings.HasPrefix(status, "101 ") {
		defer conn.Close()
		var e api.Error
		if json.NewDecoder(answer).Decode(&e) == nil && e.Code != "" {
			return nil, &e
		}
		return nil, fmt.Errorf("the daemon refused the run: %s", status)
	}
	fds := make([]int, 3)
	for i, f := range stdio {
		fds[i] = int(f.Fd())
	}
	if err := sendStdio(conn, fds); err != nil {
		conn.Close()
		return nil, fmt.Errorf("hand stdio to the daemon: %w", err)
	}
	s := &Session{conn: conn, r: br}
	f, err := s.read()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if f.Error != nil {
		conn.Close()
		return nil, f.Error
	}
	if f.Started != nil {
		s.Started = *f.Started
	}
	return s, nil
}

// readAnswer reads the daemon's HTTP answer to the hand-off request: its
// status ("101 Switching Protocols", or an error's) and, for an error, its
// body (at most 64 KiB). It is not net/http's ReadResponse so that tine-run,
// a client only, does not link (and initialise) net/http at every start.
func readAnswer(br *bufio.Reader) (status string, body io.Reader, err error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return "", nil, err
	}
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 {
		return "", nil, fmt.Errorf("malformed status line %q", line)
	}
	header, err := tp.ReadMIMEHeader()
	if err != nil {
		return "", nil, err
	}
	if strings.HasPrefix(status, "101 ") {
		return status, nil, nil
	}
	const limit = 1 << 16
	if n, err := strconv.ParseInt(header.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		return status, io.LimitReader(br, min(n, limit)), nil
	}
	if strings.EqualFold(header.Get("Transfer-Encoding"), "chunked") {
		return status, io.LimitReader(&chunked{r: br}, limit), nil
	}
	return status, strings.NewReader(""), nil
}

// chunked decodes an HTTP/1.1 chunked body (without trailers).
type chunked struct {
	r    *bufio.Reader
	left int64 // of the current chunk
	done bool
}

func (c *chunked) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		line, err := c.r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		if c.left, err = strconv.ParseInt(size, 16, 64); err != nil || c.left < 0 {
			return 0, fmt.Errorf("malformed chunk size %q", line)
		}
		c.done = c.left == 0
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		_, err = c.r.Discard(2) // the chunk's CRLF
	}
	return n, err
}

// receiveStdio waits (at most stdioTimeout) for the client's one byte and
// its three descriptors. The socket is non-blocking under Go's poller, so
// the receive goes through RawConn.Read, which parks until it is readable.
func receiveStdio(conn *net.UnixConn) ([]int, error) {
	conn.SetReadDeadline(time.Now().Add(stdioTimeout))
	defer conn.SetReadDeadline(time.Time{})
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	var oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		_, oobn, _, _, rerr = unix.Recvmsg(int(fd), b[:], oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("receive stdio: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("receive stdio: no descriptors")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil, err
	}
	if len(fds) != 3 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("receive stdio: %d descriptors, want 3", len(fds))
	}
	return fds, nil
}

// stdioTimeout bounds the wait for a client's descriptors after the upgrade.
const stdioTimeout = 10 * time.Second

// sendStdio sends one byte carrying fds, through Go's poller.
func sendStdio(conn *net.UnixConn, fds []int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte{0}, unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

func (s *Session) read() (Frame, error) {
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		return Frame{}, fmt.Errorf("the daemon hung up: %w", err)
	}
	if f, ok := readFrameFast(line); ok {
		return f, nil
	}
	var f Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return Frame{}, fmt.Errorf("bad frame from the daemon: %w", err)
	}
	return f, nil
}

// Signal forwards sig to the command.
func (s *Session) Signal(sig syscall.Signal) error {
	b, _ := json.Marshal(Frame{Signal: int(sig)})
	_, err := s.conn.Write(append(b, '\n'))
	return err
}

// Wait returns the run's outcome.
func (s *Session) Wait() (*sandbox.Outcome, error) {
	defer s.conn.Close()
	for {
		f, err := s.read()
		if err != nil {
			return nil, err
		}
		if f.Error != nil {
			return nil, f.Error
		}
		if f.Outcome != nil {
			return f.Outcome, nil
		}
	}
}

// Runner is a run the daemon started for a hand-off.
type Runner interface {
	Signal(syscall.Signal) error
	Wait() (*sandbox.Outcome, error)
}

// Serve speaks the daemon's side on conn, hijacked after the 101 answer:
// it receives the stdio descriptors, starts the run with start, forwards
// signals, and sends the outcome. A client that hangs up has its run
// killed. errFrame turns a start error into the error sent back.
func Serve(conn *net.UnixConn, br *bufio.Reader, start func(stdio [3]*os.File) (Runner, Started, error), errFrame func(error) *api.Error) {
	defer conn.Close()
	fds, err := receiveStdio(conn)
	if err != nil {
		return
	}
	var stdio [3]*os.File
	for i, fd := range fds {
		stdio[i] = os.NewFile(uintptr(fd), "stdio")
	}
	enc := json.NewEncoder(conn)
	run, started, err := start(stdio)
	for _, f := range stdio {
		f.Close() // the command holds its own copies
	}
	if err != nil {
		enc.Encode(Frame{Error: errFrame(err)})
		return
	}
	enc.Encode(Frame{Started: &started})

	// Signals from the client; a hang-up kills the run.
	go func() {
		readSignals(br, func(sig syscall.Signal) { run.Signal(sig) })
		run.Signal(unix.SIGKILL)
	}()
	o, err := run.Wait()
	if o != nil {
		enc.Encode(Frame{Outcome: o})
		return
	}
	enc.Encode(Frame{Error: errFrame(err)})
}

// maxFrame bounds a frame the daemon reads from a client: a signal frame
// is a few bytes, and a longer line is skipped rather than held, so a
// client cannot make the daemon buffer without end.
const maxFrame = 4 << 10

// readSignals reads the client's frames from br until it fails (the client
// hung up: io.EOF, or the connection's error) and calls signal for each
// frame that carries a signal, 1 to 64. Lines that are not frames, or are
// longer than maxFrame, are skipped.
func readSignals(br *bufio.Reader, signal func(syscall.Signal)) error {
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long && len(line)+len(chunk) > maxFrame {
			long, line = true, line[:0]
		}
		if !long {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return err
		}
		var f Frame
		if !long && json.Unmarshal(line, &f) == nil && f.Signal > 0 && f.Signal < 65 {
			signal(syscall.Signal(f.Signal))
		}
		line, long = line[:0], false
	}
}
