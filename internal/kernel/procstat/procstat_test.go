package procstat

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestOwnProcess(t *testing.T) {
	f := Fields(os.Getpid())
	if len(f) < 20 {
		t.Fatalf("Fields(self) = %q, want at least 20 fields", f)
	}
	if f[1] != strconv.Itoa(os.Getppid()) {
		t.Errorf("parent field %q, want %d", f[1], os.Getppid())
	}
	if s := State(os.Getpid()); s != "R" && s != "S" {
		t.Errorf("State(self) = %q, want R or S", s)
	}
	if StartTime(os.Getpid()) == 0 {
		t.Error("StartTime(self) = 0")
	}
}

// A command name with spaces and a ")" must not shift the fields.
func TestCommandNameWithParenthesis(t *testing.T) {
	dir := t.TempDir()
	bin := dir + "/a) b c"
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	f := Fields(cmd.Process.Pid)
	if len(f) < 20 || f[1] != strconv.Itoa(os.Getpid()) {
		t.Fatalf("Fields of %q = %q, want parent %d in [1]", bin, f, os.Getpid())
	}
	if StartTime(cmd.Process.Pid) < StartTime(os.Getpid()) {
		t.Error("the child started before its parent")
	}
}

func TestGone(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if Fields(pid) != nil || State(pid) != "" || StartTime(pid) != 0 {
		t.Errorf("a reaped process %d still reads as there", pid)
	}
}
