package sandbox

// Binds, both sides: the parent holds each bind source by a descriptor
// from its check to a detached mount the child moves into place, and the
// child makes and mounts on targets it walks from a descriptor of the new
// root without following any symlink.

import (
	"fmt"
	"path"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openBindSources returns a detached mount (open_tree OPEN_TREE_CLONE) of
// each of the plan's bind sources, cloned from an O_PATH|O_NOFOLLOW
// descriptor of the very file the plan checked (same device and inode):
// that is the one mounted, however its path changes meanwhile. The caller closes them once the child holds its
// copies. A rootless parent cannot clone mounts: it returns nil, and the
// child clones by path (cloneBindSources).
func openBindSources(p *Plan) ([]int, error) {
	if p.Rootless {
		return nil, nil
	}
	trees := make([]int, 0, len(p.Binds))
	fail := func(err error) ([]int, error) {
		for _, fd := range trees {
			unix.Close(fd)
		}
		return nil, err
	}
	for _, b := range p.Binds {
		fd, err := unix.Open(b.Source, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("%w: bind source %s: %v", ErrInvalidSpec, b.Source, err))
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && (st.Dev != b.dev || st.Ino != b.ino) {
			err = fmt.Errorf("replaced while the sandbox was planned; try again")
		}
		if err != nil {
			unix.Close(fd)
			return fail(fmt.Errorf("%w: bind source %s: %v", ErrInvalidSpec, b.Source, err))
		}
		tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fail(fmt.Errorf("%w: bind source %s: clone a mount of it: %v", ErrSetup, b.Source, err))
		}
		trees = append(trees, tree)
	}
	return trees, nil
}

// cloneBindSources is the rootless child's openBindSources: first thing,
// before any mount of its own hides a host path (the stage over /tmp), it
// clones each source by path into its slot (moveDescriptors keeps it
// taken), not following a symlink in the last element.
func (pg *program) cloneBindSources(p *Plan) {
	for i, b := range p.Binds {
		what := "clone bind source " + b.Source
		pg.addSetup(what, sys(unix.SYS_OPEN_TREE, atFdcwd, pg.cstr(b.Source), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW).saving(2))
		pg.addSetup(what, sys(unix.SYS_DUP3, 0, uintptr(slotBinds+i), unix.O_CLOEXEC).using(2, 0))
		pg.addSetup(what, sys(unix.SYS_CLOSE, 0).using(2, 0))
	}
}

// beneathOps compiles a Beneath step: its target is walked from register
// 3, a descriptor of the new root opened by the first such step, with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS; the last element is made with an
// *at call, which never follows it, or mounted on through its descriptor.
func (pg *program) beneathOps(st Step) ([]op, error) {
	rel, ok := strings.CutPrefix(st.Target, pg.root+"/")
	if !ok || rel == "" {
		return nil, fmt.Errorf("step %v: target is not inside the new root %s", st, pg.root)
	}
	var ops []op
	if !pg.rootOpen {
		pg.rootOpen = true
		ops = append(ops, sys(unix.SYS_OPENAT, atFdcwd, pg.cstr(pg.root), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC).saving(3))
	}
	dir, name := path.Split(rel)
	// create makes the last element in the target's directory: the root
	// (register 3), or a descriptor of it in register 1.
	create := func(o op) []op {
		o = o.tolerating(unix.EEXIST)
		if dir == "" {
			return append(ops, o.using(3, 0))
		}
		return append(ops,
			pg.openat2(0, strings.TrimSuffix(dir, "/"), pg.howDir).using(3, 0).saving(1),
			o.using(1, 0),
			sys(unix.SYS_CLOSE, 0).using(1, 0))
	}
	switch st.Kind {
	case StepMkdir:
		return create(sys(unix.SYS_MKDIRAT, 0, pg.cstr(name), uintptr(st.Mode))), nil
	case StepTouch:
		return create(sys(unix.SYS_MKNODAT, 0, pg.cstr(name), uintptr(unix.S_IFREG|st.Mode), 0)), nil
	case StepBind:
		src := uintptr(slotBinds + st.Bind)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if st.Flags&unix.MS_RDONLY != 0 {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		empty := pg.cstr("")
		return append(ops,
			sys(unix.SYS_MOUNT_SETATTR, src, empty, unix.AT_EMPTY_PATH, pg.ptr(attr, unsafe.Pointer(attr)), unsafe.Sizeof(*attr)),
			pg.openat2(0, rel, pg.howAny).using(3, 0).saving(1),
			sys(unix.SYS_MOVE_MOUNT, src, empty, 0, empty, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH).using(1, 2),
			sys(unix.SYS_CLOSE, 0).using(1, 0),
			sys(unix.SYS_CLOSE, src),
		), nil
	}
	return nil, fmt.Errorf("step %v cannot be made beneath the root", st)
}
