package cgroup_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/tine-run/tine/internal/kernel/cgroup"
)

// A single-threaded process handed a group's join files admits itself,
// and what it starts afterwards, into the group in every hierarchy (on v1
// through `tasks`, which moves only the writing thread: the whole of a
// one-thread process). The control: before it writes, the group is empty.
func TestJoinFilesAdmitTheWriter(t *testing.T) {
	h := testHost(t)
	g, err := h.Create(NewName(), Limits{Pids: 16, MemoryBytes: 64 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	fds, err := g.JoinFiles()
	if err != nil {
		t.Fatal(err)
	}
	// A shell (one thread) writes 0 to each when told, then starts a
	// child that waits.
	var files []*os.File
	script := "read go; "
	for i, fd := range fds {
		files = append(files, os.NewFile(uintptr(fd), "join"))
		script += fmt.Sprintf("echo 0 >&%d || exit 3; ", 3+i)
	}
	script += "sleep 3600 & echo joined; wait"
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.ExtraFiles = files
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	defer func() { g.Kill(); cmd.Process.Kill(); cmd.Wait() }()
	if n := g.Stats().Pids; n != 0 {
		t.Fatalf("control: the group holds %d processes before the shell joined", n)
	}
	stdin.Write([]byte("go\n"))
	buf := make([]byte, 16)
	if n, _ := stdout.Read(buf); !strings.Contains(string(buf[:n]), "joined") {
		t.Fatalf("the shell did not join: %q", buf[:n])
	}
	if n := g.Stats().Pids; n != 2 {
		t.Errorf("the group holds %d processes, want 2 (the shell and its child)", n)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for ctl, dir := range g.Dirs() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(string(b)), pid) {
			t.Errorf("%s: the shell (pid %s) is not in %s: %q", ctl, pid, dir, b)
		}
	}
}
