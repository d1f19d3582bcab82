package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// view is the child's filesystem as the plan's steps build it, replayed at
// plan time: the host's mount namespace, then each step's mount, directory,
// node and symlink. Bind targets are resolved in it, inside the new root,
// so that a symlink in the base (an absolute one in a --rootfs, the host's
// /var/run -> /run) means what it will mean inside the sandbox — /var/run
// is the sandbox's own fresh /run — and never leads a mount or a mkdir to
// the host. Landlock's rules for read-only binds list directories in it.
type view struct {
	root   string // host-view path of the new root (Plan.Root)
	mounts []*vmount
}

// vfs is one filesystem of the view.
type vfs struct {
	// hosts are the host directories (or the file) holding its content,
	// topmost first: one, or an overlay's lower layers (a fork's snapshot
	// layers over its base), merged as overlayfs merges them; none for a
	// fresh filesystem, empty but for what the steps make in it.
	hosts []string
	// kernel names a kernel filesystem (proc, sysfs) whose content the
	// plan cannot know; nothing of the user's may be placed in one.
	kernel string
	// made are the entries steps created, by path from the filesystem's
	// root (an overlay's upper layer starts empty, so these are all it has).
	made map[string]ventry
}

// vmount is a filesystem (or a subtree of one: sub) mounted at a host-view path.
type vmount struct {
	at  string
	fs  *vfs
	sub string
	seq int
}

type entryKind int

const (
	kindNone entryKind = iota
	kindDir
	kindFile
	kindSymlink
	kindOther // device nodes, sockets, FIFOs
)

type ventry struct {
	kind entryKind
	link string // a symlink's target
}

func newView(root string) *view {
	return &view{root: root, mounts: []*vmount{{at: "/", fs: &vfs{hosts: []string{"/"}, made: map[string]ventry{}}}}}
}

// locate returns the mount visible at host-view path p and p's path in its
// filesystem. The visible mount is the deepest one covering p, the latest
// of those at the same place, unless a mount made later covers its place.
func (v *view) locate(p string) (*vmount, string) {
	var best *vmount
	for _, m := range v.mounts {
		if !covers(m.at, p) || (best != nil && len(m.at) < len(best.at)) {
			continue
		}
		if v.hidden(m) {
			continue
		}
		best = m
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, best.at), "/")
	return best, strings.TrimPrefix(path.Join(best.sub, rel), "/")
}

// hidden reports whether a mount made after m covers m's place.
func (v *view) hidden(m *vmount) bool {
	for _, o := range v.mounts {
		if o.seq > m.seq && o.at != m.at && covers(o.at, m.at) {
			return true
		}
	}
	return false
}

func covers(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// lookup describes host-view path p, which has no symlink before its last
// element, as the child will find it (lstat: a final symlink is not followed).
func (v *view) lookup(p string) ventry {
	m, key := v.locate(p)
	if e, ok := m.fs.made[key]; ok {
		return e
	}
	if m.fs.kernel != "" {
		return ventry{kind: kindOther}
	}
	if len(m.fs.hosts) == 0 {
		if key == "" {
			return ventry{kind: kindDir}
		}
		return ventry{}
	}
	for _, h := range m.fs.hosts {
		hp := path.Join(h, key)
		if e := lstatEntry(hp); e.kind != kindNone {
			if isWhiteout(hp) {
				return ventry{}
			}
			return e
		}
		if opaqueAbove(h, key) {
			break // the layers below are hidden here
		}
	}
	return ventry{}
}

// isWhiteout reports whether hostPath is an overlay whiteout (a character
// device 0:0): the name is deleted in the layers below.
func isWhiteout(hostPath string) bool {
	var st unix.Stat_t
	return unix.Lstat(hostPath, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// opaqueAbove reports whether a directory on key's way in layer h is
// opaque (trusted.overlay.opaque=y), hiding the layers below it.
func opaqueAbove(h, key string) bool {
	for d := path.Dir(strings.Trim(key, "/")); ; d = path.Dir(d) {
		if d == "." || d == "/" {
			d = ""
		}
		if isOpaque(path.Join(h, d)) {
			return true
		}
		if d == "" {
			return false
		}
	}
}

func isOpaque(dir string) bool {
	buf := make([]byte, 1)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

func lstatEntry(hostPath string) ventry {
	st, err := os.Lstat(hostPath)
	if err != nil {
		return ventry{}
	}
	switch {
	case st.IsDir():
		return ventry{kind: kindDir}
	case st.Mode()&fs.ModeSymlink != 0:
		link, _ := os.Readlink(hostPath)
		return ventry{kind: kindSymlink, link: link}
	case st.Mode().IsRegular():
		return ventry{kind: kindFile}
	}
	return ventry{kind: kindOther}
}

// list returns the names in directory p (host view), mount points included.
func (v *view) list(p string) []string {
	m, key := v.locate(p)
	seen := map[string]bool{}
	deleted := map[string]bool{}
	for _, h := range m.fs.hosts {
		if m.fs.kernel != "" {
			break
		}
		dir := path.Join(h, key)
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				switch {
				case deleted[e.Name()]:
				case isWhiteout(path.Join(dir, e.Name())):
					deleted[e.Name()] = true
				default:
					seen[e.Name()] = true
				}
			}
		}
		if opaqueAbove(h, path.Join(key, "x")) { // key itself, or a directory above it
			break
		}
	}
	for k := range m.fs.made {
		if dir, name := path.Split(k); strings.TrimSuffix(dir, "/") == key && name != "" {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// apply replays one step of the plan.
func (v *view) apply(st Step) {
	switch st.Kind {
	case StepMount:
		if st.Flags&unix.MS_REMOUNT != 0 {
			return
		}
		if st.Optional && v.lookup(st.Target).kind == kindNone {
			return // the child skips it too (ENOENT)
		}
		m := &vmount{at: st.Target, seq: len(v.mounts)}
		switch {
		case st.FSType == "overlay":
			m.fs = &vfs{hosts: overlayLowers(st.Data), made: map[string]ventry{}}
		case st.Flags&unix.MS_BIND != 0 && covers(v.root, st.Source):
			// A bind of something the setup made (/dev/null over a file).
			src, key := v.locate(st.Source)
			m.fs, m.sub = src.fs, key
		case st.Flags&unix.MS_BIND != 0 && covers(path.Dir(v.root), st.Source):
			// A directory of the stage's fresh tmpfs (/tmp, /run): empty.
			m.fs = &vfs{made: map[string]ventry{}}
		case st.Flags&unix.MS_BIND != 0:
			m.fs = &vfs{hosts: []string{st.Source}, made: map[string]ventry{}}
		case st.FSType == "proc" || st.FSType == "sysfs":
			m.fs = &vfs{kernel: st.FSType, made: map[string]ventry{}}
		default:
			m.fs = &vfs{made: map[string]ventry{}}
		}
		v.mounts = append(v.mounts, m)
	case StepBind:
		v.mounts = append(v.mounts, &vmount{at: st.Target, seq: len(v.mounts), fs: &vfs{hosts: []string{st.Source}, made: map[string]ventry{}}})
	case StepMkdir, StepMknod, StepSymlink, StepTouch:
		if v.lookup(st.Target).kind != kindNone {
			return // EEXIST
		}
		e := ventry{kind: kindDir}
		switch st.Kind {
		case StepMknod:
			e.kind = kindOther
		case StepSymlink:
			e = ventry{kind: kindSymlink, link: st.Source}
		case StepTouch:
			e.kind = kindFile
		}
		m, key := v.locate(st.Target)
		m.fs.made[key] = e
	}
}

// overlayLowers returns the lower directories of overlay options, topmost
// first.
func overlayLowers(data string) []string {
	for _, opt := range splitOverlayOptions(data) {
		if l, ok := strings.CutPrefix(opt, "lowerdir="); ok {
			var out []string
			for _, one := range splitUnescaped(l, ':') {
				out = append(out, unescapeOverlay(one))
			}
			return out
		}
	}
	return nil
}

// splitOverlayOptions splits at commas that escapeOverlay did not escape.
func splitOverlayOptions(data string) []string { return splitUnescaped(data, ',') }

// splitUnescaped splits s at each sep that escapeOverlay did not escape.
func splitUnescaped(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unescapeOverlay(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maxSymlinks bounds the symlinks followed resolving one path, as the
// kernel's 40.
const maxSymlinks = 40

var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolve resolves sandbox path p inside the new root as the sandbox will
// see it: symlinks are followed, an absolute one from the new root, and
// ".." stops at the root. Missing components stay as they are (the plan
// makes them). It returns the symlink-free sandbox path and what is there.
func (v *view) resolve(p string) (string, ventry, error) {
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	links := 0
	var last ventry
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			last = ventry{kind: kindDir}
			continue
		}
		next := path.Join(cur, c)
		e := v.lookup(v.host(next))
		if m, _ := v.locate(v.host(next)); m.fs.kernel != "" {
			return next, e, nil // the caller refuses it (reserved)
		}
		switch e.kind {
		case kindSymlink:
			if links++; links > maxSymlinks {
				return "", ventry{}, fmt.Errorf("%s: %w", p, errTooManyLinks)
			}
			if path.IsAbs(e.link) {
				cur = "/"
			}
			rest = append(strings.Split(e.link, "/"), rest...)
			continue
		case kindDir, kindNone:
		default:
			if len(rest) > 0 {
				return "", ventry{}, fmt.Errorf("%s: %s is not a directory", p, next)
			}
		}
		cur, last = next, e
	}
	if cur == "/" {
		last = ventry{kind: kindDir}
	}
	return cur, last, nil
}

// host turns a sandbox path into the host-view path before pivot_root.
func (v *view) host(p string) string {
	if p == "/" {
		return v.root
	}
	return v.root + p
}
