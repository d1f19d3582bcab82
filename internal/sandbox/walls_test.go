package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/landlock"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// runPlan runs a plan with the command's stdout and stderr in files and
// returns them with the outcome.
func runPlan(t *testing.T, p *Plan) (string, *Outcome) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p.Spec.Stdio = [3]*os.File{nil, out, out}
	h, err := hostOnce()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := startPlan(h, p, time.Now(), nil)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	o, err := pr.Wait()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	b, _ := os.ReadFile(out.Name())
	return string(b), o
}

// Landlock is the second wall behind a read-only bind: with the read-only
// flag taken off the plan's bind, the bind is writable at the mount level,
// and Landlock alone must refuse the write.
func TestLandlockHoldsWhenTheReadOnlyMountIsGone(t *testing.T) {
	require.Root(t)
	require.Landlock(t, 1)
	host := t.TempDir()
	s := &Spec{
		Args:    []string{"/bin/sh", "-c", "echo started; echo x > /data/escaped && echo wrote; touch /tmp/ok && echo tmp-ok"},
		Binds:   []Bind{{Source: host, Target: "/data", ReadOnly: true}},
		Seccomp: seccomp.Default,
	}
	p, err := NewPlan(s, false)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for i, st := range p.Steps {
		if st.Kind == StepBind && st.Target == p.Root+"/data" && st.Flags&unix.MS_RDONLY != 0 {
			p.Steps[i].Flags &^= unix.MS_RDONLY
			removed++
			break
		}
	}
	if removed != 1 {
		t.Fatal("plan has no read-only bind of /data to take the flag from")
	}
	out, o := runPlan(t, p)
	if !strings.Contains(out, "started") || !strings.Contains(out, "tmp-ok") {
		t.Fatalf("the command did not run as expected: %q (%+v)", out, o)
	}
	if strings.Contains(out, "wrote") {
		t.Fatalf("write to the read-only bind succeeded without the mount flag: %q", out)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Fatalf("want Landlock's EACCES, got %q", out)
	}
	if _, err := os.Stat(filepath.Join(host, "escaped")); err == nil {
		t.Fatal("the file reached the host")
	}

	// Control: the same plan with Landlock's rule list granting /data
	// lets the write through, so the refusal above was Landlock's.
	p2, _ := NewPlan(s, false)
	p2.Steps = p.Steps
	p2.Landlock = append(p2.Landlock, landlock.Rule{Path: "/data", Rights: landlock.Writable})
	out, _ = runPlan(t, p2)
	if !strings.Contains(out, "wrote") {
		t.Fatalf("control run could not write /data: %q", out)
	}
}
