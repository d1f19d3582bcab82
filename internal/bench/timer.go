package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// timer times one run of a variant.
type timer interface {
	once() (time.Duration, error)
	failure(round, warmup int, err error) *Failure
	close()
}

func closeTimers(ts []timer) {
	for _, t := range ts {
		if t != nil {
			t.close()
		}
	}
}

// newTimer prepares v for timing. why is set when v cannot run on this host.
func newTimer(v Variant, devNull *os.File, timeout time.Duration) (t timer, why string, err error) {
	if v.Func != nil {
		return &funcTimer{f: v.Func, before: v.Before, after: v.After}, "", nil
	}
	if len(v.Argv) == 0 {
		return nil, "", fmt.Errorf("variant %s: neither a command nor a function", v.Name)
	}
	path, err := exec.LookPath(v.Argv[0])
	if err != nil {
		return nil, fmt.Sprintf("not available: %v", err), nil
	}
	// An unlinked file, not a pipe, takes stderr: no copying goroutine runs
	// during the timed part, and nothing is left behind.
	stderr, err := os.CreateTemp("", "tine-bench-stderr-")
	if err != nil {
		return nil, "", fmt.Errorf("variant %s: stderr file: %w", v.Name, err)
	}
	os.Remove(stderr.Name())
	return &execTimer{path: path, argv: v.Argv, devNull: devNull, stderr: stderr, timeout: timeout}, "", nil
}

// execTimer times exec+wait of one command line.
type execTimer struct {
	path    string
	argv    []string
	devNull *os.File
	stderr  *os.File
	timeout time.Duration
}

func (e *execTimer) once() (time.Duration, error) {
	if err := e.stderr.Truncate(0); err != nil {
		return 0, fmt.Errorf("reset stderr file: %w", err)
	}
	if _, err := e.stderr.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("reset stderr file: %w", err)
	}
	cmd := &exec.Cmd{Path: e.path, Args: e.argv, Stdin: e.devNull, Stdout: e.devNull, Stderr: e.stderr}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	killer := time.AfterFunc(e.timeout, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	elapsed := time.Since(start)
	if !killer.Stop() {
		err = fmt.Errorf("killed after the %s run timeout (%w)", e.timeout, err)
	}
	return elapsed, err
}

func (e *execTimer) failure(round, warmup int, err error) *Failure {
	f := phaseFailure(round, warmup, err)
	buf := make([]byte, stderrLimit)
	n, _ := e.stderr.ReadAt(buf, 0)
	f.Stderr = string(buf[:n])
	return f
}

func (e *execTimer) close() { e.stderr.Close() }

// funcTimer times one call of a Go function between its untimed before
// and after.
type funcTimer struct{ f, before, after func(context.Context) error }

func (t *funcTimer) once() (time.Duration, error) {
	if t.before != nil {
		if err := t.before(context.Background()); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	err := t.f(context.Background())
	d := time.Since(start)
	if err == nil && t.after != nil {
		err = t.after(context.Background())
	}
	return d, err
}

func (t *funcTimer) failure(round, warmup int, err error) *Failure {
	return phaseFailure(round, warmup, err)
}

func (t *funcTimer) close() {}

func phaseFailure(round, warmup int, err error) *Failure {
	if round < warmup {
		return &Failure{Phase: "warm-up", Run: round + 1, Error: err.Error()}
	}
	return &Failure{Phase: "measured", Run: round - warmup + 1, Error: err.Error()}
}
