package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tine-run/tine/client"
)

// Daemon is a `tine serve` started for a suite, on a private socket.
type Daemon struct {
	Socket string
	Client *client.Client
	cmd    *exec.Cmd
	dir    string
	raw    *http.Client // for GET /metrics, which the Go client does not wrap
}

// StartDaemon starts tinePath serve with a ready pool of pool sandboxes on
// a socket in a temporary directory, and waits until it answers and its
// pool is filled (so the first measured runs do not pay for filling it).
// extra are more serve flags.
func StartDaemon(tinePath string, pool int, extra ...string) (*Daemon, error) {
	dir, err := os.MkdirTemp("", "tine-bench-")
	if err != nil {
		return nil, err
	}
	d := &Daemon{Socket: filepath.Join(dir, "tine.sock"), dir: dir}
	d.cmd = exec.Command(tinePath, append([]string{"serve", "--socket", d.Socket, "--data-dir", dir, "--state-dir", filepath.Join(dir, "state"), "--pool", fmt.Sprint(pool)}, extra...)...)
	// Its own process group: a Ctrl-C reaches the suite, which cleans up in
	// order and then stops the daemon; Pdeathsig ends it if the suite dies.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start tine serve: %w", err)
	}
	d.Client = client.NewUnix(d.Socket)
	d.raw = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
	}}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, err := d.Client.Health(context.Background())
		if err == nil && (pool == 0 || h.PoolReady >= pool) {
			return d, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			d.Stop()
			return nil, fmt.Errorf("tine serve did not get ready: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the daemon's process id, for reading its /proc entries.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Metric reads the unlabelled sample of name (e.g. go_goroutines) from the
// daemon's GET /metrics.
func (d *Daemon) Metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tine/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := d.raw.Do(req)
	if err != nil {
		return 0, fmt.Errorf("get /metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err != nil {
		return 0, fmt.Errorf("get /metrics: %w", err)
	}
	return parseMetric(string(b), name)
}

// LogTail is the last n bytes of the daemon's log, to explain a failure.
func (d *Daemon) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "serve.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Stop ends the daemon (it destroys its sandboxes) and removes its directory.
func (d *Daemon) Stop() {
	if d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(d.dir)
}
