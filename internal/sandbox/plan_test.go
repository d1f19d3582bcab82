package sandbox

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/landlock"
	"golang.org/x/sys/unix"
)

func stepIndex(p *Plan, pred func(Step) bool) int {
	return slices.IndexFunc(p.Steps, pred)
}

func TestPlanMountsRootBeforeEverythingAndMasksLast(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPlan(&Spec{Args: []string{"true"}, Binds: []Bind{{Source: dir, Target: "/data", ReadOnly: true}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	overlay := stepIndex(p, func(s Step) bool { return s.FSType == "overlay" })
	proc := stepIndex(p, func(s Step) bool { return s.FSType == "proc" })
	bind := stepIndex(p, func(s Step) bool { return s.Source == dir })
	procSysRO := stepIndex(p, func(s Step) bool {
		return s.Target == p.Root+"/proc/sys" && s.Flags&unix.MS_REMOUNT != 0 && s.Flags&unix.MS_RDONLY != 0
	})
	if overlay < 0 || proc < 0 || bind < 0 || procSysRO < 0 {
		t.Fatalf("missing steps: overlay %d proc %d bind %d /proc/sys ro %d", overlay, proc, bind, procSysRO)
	}
	if !(overlay < proc && proc < bind && bind < procSysRO) {
		t.Fatalf("order: overlay %d, proc %d, bind %d, /proc/sys ro %d", overlay, proc, bind, procSysRO)
	}
	// The read-only bind is mounted read-only, nosuid and nodev.
	if s := p.Steps[bind]; s.Kind != StepBind || s.Target != p.Root+"/data" || s.Flags&(unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) != unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV {
		t.Fatalf("the bind step is %v (flags %#x), want a read-only bind of /data", s, s.Flags)
	}
}

func TestPlanDevIsReadOnlyAndHasNoDeviceNodesOutsideIt(t *testing.T) {
	p, err := NewPlan(&Spec{Args: []string{"true"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	devRO := stepIndex(p, func(s Step) bool {
		return s.Target == p.Root+"/dev" && s.Flags&unix.MS_REMOUNT != 0 && s.Flags&unix.MS_RDONLY != 0
	})
	lastNode := -1
	for i, s := range p.Steps {
		if s.Kind == StepMknod {
			lastNode = i
			if !strings.HasPrefix(s.Target, p.Root+"/dev/") {
				t.Errorf("device node outside /dev: %s", s.Target)
			}
		}
		if s.Kind == StepMount && s.FSType != "" && s.FSType != "devpts" && s.Target != p.Root+"/dev" && s.Flags&unix.MS_NODEV == 0 && s.Flags&unix.MS_REMOUNT == 0 {
			t.Errorf("%v is mounted without nodev", s)
		}
	}
	if devRO < 0 || lastNode < 0 || devRO < lastNode {
		t.Fatalf("/dev must be made read-only after its nodes: ro at %d, last node at %d", devRO, lastNode)
	}
}

func TestPlanRootlessBindsDevicesInsteadOfMknod(t *testing.T) {
	p, err := NewPlan(&Spec{Args: []string{"true"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if stepIndex(p, func(s Step) bool { return s.Kind == StepMknod }) >= 0 {
		t.Fatal("rootless plan uses mknod, which a user namespace forbids")
	}
	if stepIndex(p, func(s Step) bool { return s.Source == "/dev/null" && s.Flags&unix.MS_BIND != 0 }) < 0 {
		t.Fatal("rootless plan does not bind the host's /dev/null")
	}
	if !strings.Contains(p.Steps[stepIndex(p, func(s Step) bool { return s.FSType == "overlay" })].Data, "userxattr") {
		t.Fatal("rootless overlay needs userxattr")
	}
}

func TestPlanLandlockExcludesReadOnlyBinds(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPlan(&Spec{Args: []string{"true"}, Binds: []Bind{{Source: dir, Target: "/data", ReadOnly: true}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Landlock {
		if r.Path == "/" || r.Path == "/data" || strings.HasPrefix(r.Path, "/data/") {
			t.Fatalf("rule %v grants writes to the read-only bind", r)
		}
	}
	if !slices.ContainsFunc(p.Landlock, func(r landlock.Rule) bool { return r.Path == "/tmp" && r.Rights == landlock.Writable }) {
		t.Fatalf("/tmp is not writable: %v", p.Landlock)
	}
}

func TestSpecValidation(t *testing.T) {
	file := t.TempDir() + "/f"
	os.WriteFile(file, nil, 0o644)
	cases := map[string]*Spec{
		"empty command":    {Args: []string{""}},
		"missing rootfs":   {Args: []string{"x"}, RootFS: "/does/not/exist"},
		"rootfs is a file": {Args: []string{"x"}, RootFS: file},
		"relative workdir": {Args: []string{"x"}, Workdir: "tmp"},
		"bind over /proc":  {Args: []string{"x"}, Binds: []Bind{{Source: "/tmp", Target: "/proc/sys"}}},
		"bind over /":      {Args: []string{"x"}, Binds: []Bind{{Source: "/tmp", Target: "/"}}},
		"missing source":   {Args: []string{"x"}, Binds: []Bind{{Source: "/does/not/exist", Target: "/x"}}},
		"bad env":          {Args: []string{"x"}, Env: []string{"=v"}},
	}
	for name, s := range cases {
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: got %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestParseBind(t *testing.T) {
	b, err := ParseBind("/a:/b:ro")
	if err != nil || b != (Bind{Source: "/a", Target: "/b", ReadOnly: true}) {
		t.Fatalf("got %+v, %v", b, err)
	}
	for _, bad := range []string{"/a", "a:/b", "/a:b", "/a:/b:rx", "/a:/b:ro:x"} {
		if _, err := ParseBind(bad); err == nil {
			t.Errorf("ParseBind(%q) accepted", bad)
		}
	}
}

func TestEnvAndCandidates(t *testing.T) {
	env := buildEnv(&Spec{Env: []string{"PATH=/opt/bin:/bin", "X=1"}}, "h")
	if !slices.Contains(env, "PATH=/opt/bin:/bin") || !slices.Contains(env, "X=1") || !slices.Contains(env, "HOSTNAME=h") {
		t.Fatalf("env %v", env)
	}
	if got := candidates("ls", env); !slices.Equal(got, []string{"/opt/bin/ls", "/bin/ls"}) {
		t.Fatalf("candidates %v", got)
	}
	if got := candidates("./x", env); !slices.Equal(got, []string{"./x"}) {
		t.Fatalf("candidates %v", got)
	}
}
