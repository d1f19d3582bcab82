package sandbox

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// PlannedBind is a bind of the spec as the plan mounts it.
type PlannedBind struct {
	// Source is the host path; its last element is never followed (see
	// checkBindSource), and the parent holds it by a descriptor from its
	// check to the mount (openBindSources).
	Source string
	// Target is the sandbox path it is mounted on, resolved inside the new
	// root: free of symlinks in the sandbox's view.
	Target   string
	Dir      bool
	ReadOnly bool
	// dev and ino identify the source the plan checked.
	dev, ino uint64
}

// addBinds plans the spec's binds, shallowest first so nested targets land
// on their parents: each target is resolved inside the new root as the
// sandbox sees it when the bind is made (the base, tine's own mounts, the
// binds before it), its missing directories (or file) are made there, and
// the bind is mounted on it. It returns the view after the binds (nil
// without binds).
func (p *Plan) addBinds(lower string) (*view, error) {
	if err := checkOwnMountPoints(p.Spec, lower); err != nil {
		return nil, err
	}
	if len(p.Spec.Binds) == 0 {
		return nil, nil // nothing to resolve, and Landlock walks nothing
	}
	v := newView(p.Root)
	for _, st := range p.Steps {
		v.apply(st)
	}
	add := func(st Step) {
		st.Beneath = true
		p.Steps = append(p.Steps, st)
		v.apply(st)
	}
	binds := append([]Bind(nil), p.Spec.Binds...)
	sort.SliceStable(binds, func(i, j int) bool { return depth(binds[i].Target) < depth(binds[j].Target) })
	for _, b := range binds {
		st, err := checkBindSource(b.Source)
		if err != nil {
			return nil, err
		}
		dir := st.IsDir()
		target, at, err := v.resolve(b.Target)
		if err != nil {
			return nil, fmt.Errorf("%w: bind target %v", ErrInvalidSpec, err)
		}
		if err := checkReserved(target); err != nil {
			if target != path.Clean(b.Target) {
				return nil, fmt.Errorf("%w (through a symlink: %s resolves to %s in the sandbox)", err, b.Target, target)
			}
			return nil, err
		}
		for _, d := range ancestors(target) {
			if v.lookup(v.host(d)).kind == kindNone {
				add(Step{Kind: StepMkdir, Target: v.host(d), Mode: 0o755})
			}
		}
		switch {
		case at.kind == kindNone && dir:
			add(Step{Kind: StepMkdir, Target: v.host(target), Mode: 0o755})
		case at.kind == kindNone:
			add(Step{Kind: StepTouch, Target: v.host(target), Mode: 0o644})
		case dir && at.kind != kindDir:
			return nil, fmt.Errorf("%w: bind target %s is a file in the sandbox, and %s is a directory", ErrInvalidSpec, b.Target, b.Source)
		case !dir && at.kind == kindDir:
			return nil, fmt.Errorf("%w: bind target %s is a directory in the sandbox, and %s is a file", ErrInvalidSpec, b.Target, b.Source)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
		if b.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		pb := PlannedBind{Source: b.Source, Target: target, Dir: dir, ReadOnly: b.ReadOnly}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			pb.dev, pb.ino = uint64(sys.Dev), sys.Ino
		}
		p.Binds = append(p.Binds, pb)
		add(Step{Kind: StepBind, Source: b.Source, Target: v.host(target), Flags: flags, Bind: len(p.Binds) - 1})
	}
	return v, nil
}

// ancestors lists the directories above sandbox path p below /, shallowest first.
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// checkReserved refuses a bind target in the trees tine builds itself
// (/dev/shm and beneath it are allowed: a bind there hides or lands in
// the sandbox's own tmpfs, as a pod's shared shm does).
func checkReserved(target string) error {
	t := path.Clean(target)
	if t == "/" {
		return fmt.Errorf("%w: bind target / would hide the whole root; use --rootfs", ErrInvalidSpec)
	}
	if t == "/dev/shm" || strings.HasPrefix(t, "/dev/shm/") {
		return nil // the sandbox's own tmpfs, nodev like every bind
	}
	for _, r := range reservedTargets {
		if t == r || strings.HasPrefix(t, r+"/") {
			return fmt.Errorf("%w: bind target %s is inside %s, which tine builds itself", ErrInvalidSpec, t, r)
		}
	}
	return nil
}

// checkBindSource checks a bind's host path and returns what it is. Its
// last element must not be a symlink: a sandbox can plant
// one in a writable bind, and binding what it points at would hand the
// next sandbox any host path. The directories above it are the caller's
// to trust (see README, "-v").
func checkBindSource(src string) (os.FileInfo, error) {
	st, err := os.Lstat(src)
	if err != nil {
		return nil, fmt.Errorf("%w: bind source %s: %v", ErrInvalidSpec, src, err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		link, _ := os.Readlink(src)
		hint := ""
		if real, err := filepath.EvalSymlinks(src); err == nil {
			hint = " (" + real + ")"
		}
		return nil, fmt.Errorf("%w: bind source %s is a symlink (to %s); tine does not follow it, since a sandbox may have planted it; bind the real path instead%s", ErrInvalidSpec, src, link, hint)
	}
	if !st.IsDir() && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: bind source %s is neither a directory nor a regular file", ErrInvalidSpec, src)
	}
	return st, nil
}

// checkOwnMountPoints refuses a --rootfs whose /proc, /dev, /tmp, /run or
// /sys is a symlink or a file: tine mounts the sandbox's own there, and a
// symlink would send the mount (and what is made in it) elsewhere.
func checkOwnMountPoints(s *Spec, lower string) error {
	if s.RootFS == "" {
		return nil
	}
	names := make([]string, 0, len(ownMounts))
	for n := range ownMounts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch e := lstatEntry(filepath.Join(lower, n)); e.kind {
		case kindNone, kindDir:
		case kindSymlink:
			return fmt.Errorf("%w: --rootfs %s: /%s is a symlink (to %s); tine mounts the sandbox's own /%s there, so it must be a directory (or absent)", ErrInvalidSpec, s.RootFS, n, e.link, n)
		default:
			return fmt.Errorf("%w: --rootfs %s: /%s is not a directory; tine mounts the sandbox's own /%s there", ErrInvalidSpec, s.RootFS, n, n)
		}
	}
	return nil
}
