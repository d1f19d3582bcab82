package aci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/capped"
)

// What the ACI does on the desktop's machine besides X: run a command,
// read and write files. Inside a desktop tine made, that machine is the
// desktop's sandbox; the guest has no rights there the apps lack.

const (
	defaultExecTimeout = 30 * time.Second
	maxExecTimeout     = 10 * time.Minute
	// maxExecOutput caps each of an exec's stdout and stderr in its reply.
	maxExecOutput = 1 << 20
	// maxFile bounds read_file's and write_file's content.
	maxFile = 32 << 20
	// drainGrace is how long output is still read after the command
	// ended (as the daemon's exec does).
	drainGrace = 250 * time.Millisecond
)

// errNotFound is read_file's and write_file's missing path.
var errNotFound = errors.New("not found")

// execCommand runs req.Cmd on the display under a reaper (reaper_linux.go)
// and waits for it (up to its timeout), keeping the first MiB of each
// output. How the command ended is the reply, not an error: a command that
// is not there exits 127, one that ran too long was killed with everything
// it started (in any session), 124. One that ends by itself is answered
// then, with the output written until drainGrace after; what it left in
// the background keeps running.
func (ss *session) execCommand(ctx context.Context, req *api.ACIRequest, rep *api.ACIReply) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return bad("exec needs cmd, e.g. [\"ls\", \"-l\"]")
	}
	timeout := defaultExecTimeout
	if req.TimeoutMs < 0 || req.TimeoutMs > int(maxExecTimeout.Milliseconds()) { // in ms: a Duration product can wrap
		return bad("exec timeout_ms %d: want 1 to %d, or 0 for %s", req.TimeoutMs, maxExecTimeout.Milliseconds(), defaultExecTimeout)
	} else if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	t0 := time.Now()
	cmd := reaperCommand(timeout, req.Cmd)
	cmd.Env = append(os.Environ(), "DISPLAY="+ss.s.D.Name())
	cmd.Stdin = bytes.NewReader(req.Stdin)
	out, errOut := capped.New(maxExecOutput), capped.New(maxExecOutput)
	cmd.Stdout, cmd.Stderr = out, errOut
	// The answer comes when the command ends, not when its output closes:
	// what it left in the background may hold that open for ever.
	cmd.WaitDelay = drainGrace
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec status pipe: %w", err)
	}
	defer statusR.Close()
	cmd.ExtraFiles = []*os.File{statusW}
	res := &api.ExecResult{}
	rep.Exec = res
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		return fmt.Errorf("start the exec reaper: %w", err)
	}
	started := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done(): // the client went away: nobody waits for the answer
		cmd.Process.Signal(syscall.SIGTERM) // the reaper kills the command's tree
		err = <-done
	}
	report, _ := io.ReadAll(statusR)
	res.TimingsMs = api.Timings{Start: ms(started.Sub(t0)), Run: ms(time.Since(started)), Total: ms(time.Since(t0))}
	res.Stdout, res.Stderr = out.Bytes(), errOut.Bytes()
	res.StdoutTruncated, res.StderrTruncated = out.Dropped(), errOut.Dropped()
	what, rest, _ := strings.Cut(string(report), " ")
	switch what {
	case "timeout", "killed":
		res.ExitCode, res.Reason = 124, "timeout"
	case "start":
		code, msg, _ := strings.Cut(rest, " ")
		res.ExitCode, res.Reason = 127, "not-found"
		if code == "126" {
			res.ExitCode, res.Reason = 126, "not-executable"
		}
		res.Stderr = []byte(msg + "\n")
	case "exit":
		v, _ := strconv.ParseUint(rest, 10, 32)
		ws := syscall.WaitStatus(v)
		if ws.Signaled() {
			res.ExitCode, res.Reason, res.Signal = 128+int(ws.Signal()), "signal", int(ws.Signal())
		} else {
			res.ExitCode, res.Reason = ws.ExitStatus(), "exit"
		}
	default:
		// The reaper itself died (a command may kill its parent).
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return fmt.Errorf("exec %s: the reaper ended without a report: %v", req.Cmd[0], err)
		}
		res.ExitCode, res.Reason = 137, "signal"
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode, res.Signal = 128+int(ws.Signal()), int(ws.Signal())
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// filePath checks a read_file or write_file path.
func filePath(req *api.ACIRequest) (string, error) {
	if !filepath.IsAbs(req.File) {
		return "", bad("%s needs an absolute file path, got %q", req.Op, req.File)
	}
	return filepath.Clean(req.File), nil
}

// readFile answers with the file's content (after the reply's header).
func readFile(req *api.ACIRequest, rep *api.ACIReply) ([]byte, error) {
	path, err := filePath(req)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fileError(path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, bad("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Size() > maxFile {
		return nil, tooLarge{fmt.Sprintf("%s has %d bytes, over read_file's %d; fetch it through the sandbox's files API", path, st.Size(), maxFile)}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fileError(path, err)
	}
	if len(data) > maxFile {
		return nil, tooLarge{fmt.Sprintf("%s grew past read_file's %d bytes while it was read", path, maxFile)}
	}
	rep.Bytes = len(data)
	return data, nil
}

// writeFile creates or replaces the file with content. The directory must
// exist.
func writeFile(req *api.ACIRequest, content []byte, rep *api.ACIReply) error {
	path, err := filePath(req)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if req.Mode != 0 {
		if req.Mode > 0o777 {
			return bad("mode %#o: want permission bits, at most 0777", req.Mode)
		}
		mode = fs.FileMode(req.Mode)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fileError(path, err)
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return fileError(path, err)
	}
	if err := f.Close(); err != nil {
		return fileError(path, err)
	}
	rep.Bytes = len(content)
	return nil
}

// fileError types a file operation's failure.
func fileError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", path, errNotFound)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.ENOTDIR):
		return bad("%v", err)
	}
	return err
}

// tooLarge is a request whose content is over a limit.
type tooLarge struct{ msg string }

func (e tooLarge) Error() string { return e.msg }
