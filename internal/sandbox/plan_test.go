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

// Bind targets are resolved inside the new root, as the sandbox will see
// it: symlinks in a rootfs stay in it, the fresh /tmp is empty, and a
// symlink into a tree tine builds is refused like the tree.
func TestPlanBindTargetsResolvedInsideTheRoot(t *testing.T) {
	root, src := t.TempDir(), t.TempDir()
	for _, d := range []string{"etc", "tmp/hostonly", "opt/real"} {
		os.MkdirAll(root+"/"+d, 0o755)
	}
	for link, to := range map[string]string{"abs": "/etc", "up": "../../../../../../opt/real", "chain": "abs", "loop": "loop",
		"knobs": "/proc/sys", "intmp": "/tmp/hostonly", "file": "/etc/passwd"} {
		if err := os.Symlink(to, root+"/"+link); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(root+"/etc/passwd", nil, 0o644)
	plan := func(target string) (*Plan, error) {
		return NewPlan(&Spec{Args: []string{"true"}, RootFS: root, Binds: []Bind{{Source: src, Target: target}}}, false)
	}
	for target, want := range map[string]string{
		"/abs/x": "/etc/x", "/up/x": "/opt/real/x", "/chain/y/z": "/etc/y/z", "/abs/../opt": "/opt",
		// The fresh /tmp has nothing of the base's /tmp in it.
		"/intmp/x": "/tmp/hostonly/x",
	} {
		p, err := plan(target)
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		if got := p.Binds[0].Target; got != want {
			t.Errorf("%s resolves to %s, want %s", target, got, want)
		}
		// Everything made for the bind is made beneath the root, on the
		// resolved path.
		for _, st := range p.Steps {
			if st.Beneath && !strings.HasPrefix(st.Target, p.Root+"/") {
				t.Errorf("%s: step %v is not beneath the root", target, st)
			}
		}
		mkdirs := 0
		for _, st := range p.Steps {
			if st.Beneath && st.Kind == StepMkdir && strings.HasPrefix(want, "/tmp/") && st.Target == p.Root+"/tmp/hostonly" {
				mkdirs++
			}
		}
		if strings.HasPrefix(want, "/tmp/") && mkdirs != 1 {
			t.Errorf("%s: /tmp/hostonly is not made in the sandbox's empty /tmp", target)
		}
	}
	for target, says := range map[string]string{"/loop/x": "too many levels", "/knobs/x": "/proc", "/file/x": "not a directory"} {
		if _, err := plan(target); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: got %v, want ErrInvalidSpec saying %q", target, err, says)
		}
	}
	// A bind source that is a symlink is refused, and says where it points.
	link := t.TempDir() + "/link"
	os.Symlink(src, link)
	if _, err := NewPlan(&Spec{Args: []string{"true"}, Binds: []Bind{{Source: link, Target: "/x"}}}, false); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), src) {
		t.Errorf("symlink source: got %v", err)
	}
}

// Setuid takes nosuid off the root's overlay only (a bind keeps it; /tmp,
// a bind of the stage's nosuid tmpfs, is checked running, in
// TestSetuidProgramsBecomeTheSandboxsRoot), and is refused where its
// walls are not the ones it was made for.
func TestPlanSetuid(t *testing.T) {
	root := func(p *Plan) Step {
		i := stepIndex(p, func(s Step) bool { return s.FSType == "overlay" && s.Target == p.Root })
		if i < 0 {
			t.Fatal("no root overlay")
		}
		return p.Steps[i]
	}
	plain, err := NewPlan(&Spec{Args: []string{"true"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if root(plain).Flags&unix.MS_NOSUID == 0 {
		t.Fatal("the default root overlay is mounted without nosuid")
	}
	dir := t.TempDir()
	p, err := NewPlan(&Spec{Args: []string{"true"}, Setuid: true, Binds: []Bind{{Source: dir, Target: "/data"}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if f := root(p).Flags; f&unix.MS_NOSUID != 0 || f&unix.MS_NODEV == 0 {
		t.Fatalf("setuid root overlay flags %#x, want nodev without nosuid", f)
	}
	for _, s := range p.Steps {
		if s.Target == p.Root+"/data" && s.Kind == StepBind && s.Flags&unix.MS_NOSUID == 0 {
			t.Errorf("%v lost nosuid", s)
		}
	}
	for name, s := range map[string]*Spec{
		"userns": {Args: []string{"true"}, Setuid: true, UserNS: true},
		"zygote": {Setuid: true, Zygote: true},
	} {
		if _, err := NewPlan(s, false); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "setuid") {
			t.Errorf("%s: %v, want an invalid-spec error naming setuid", name, err)
		}
	}
	if _, err := NewPlan(&Spec{Args: []string{"true"}, Setuid: true}, true); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("rootless: %v, want an invalid-spec error", err)
	}
}
