package pool

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
)

func run(t *testing.T, p *Pool, s *sandbox.Spec) (string, *sandbox.Outcome) {
	t.Helper()
	r, w, _ := os.Pipe()
	s.Stdio = [3]*os.File{nil, w, w}
	run, err := p.Start(s)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("start %v: %v", s.Args, err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	o, err := run.Wait()
	if err != nil {
		t.Fatalf("%v: %v", s.Args, err)
	}
	return string(out), o
}

func TestPooledRunsAreFreshAndLimited(t *testing.T) {
	require.Root(t)
	p := New(2)
	defer p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for p.Ready() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Ready() != 2 {
		t.Fatalf("pool has %d ready sandboxes, want 2", p.Ready())
	}
	// A run writes a file; the next run must not see it.
	out, o := run(t, p, &sandbox.Spec{Args: []string{"sh", "-c", "echo leak > /etc/pool-marker; hostname; exit 4"}})
	if o.ExitCode != 4 || out != "tine\n" {
		t.Fatalf("first run: %q %+v", out, o)
	}
	out, o = run(t, p, &sandbox.Spec{Args: []string{"sh", "-c", "cat /etc/pool-marker 2>&1 || echo fresh"}})
	if !strings.Contains(out, "fresh") {
		t.Fatalf("a pooled sandbox carried state from an earlier run: %q", out)
	}
	// Limits are applied at claim: a memory bomb is killed.
	_, o = run(t, p, &sandbox.Spec{
		Args:   []string{"/usr/bin/python3", "-c", "b = bytearray(256 << 20)"},
		Limits: cgroup.Limits{MemoryBytes: 32 << 20},
	})
	if o.Reason != "oom" || o.ExitCode != 137 {
		t.Fatalf("memory bomb outcome %+v, want oom/137", o)
	}
	if _, err := p.Start(&sandbox.Spec{Args: []string{"no-such-command"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestFits(t *testing.T) {
	if !Fits(&sandbox.Spec{Args: []string{"x"}, Limits: cgroup.Limits{Pids: 5}}) {
		t.Fatal("a default spec with limits should fit")
	}
	for name, s := range map[string]*sandbox.Spec{
		"rootfs":   {RootFS: "/srv"},
		"binds":    {Binds: []sandbox.Bind{{Source: "/a", Target: "/b"}}},
		"tty":      {TTY: true},
		"hostname": {Hostname: "box"},
		"seccomp":  {Seccomp: "strict"},
		"disk":     {DiskBytes: 1 << 30},
	} {
		if Fits(s) {
			t.Errorf("%s: fits, want a fresh sandbox", name)
		}
	}
}
