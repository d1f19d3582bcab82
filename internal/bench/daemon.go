package bench

import (
	"context"
	"fmt"
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
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
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
