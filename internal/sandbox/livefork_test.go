package sandbox

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// A fork child (Spec.ForkOf) is a sandbox whose PID 1 is in a pid
// namespace nested in its parent's (its NSpid has one level more than the
// parent's PID 1), in a user namespace mapping every id to itself, with a
// working root (an exec writes to it); it dies with its parent.
func TestForkChildNestsInItsParent(t *testing.T) {
	require.Root(t)
	parent, err := Create(&Spec{Hostname: "parent", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Destroy()
	child, err := Create(&Spec{Hostname: "child", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Destroy()
	nspid := func(pid int) []string {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				return strings.Fields(v)
			}
		}
		t.Fatalf("no NSpid for %d", pid)
		return nil
	}
	p, c := nspid(parent.Pid()), nspid(child.Pid())
	if len(p) != 2 || len(c) != 3 || c[2] != "1" {
		t.Fatalf("NSpid of the parent's PID 1 %v and of the child's %v: want the child one level deeper, PID 1 there", p, c)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(child.Pid()) + "/uid_map"); err != nil || strings.Join(strings.Fields(string(b)), " ") != "0 0 4294967295" {
		t.Fatalf("the child's uid_map: %q %v, want every id mapped to itself", b, err)
	}
	out, o := execOutput(t, child, &ExecSpec{Args: []string{"/bin/sh", "-c", "hostname; echo kept > /etc/fork-child-marker && cat /etc/fork-child-marker; id -u"}})
	if o.ExitCode != 0 || out != "child\nkept\n0\n" {
		t.Fatalf("exec in the child: %q %+v", out, o)
	}
	if _, err := os.Stat(parent.Root() + "/etc/fork-child-marker"); !os.IsNotExist(err) {
		t.Fatalf("the child's write is in the parent's root: %v", err)
	}
	parent.Destroy()
	<-child.Done() // its pid namespace went with the parent's PID 1
}
