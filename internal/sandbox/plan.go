package sandbox

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tine-run/tine/internal/kernel/landlock"
	"golang.org/x/sys/unix"
)

// StageDir is the host directory over which each sandbox, in its own mount
// namespace, mounts the tmpfs that holds its root. Nothing is created in it
// on the host side, so there is nothing per-sandbox to leak. A rootless
// sandbox cannot create it and stages over /tmp instead (any directory
// works: the mount is private to the sandbox).
const StageDir = "/run/tine/stage"

const rootlessStageDir = "/tmp"

// StepKind says which filesystem operation a Step performs.
type StepKind int

const (
	StepMount StepKind = iota
	StepMkdir
	StepMknod
	StepSymlink
	StepTouch // create an empty file to bind a file over
	// StepBind binds Plan.Binds[Bind] (held by a descriptor from plan to
	// mount) on Target, with Flags' MS_RDONLY, MS_NOSUID and MS_NODEV.
	StepBind
	// StepUpper makes a directory or an empty file (Mode has S_IFDIR or
	// S_IFREG) in an overlay's upper layer with exactly Mode, UID and GID;
	// Data, when set, names the opaque xattr that hides the lower
	// directory's entries (the host view, hostview.go).
	StepUpper
)

// Step is one filesystem operation of the child's setup, in host-view paths
// (before pivot_root).
type Step struct {
	Kind   StepKind
	Source string // mount source; symlink target
	Target string // path operated on
	FSType string
	Flags  uintptr
	Data   string
	Mode   uint32
	Dev    uint64
	// UID and GID own a StepUpper entry.
	UID, GID uint32
	// Optional steps are skipped when their target does not exist (masks
	// of /proc files a kernel may not have).
	Optional bool
	// InNetns steps run after the child has entered its network namespace
	// (sysfs shows the mounter's network namespace).
	InNetns bool
	// Beneath steps (a bind and the directories and file made for it) have
	// a Target inside the new root that the plan resolved there; the child
	// walks it from a descriptor of the root and refuses any symlink, so a
	// base changed since can fail the setup but never redirect it.
	Beneath bool
	Bind    int // StepBind: index in Plan.Binds
	// Ahead steps, of a spare fork child's plan, build its /proc, /dev and
	// /sys under the stage before its root exists (Plan.buildAhead).
	Ahead bool
}

func (s Step) String() string {
	switch s.Kind {
	case StepMount:
		if s.Flags&unix.MS_REMOUNT != 0 {
			return fmt.Sprintf("remount %s", s.Target)
		}
		if s.Flags&unix.MS_BIND != 0 {
			return fmt.Sprintf("bind %s on %s", s.Source, s.Target)
		}
		return fmt.Sprintf("mount %s on %s", s.FSType, s.Target)
	case StepMkdir:
		return "mkdir " + s.Target
	case StepMknod:
		return "mknod " + s.Target
	case StepSymlink:
		return fmt.Sprintf("symlink %s -> %s", s.Target, s.Source)
	case StepTouch:
		return "create " + s.Target
	case StepBind:
		return fmt.Sprintf("bind %s on %s", s.Source, s.Target)
	case StepUpper:
		return "make " + s.Target + " in the upper layer"
	}
	return "step"
}

// Plan is a Spec made concrete: every mount, rule and limit the sandbox
// gets, as plain data. It is built without touching the kernel.
type Plan struct {
	// RootSteps, for a live fork's child (Spec.ForkOf), is how many of
	// Steps make its root before its user namespace exists.
	RootSteps int
	// lateRoot, for a spare fork child (CreateSpare), is its stage and
	// root overlay, made by the daemon (livefork_spare_linux.go) rather
	// than by steps.
	lateRoot *lateRoot

	Spec *Spec
	// Rootless: run by an unprivileged user (in a user namespace, without
	// cgroups). UserNS: in a user namespace (rootless, or Spec.UserNS).
	Rootless, UserNS bool
	// Stage is the directory the sandbox's tmpfs is mounted over, and Root
	// where the new root is assembled in it (host view) before pivot_root.
	Stage string
	Root  string
	Steps []Step
	// Binds are the spec's binds as planned, in the order they are mounted.
	Binds []PlannedBind
	// Landlock lists the write rules, in sandbox paths.
	Landlock []landlock.Rule
	// Argv, Env and Workdir of the command; Candidates are the paths execve
	// tries, in PATH order.
	Argv       []string
	Env        []string
	Workdir    string
	Candidates []string
	Hostname   string
}

// devices are the nodes of the sandbox's minimal /dev.
var devices = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// maskedPaths are hidden (host information or kernel knobs); readOnlyPaths
// stay visible but cannot be written. The lists follow Docker's.
var (
	maskedFiles = []string{
		"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
		"/proc/timer_stats", "/proc/sched_debug", "/proc/interrupts",
	}
	maskedDirs    = []string{"/proc/acpi", "/proc/asound", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	readOnlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
		// PID 1's OOM score (set before these mounts, see addOOMScore):
		// the tenant's root could otherwise raise it and choose when its
		// reaper dies.
		"/proc/1/oom_score_adj", "/proc/1/oom_adj", "/proc/1/task/1/oom_score_adj", "/proc/1/task/1/oom_adj"}
)

// NewPlan builds the plan for s. rootless selects a user-namespace sandbox
// run by an unprivileged user; s.UserNS one run by root.
func NewPlan(s *Spec, rootless bool) (*Plan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	stage := StageDir
	if rootless {
		stage = rootlessStageDir
	}
	userns := rootless || s.UserNS || s.ForkOf != nil
	if s.Setuid && (userns || s.Zygote || s.RootInPlace) {
		return nil, fmt.Errorf("%w: set-user-ID programs (setuid) are for a sandbox of root's over tine's own overlay root: not with a user namespace, a zygote or an in-place root", ErrInvalidSpec)
	}
	p := &Plan{Spec: s, Rootless: rootless, UserNS: userns, Stage: stage, Root: stage + "/root"}
	p.Hostname = s.Hostname
	if p.Hostname == "" {
		p.Hostname = "tine"
	}
	p.Workdir = s.Workdir
	if p.Workdir == "" {
		p.Workdir = "/"
	}
	p.Env = buildEnv(s, p.Hostname)
	p.Argv = s.Args
	if len(s.Args) > 0 {
		p.Candidates = candidates(s.Args[0], p.Env)
	}

	disk := s.DiskBytes
	if disk <= 0 {
		disk = DefaultDisk
	}
	lower := "/"
	if s.RootFS != "" {
		lower = s.RootFS
	}
	R := p.Root
	add := func(st Step) { p.Steps = append(p.Steps, st) }
	mount := func(src, target, fstype string, flags uintptr, data string) {
		add(Step{Kind: StepMount, Source: src, Target: target, FSType: fstype, Flags: flags, Data: data})
	}
	mkdir := func(dir string, mode uint32) { add(Step{Kind: StepMkdir, Target: dir, Mode: mode}) }
	const nsd = unix.MS_NOSUID | unix.MS_NODEV

	// The root: an overlay of the read-only base and a size-limited tmpfs.
	// A spare fork child's stage is mounted by the daemon, in a mount
	// namespace its first process joins (lateRoot).
	stageData := fmt.Sprintf("size=%d,mode=0755", disk)
	if s.spare != nil {
		if s.ForkOf == nil || s.RootInPlace {
			return nil, fmt.Errorf("%w: a spare is a live fork's child (Spec.ForkOf) over tine's overlay root", ErrInvalidSpec)
		}
		p.lateRoot = &lateRoot{stageData: stageData, stageFlags: nsd, root: R, stage: stage, ns: -1}
	} else {
		mount("tmpfs", stage, "tmpfs", nsd, stageData)
	}
	mkdir(stage+"/upper", 0o755)
	mkdir(stage+"/work", 0o755)
	mkdir(R, 0o755)
	if s.RootInPlace {
		// The caller's rootfs is the root, written in place (an OCI
		// bundle's); made read-only at the end when asked.
		mount(s.RootFS, R, "", unix.MS_BIND|unix.MS_REC, "")
	} else if userns && s.RootFS == "" && s.ForkOf == nil {
		if len(s.Layers) > 0 {
			return nil, fmt.Errorf("%w: a rootless or --userns sandbox over the host's root cannot stack layers (forks of snapshots need root without --userns)", ErrInvalidSpec)
		}
		if err := p.addRootlessHostRoot(stage, p.hostView()); err != nil {
			return nil, err
		}
	} else {
		// The os view's hidden entries go in a layer of their own, just
		// over the base: they hide the host's data and nothing above, so
		// a fork's snapshot layers (stacked over them) keep what the
		// golden wrote in /root or /home, and the upper, which a snapshot
		// captures, holds only the sandbox's own writes.
		lowers := append(append([]string(nil), s.Layers...), lower)
		if view := p.hostView(); view != nil {
			mkdir(stage+"/view", 0o755)
			p.addHostView(view, "/", stage+"/view", "trusted.overlay.opaque", true)
			lowers = slices.Insert(lowers, len(lowers)-1, stage+"/view")
		}
		if lr := p.lateRoot; lr != nil {
			// Everything up to the root overlay runs ahead; the overlay
			// comes at Complete, the fork's layers over these (s.Layers
			// too: an image's).
			lr.under, lr.setuid = slices.Clone(lowers), s.Setuid
			p.RootSteps = len(p.Steps)
		}
		for i, l := range lowers {
			lowers[i] = escapeOverlay(l)
		}
		ovl := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", strings.Join(lowers, ":"), stage, stage)
		if userns && s.ForkOf == nil {
			ovl += ",userxattr"
		}
		if len(ovl) > maxMountData {
			// mount(2) would cut the options at a page, mid-path, and
			// fail on a directory that does not exist.
			return nil, fmt.Errorf("%w: the root stacks %d layers (%d bytes of overlay options; one mount takes %d): too many to mount (images are flattened to fit; a stack of snapshots is not)", ErrInvalidSpec, len(lowers), len(ovl), maxMountData)
		}
		rootFlags := uintptr(nsd)
		if s.Setuid {
			rootFlags = unix.MS_NODEV // sudo's set-user-ID bit counts (Spec.Setuid)
		}
		switch {
		case p.lateRoot != nil:
			// Mounted by the daemon at Complete (lateRoot.attach).
		case s.ForkOf != nil:
			mount("overlay", R, "overlay", rootFlags, ovl)
			// A live fork's child: the steps so far run before its user
			// namespace exists (nestedHop), with the host's privilege, as
			// for any root sandbox: a user namespace can neither take "/"
			// (its submounts are locked there) as an overlay's lower nor
			// read trusted.overlay.* markers. PID 1 inherits the overlay
			// locked; pivot_root wants a mount of its own.
			p.RootSteps = len(p.Steps)
			mount(R, R, "", unix.MS_BIND, "")
		default:
			mount("overlay", R, "overlay", rootFlags, ovl)
		}
	}

	// /proc, /dev, /tmp, /run, /sys.
	mkdir(R+"/proc", 0o555)
	mount("proc", R+"/proc", "proc", nsd|unix.MS_NOEXEC, "")
	mkdir(R+"/dev", 0o755)
	mount("tmpfs", R+"/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=65536,nr_inodes=64")
	for _, d := range devices {
		node := R + "/dev/" + d.name
		if userns {
			// mknod is not allowed in a user namespace: bind the host's node.
			add(Step{Kind: StepTouch, Target: node, Mode: 0o666})
			mount("/dev/"+d.name, node, "", unix.MS_BIND, "")
		} else {
			add(Step{Kind: StepMknod, Target: node, Mode: unix.S_IFCHR | 0o666, Dev: unix.Mkdev(d.major, d.minor)})
		}
	}
	for _, l := range [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
		add(Step{Kind: StepSymlink, Source: l[0], Target: R + "/dev/" + l[1]})
	}
	mkdir(R+"/dev/pts", 0o755)
	mkdir(R+"/dev/shm", 0o1777)
	for _, m := range s.Mounts {
		if strings.HasPrefix(m.Target, "/dev/") {
			mkdir(R+m.Target, 0o755) // before /dev goes read-only
		}
	}
	// /dev itself is read-only: no device node can be made where nodes work.
	mount("", R+"/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
	ptsData := "newinstance,ptmxmode=0666,mode=0620"
	if !rootless {
		ptsData += ",gid=5"
	}
	mount("devpts", R+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, ptsData)
	mount("tmpfs", R+"/dev/shm", "tmpfs", nsd, "mode=1777,size=67108864")
	// /tmp and /run are directories of the stage's tmpfs, bound: they
	// share the --disk bytes with the writable layer, so a sandbox's
	// storage (charged to its memory cgroup, being tmpfs) has one bound.
	// (An in-place root keeps its own, or has them in s.Mounts.)
	for _, d := range []struct {
		name string
		mode uint32
	}{{"tmp", 0o1777}, {"run", 0o755}} {
		if s.RootInPlace {
			break
		}
		add(Step{Kind: StepUpper, Target: stage + "/" + d.name, Mode: unix.S_IFDIR | d.mode})
		mkdir(R+"/"+d.name, d.mode)
		mount(stage+"/"+d.name, R+"/"+d.name, "", unix.MS_BIND, "")
	}
	mkdir(R+"/sys", 0o555)
	add(Step{Kind: StepMount, Source: "sysfs", Target: R + "/sys", FSType: "sysfs", Flags: nsd | unix.MS_NOEXEC | unix.MS_RDONLY, InNetns: true})

	// In the full host view, the host's secret directories are empty;
	// binds into them land on the empty tmpfs. (The os view hides them in
	// the upper layer.)
	if s.RootFS == "" && s.HostView == HostViewFull {
		for _, d := range hostSecretDirs {
			add(Step{Kind: StepMount, Source: "tmpfs", Target: R + d, FSType: "tmpfs", Flags: nsd, Data: "mode=0700,size=16m", Optional: true})
		}
	}

	for _, m := range s.Mounts {
		if !strings.HasPrefix(m.Target, "/dev/") {
			// Made beneath the root, parents too (an OCI bundle's rootfs
			// may lack them), never through a symlink out of it.
			for _, d := range append(ancestors(m.Target), m.Target) {
				add(Step{Kind: StepMkdir, Target: R + d, Mode: 0o755, Beneath: true})
			}
		}
		mount(m.Source, R+m.Target, m.Type, m.Flags, m.Data)
	}

	// User binds, shallowest first so nested targets land on their parents.
	v, err := p.addBinds(lower)
	if err != nil {
		return nil, err
	}

	// The host's secret files, in the full host view: the sandbox's root
	// is uid 0, which owns them, so only a mask keeps them unread. (The
	// os view empties them in the upper layer.)
	if s.RootFS == "" && s.HostView == HostViewFull {
		for _, f := range hostSecretFiles() {
			add(Step{Kind: StepMount, Source: R + "/dev/null", Target: R + f, Flags: unix.MS_BIND, Optional: true})
		}
	}

	// Masks and read-only kernel knobs, last, so nothing can be mounted over them.
	for _, f := range maskedFiles {
		add(Step{Kind: StepMount, Source: R + "/dev/null", Target: R + f, Flags: unix.MS_BIND, Optional: true})
	}
	for _, d := range maskedDirs {
		add(Step{Kind: StepMount, Source: "tmpfs", Target: R + d, FSType: "tmpfs", Flags: unix.MS_RDONLY | nsd | unix.MS_NOEXEC, Data: "size=0", Optional: true, InNetns: strings.HasPrefix(d, "/sys/")})
	}
	for _, f := range append(slices.Clone(readOnlyPaths), s.ReadOnlyPaths...) {
		add(Step{Kind: StepMount, Source: R + f, Target: R + f, Flags: unix.MS_BIND | unix.MS_REC, Optional: true})
		add(Step{Kind: StepMount, Target: R + f, Flags: unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | nsd | unix.MS_NOEXEC, Optional: true})
	}
	// A spec's masks, file or directory: whichever mount fits is made.
	for _, f := range s.MaskedPaths {
		add(Step{Kind: StepMount, Source: R + "/dev/null", Target: R + f, Flags: unix.MS_BIND, Optional: true})
		add(Step{Kind: StepMount, Source: "tmpfs", Target: R + f, FSType: "tmpfs", Flags: unix.MS_RDONLY | nsd | unix.MS_NOEXEC, Data: "size=0", Optional: true})
	}
	if s.ReadOnlyRoot {
		add(Step{Kind: StepMount, Target: R, Flags: unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY, Optional: false})
	}

	p.Landlock = p.landlockRules(v)
	if lr := p.lateRoot; lr != nil {
		p.buildAhead()
		// What the spare's mount namespace keeps of the host's: the
		// stage's directory, every lower, and what is mounted from.
		lr.keep = append([]string{stage, lower}, s.Layers...)
		lr.keep = append(lr.keep, s.spare.keep...)
		for _, m := range s.Mounts {
			if path.IsAbs(m.Source) {
				lr.keep = append(lr.keep, m.Source)
			}
		}
		for _, b := range p.Binds {
			lr.keep = append(lr.keep, b.Source)
		}
	}
	return p, nil
}

// hostSecretDirs are host directories the full host view gets empty (a
// private tmpfs): root's home, and tine's own state (the daemon's token
// when it listens on TCP with the old default data directory).
var hostSecretDirs = []string{"/root", "/var/lib/tine"}

// hostSecretFiles lists the host files the full host view shows as empty:
// password hashes and SSH host keys.
func hostSecretFiles() []string {
	var out []string
	for _, pattern := range alwaysHidden {
		m, _ := filepath.Glob(pattern)
		out = append(out, m...)
	}
	return out
}

// ownMounts are the top-level trees every sandbox gets fresh.
var ownMounts = map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true}

// addRootlessHostRoot builds the root of a rootless sandbox over the host's
// root. In a user namespace every inherited mount is locked, and overlayfs
// refuses a lower layer with locked mounts beneath it (as the host's / has:
// /proc, /sys, ...), so the root is a tmpfs holding one overlay per
// top-level directory instead; a directory with mounts beneath it is bound
// read-only, and top-level files and symlinks are recreated or bound.
// view, when not nil, is the os host view: hidden top-level entries are
// empty, hidden ones below are made in an overlay's upper layer, or covered
// by an empty tmpfs (or /dev/null) in a directory bound read-only.
func (p *Plan) addRootlessHostRoot(stage string, view []viewEntry) error {
	entries, err := os.ReadDir("/")
	if err != nil {
		return fmt.Errorf("%w: list the host's root: %v", ErrSetup, err)
	}
	mounted := hostMountPoints()
	add := func(st Step) { p.Steps = append(p.Steps, st) }
	// pivot_root needs the new root to be a mount point.
	add(Step{Kind: StepMount, Source: p.Root, Target: p.Root, Flags: unix.MS_BIND})
	for _, e := range entries {
		name := e.Name()
		if ownMounts[name] {
			continue
		}
		host, target := "/"+name, p.Root+"/"+name
		switch hidden := slices.IndexFunc(view, func(v viewEntry) bool { return v.Path == host && v.Hide }); {
		case hidden >= 0:
			add(Step{Kind: StepUpper, Target: target, Mode: view[hidden].Mode})
		case e.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(host)
			if err != nil {
				continue
			}
			add(Step{Kind: StepSymlink, Source: link, Target: target})
		case e.IsDir() && hasMountBeneath(mounted, host):
			add(Step{Kind: StepMkdir, Target: target, Mode: 0o755})
			add(Step{Kind: StepMount, Source: host, Target: target, Flags: unix.MS_BIND | unix.MS_REC})
			add(Step{Kind: StepMount, Target: target, Flags: unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
			p.coverHostView(view, host, p.Root)
		case e.IsDir():
			for _, d := range []string{stage + "/upper/" + name, stage + "/work/" + name, target} {
				add(Step{Kind: StepMkdir, Target: d, Mode: 0o755})
			}
			p.addHostView(view, host, stage+"/upper/"+name, "user.overlay.opaque", false)
			add(Step{Kind: StepMount, Source: "overlay", Target: target, FSType: "overlay", Flags: unix.MS_NOSUID | unix.MS_NODEV,
				Data: fmt.Sprintf("lowerdir=%s,upperdir=%s/upper/%s,workdir=%s/work/%s,userxattr", escapeOverlay(host), stage, name, stage, name)})
		case e.Type().IsRegular():
			add(Step{Kind: StepTouch, Target: target, Mode: 0o644})
			add(Step{Kind: StepMount, Source: host, Target: target, Flags: unix.MS_BIND})
			add(Step{Kind: StepMount, Target: target, Flags: unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
		}
	}
	return nil
}

// hostMountPoints lists the mount points of tine's mount namespace.
func hostMountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

func hasMountBeneath(mounts []string, dir string) bool {
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			return true
		}
	}
	return false
}

// landlockRules grants writes beneath the root (the overlay, whose upper
// layer is the sandbox's own tmpfs) and the writable binds, except beneath
// read-only binds; /dev only allows writing to its existing nodes. The
// directories around a read-only bind are granted entry by entry, as the
// sandbox will see them (v): a fresh /tmp is empty, not the host's, and a
// symlink is no directory to walk (writes through it are checked where it
// points).
func (p *Plan) landlockRules(v *view) []landlock.Rule {
	var readOnly []string
	for _, b := range p.Binds {
		if b.ReadOnly {
			readOnly = append(readOnly, b.Target)
		}
	}
	children := func(dir string) []landlock.Entry {
		var out []landlock.Entry
		for _, name := range v.list(v.host(dir)) {
			switch v.lookup(v.host(path.Join(dir, name))).kind {
			case kindDir:
				out = append(out, landlock.Entry{Name: name, Dir: true})
			case kindFile, kindOther:
				out = append(out, landlock.Entry{Name: name})
			}
		}
		return out
	}
	rules := landlock.Rules([]string{"/"}, readOnly, children)
	rules = append(rules, landlock.Rule{Path: "/dev", Rights: landlock.FileWrite})
	return rules
}

// buildEnv gives the command a clean environment: defaults, then -e entries.
func buildEnv(s *Spec, hostname string) []string {
	env := []string{"PATH=" + DefaultPath, "HOME=/root", "HOSTNAME=" + hostname}
	if s.TTY {
		term := os.Getenv("TERM")
		if term == "" {
			term = "xterm"
		}
		env = append(env, "TERM="+term)
	}
	idx := map[string]int{}
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		idx[k] = i
	}
	for _, e := range s.Env {
		k, _, _ := strings.Cut(e, "=")
		if i, ok := idx[k]; ok {
			env[i] = e
			continue
		}
		idx[k] = len(env)
		env = append(env, e)
	}
	return env
}

// candidates lists the paths execve should try for name, like execvp.
func candidates(name string, env []string) []string {
	if strings.Contains(name, "/") {
		return []string{name}
	}
	pathVar := DefaultPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathVar = v
		}
	}
	var out []string
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			dir = "."
		}
		out = append(out, dir+"/"+name)
	}
	return out
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }

// maxMountData is what mount(2) takes of its options: a page, less the
// terminating NUL (measured: ADR 0019).
const maxMountData = 4095

// escapeOverlay escapes the characters overlayfs treats as separators.
func escapeOverlay(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// buildsAhead says the plan has Ahead steps (a spare's: buildAhead).
func (p *Plan) buildsAhead() bool {
	return slices.ContainsFunc(p.Steps, func(st Step) bool { return st.Ahead })
}

// aheadTrees are the roots of the trees a spare fork child builds before
// its root exists: kernel filesystems and tmpfs, nothing of the root's.
var aheadTrees = []string{"/proc", "/dev", "/sys"}

// buildAhead has a spare fork child build its /proc, /dev and /sys trees
// (their ~45 mounts and masks) under the stage while it idles, and move
// each onto its root, whole, once the fork has given it one (ADR 0013,
// session 8): the steps on them become Ahead steps at the same paths
// under stage/ahead, in the same order, and in their place come a mkdir
// and an MS_MOVE per tree. A plan with a step on those trees that needs
// the root (a user's bind, a path resolved beneath the root, a source in
// the root outside them) keeps its steps as they are.
func (p *Plan) buildAhead() {
	R, A := p.Root, p.Stage+"/ahead"
	under := func(path string) (string, bool) {
		for _, t := range aheadTrees {
			if path == R+t || strings.HasPrefix(path, R+t+"/") {
				return A + strings.TrimPrefix(path, R), true
			}
		}
		return path, false
	}
	rest := p.Steps[p.RootSteps:]
	var ahead, after []Step
	for _, st := range rest {
		target, in := under(st.Target)
		if !in {
			after = append(after, st)
			continue
		}
		switch st.Kind {
		case StepMount, StepMkdir, StepMknod, StepSymlink, StepTouch:
		default:
			return // a bind of the user's, an entry of the upper layer
		}
		if st.Beneath {
			return
		}
		if st.Kind == StepMount && strings.HasPrefix(st.Source, R+"/") {
			src, in := under(st.Source)
			if !in {
				return // a source in the root, which does not exist yet
			}
			st.Source = src
		}
		st.Target, st.Ahead = target, true
		ahead = append(ahead, st)
	}
	if len(ahead) == 0 {
		return
	}
	moves := []Step{{Kind: StepMkdir, Target: A, Mode: 0o755, Ahead: true}}
	for _, t := range aheadTrees {
		mode := uint32(0o555)
		if t == "/dev" {
			mode = 0o755
		}
		moves = append(moves, Step{Kind: StepMkdir, Target: R + t, Mode: mode},
			Step{Kind: StepMount, Source: A + t, Target: R + t, Flags: unix.MS_MOVE})
	}
	p.Steps = slices.Concat(p.Steps[:p.RootSteps], moves[:1], ahead, moves[1:], after)
}
