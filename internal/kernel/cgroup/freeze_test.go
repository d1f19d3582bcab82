package cgroup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/tine-run/tine/internal/kernel/cgroup"
)

// TestFreezeStopsAndThawResumes: a process counting into a file stops
// counting while its group is frozen and counts on after the thaw; a
// frozen group can still be killed.
func TestFreezeStopsAndThawResumes(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{Pids: 16}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	counter := filepath.Join(t.TempDir(), "n")
	cmd := exec.Command("/bin/sh", "-c", `read go; n=0; while :; do n=$((n+1)); echo $n > "$0.tmp"; mv "$0.tmp" "$0"; done`, counter)
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := g.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	read := func() int {
		b, _ := os.ReadFile(counter)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	waitAbove := func(n int) int {
		deadline := time.Now().Add(5 * time.Second)
		for read() <= n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return read()
	}
	if n := waitAbove(0); n == 0 {
		t.Fatal("the counter never started: the test proves nothing")
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozenAt := read()
	time.Sleep(200 * time.Millisecond)
	if n := read(); n != frozenAt {
		t.Fatalf("counter moved from %d to %d while frozen", frozenAt, n)
	}
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	if n := waitAbove(frozenAt); n <= frozenAt {
		t.Fatalf("counter stuck at %d after thaw", n)
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	g.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a frozen group's process survived Kill")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}
