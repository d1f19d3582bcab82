package sandbox

// The host view: what a sandbox over the host's root sees of it. The
// sandbox's root is uid 0 with CAP_DAC_OVERRIDE, so every file root can
// read on the host would be readable inside; the default view (HostViewOS)
// shows the operating system and leaves the host's data out:
//
//   - top-level directories other than the operating system's (osTopLevel)
//     are empty, top-level files are empty;
//   - in /var only cache, lib, lock and run are kept, and in /var/lib and
//     /var/cache only the package databases and caches programs need
//     (osVarLib, osVarCache); everything else there is empty;
//   - in /etc (and /var/cache/debconf) every file that is not
//     world-readable is empty, and every directory others cannot enter is
//     empty.
//
// An empty directory or file is made in a layer of the overlay's own
// (stage/view, on the stage's tmpfs), stacked just over the base, before
// the overlay is mounted (an opaque directory hides the lower one's
// entries): it costs no mount, is writable like the rest of the root
// (writes go to the upper), a bind into it lands on it, and it hides the
// host's data but not a fork's snapshot layers, which stack above it.
//
// Scanning /etc costs milliseconds, more than a whole run, so the result is
// cached in memory and, for root, in /run/tine/hostview (/run is
// private in sandboxes). The cache holds the change time of every
// directory it read: an entry added, removed or renamed anywhere, or a
// directory whose mode changed, makes it stale; a file's own chmod changes
// no directory, so the cache is also rebuilt after hostViewTTL.

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/rawfile"
	"golang.org/x/sys/unix"
)

// The operating system's part of the host's root. Top-level entries that
// tine mounts itself (ownMounts) are not listed.
var (
	osTopLevel = setOf("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "var")
	osVar      = setOf("cache", "lib", "lock", "run")
	// Package databases and state that programs read to run: dpkg, apt,
	// rpm, pacman; Python's, locales, fonts, XKB keymaps, TeX, dictionaries,
	// XML catalogs, the machine id (dbus).
	osVarLib = setOf("dpkg", "apt", "ucf", "rpm", "dnf", "yum", "alternatives", "pacman",
		"python", "pam", "misc", "shells.state", "man-db", "vim", "dbus", "fontconfig", "locales",
		"xkb", "texmf", "tex-common", "ghostscript", "dictionaries-common", "aspell", "ispell",
		"hunspell", "emacsen-common", "sgml-base", "xml-core", "ca-certificates", "ca-certificates-java",
		"usrmerge")
	osVarCache = setOf("apt", "debconf", "fontconfig", "man", "dictionaries-common")
	// permissionTrees are walked for entries others cannot read.
	permissionTrees = []string{"/etc", "/var/cache/debconf"}
	// alwaysHidden are secrets hidden whatever their mode.
	alwaysHidden = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key"}
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// hostViewTTL bounds how long a cached view is used (see the top).
const hostViewTTL = time.Minute

// hostViewCacheFile is where root keeps the view between runs.
var hostViewCacheFile = path.Dir(StageDir) + "/hostview"

// viewEntry is a path of the host's root that the view layer holds: a
// hidden (empty) directory or file, or a directory on the way to one,
// made with the host's mode and owner so the merged view looks the same.
type viewEntry struct {
	Path string
	Mode uint32 // permission bits and S_IFDIR or S_IFREG
	UID  uint32
	GID  uint32
	Hide bool
}

func (e viewEntry) isDir() bool { return e.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// hostViewScan is a computed view and what it was computed from.
type hostViewScan struct {
	Built time.Time
	// Perms says the permission trees were walked.
	Perms bool
	// Dirs are the directories read, with their change times (ns).
	Dirs    map[string]int64
	Entries []viewEntry // sorted: parents first
}

var hostViewMemo struct {
	sync.Mutex
	scan *hostViewScan
}

// hostViewEntries returns the os view of the host's root. perms walks the
// permission trees too: needed where the sandbox's root has DAC override
// on host files (root without a user namespace).
func hostViewEntries(perms bool) []viewEntry {
	hostViewMemo.Lock()
	defer hostViewMemo.Unlock()
	if sc := hostViewMemo.scan; sc != nil && sc.Perms == perms && sc.fresh() {
		return sc.Entries
	}
	cacheable := perms && os.Geteuid() == 0
	if cacheable {
		if sc := readHostViewCache(); sc != nil && sc.fresh() {
			hostViewMemo.scan = sc
			return sc.Entries
		}
	}
	sc := scanHostView(perms)
	hostViewMemo.scan = sc
	if cacheable {
		writeHostViewCache(sc)
	}
	return sc.Entries
}

// fresh reports whether no directory the scan read has changed since.
func (sc *hostViewScan) fresh() bool {
	if time.Since(sc.Built) > hostViewTTL || sc.Built.After(time.Now()) {
		return false
	}
	for dir, ctime := range sc.Dirs {
		if dirCtime(dir) != ctime {
			return false
		}
	}
	return true
}

func dirCtime(dir string) int64 {
	var st syscall.Stat_t
	if syscall.Lstat(dir, &st) != nil {
		return -1
	}
	return st.Ctim.Nano()
}

// The cache file is text, parsed faster than JSON on every run: a header
// "tine-hostview 1 BUILT-NS PERMS", then "d CTIME-NS PATH" per directory
// read and "e MODE UID GID HIDE PATH" per entry.
const hostViewCacheHeader = "tine-hostview 1"

func readHostViewCache() *hostViewScan {
	b, err := rawfile.ReadFileHint(hostViewCacheFile, 16<<10)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	f := strings.Fields(lines[0])
	if len(f) != 4 || f[0]+" "+f[1] != hostViewCacheHeader || f[3] != "1" {
		return nil
	}
	built, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return nil
	}
	sc := &hostViewScan{Built: time.Unix(0, built), Perms: true, Dirs: make(map[string]int64, len(lines))}
	for _, line := range lines[1:] {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "d":
			ct, p, _ := strings.Cut(rest, " ")
			n, err := strconv.ParseInt(ct, 10, 64)
			if err != nil || p == "" {
				return nil
			}
			sc.Dirs[p] = n
		case "e":
			f := strings.SplitN(rest, " ", 5)
			if len(f) != 5 {
				return nil
			}
			mode, err1 := strconv.ParseUint(f[0], 8, 32)
			uid, err2 := strconv.ParseUint(f[1], 10, 32)
			gid, err3 := strconv.ParseUint(f[2], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil || f[4] == "" {
				return nil
			}
			sc.Entries = append(sc.Entries, viewEntry{Path: f[4], Mode: uint32(mode), UID: uint32(uid), GID: uint32(gid), Hide: f[3] == "1"})
		default:
			return nil
		}
	}
	return sc
}

// writeHostViewCache replaces the cache file atomically; a failure only
// costs the next run a scan. A path with a newline is not cached.
func writeHostViewCache(sc *hostViewScan) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d 1\n", hostViewCacheHeader, sc.Built.UnixNano())
	for d, ct := range sc.Dirs {
		if strings.Contains(d, "\n") {
			return
		}
		fmt.Fprintf(&b, "d %d %s\n", ct, d)
	}
	for _, e := range sc.Entries {
		if strings.Contains(e.Path, "\n") {
			return
		}
		hide := 0
		if e.Hide {
			hide = 1
		}
		fmt.Fprintf(&b, "e %o %d %d %d %s\n", e.Mode, e.UID, e.GID, hide, e.Path)
	}
	f, err := os.CreateTemp(path.Dir(hostViewCacheFile), ".hostview-*")
	if err != nil {
		return
	}
	_, werr := f.WriteString(b.String())
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(f.Name(), hostViewCacheFile) != nil {
		os.Remove(f.Name())
	}
}

// scanHostView computes the os view from the host's root as it is now.
func scanHostView(perms bool) *hostViewScan {
	sc := &hostViewScan{Built: time.Now(), Perms: perms, Dirs: map[string]int64{}}
	hidden := map[string]viewEntry{}
	hide := func(p string, info fs.FileInfo) {
		if info.Mode()&fs.ModeSymlink != 0 {
			return // a link leads into the view, or to something hidden
		}
		hidden[p] = entryOf(p, info, true)
	}
	// keepOnly hides the entries of dir not in keep.
	keepOnly := func(dir string, keep map[string]bool) {
		sc.Dirs[dir] = dirCtime(dir)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if keep[e.Name()] || (dir == "/" && ownMounts[e.Name()]) {
				continue
			}
			if info, err := e.Info(); err == nil {
				hide(path.Join(dir, e.Name()), info)
			}
		}
	}
	keepOnly("/", osTopLevel)
	keepOnly("/var", osVar)
	keepOnly("/var/lib", osVarLib)
	keepOnly("/var/cache", osVarCache)
	if perms {
		for _, tree := range permissionTrees {
			filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.Type()&fs.ModeSymlink != 0 {
					return nil
				}
				if _, done := hidden[p]; done && d.IsDir() {
					return fs.SkipDir
				}
				info, err := d.Info()
				if err != nil {
					return nil
				}
				// Others must be able to enter a directory and read a file.
				if d.IsDir() && info.Mode().Perm()&0o001 == 0 || !d.IsDir() && info.Mode().Perm()&0o004 == 0 {
					hide(p, info)
					if d.IsDir() {
						return fs.SkipDir
					}
				}
				if d.IsDir() {
					sc.Dirs[p] = dirCtime(p)
				}
				return nil
			})
		}
		for _, pattern := range alwaysHidden {
			m, _ := filepath.Glob(pattern)
			for _, p := range m {
				if info, err := os.Lstat(p); err == nil {
					hide(p, info)
					sc.Dirs[path.Dir(p)] = dirCtime(path.Dir(p))
				}
			}
		}
	}
	// The directories on the way to each hidden entry, as the host has them.
	all := map[string]viewEntry{}
	for p, e := range hidden {
		all[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; ok {
				break
			}
			if info, err := os.Lstat(d); err == nil {
				all[d] = entryOf(d, info, false)
			}
		}
	}
	for _, e := range all {
		sc.Entries = append(sc.Entries, e)
	}
	slices.SortFunc(sc.Entries, func(a, b viewEntry) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return sc
}

func entryOf(p string, info fs.FileInfo, hide bool) viewEntry {
	e := viewEntry{Path: p, Mode: uint32(info.Mode().Perm()), Hide: hide}
	if info.Mode()&fs.ModeSetuid != 0 {
		e.Mode |= syscall.S_ISUID
	}
	if info.Mode()&fs.ModeSetgid != 0 {
		e.Mode |= syscall.S_ISGID
	}
	if info.Mode()&fs.ModeSticky != 0 {
		e.Mode |= syscall.S_ISVTX
	}
	if info.IsDir() {
		e.Mode |= syscall.S_IFDIR
	} else {
		e.Mode |= syscall.S_IFREG // a hidden socket or device is an empty file
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
	}
	return e
}

// hostView returns the entries of the os view when p's sandbox gets it
// (over the host's root, unless the full view was asked for), else nil.
// The permission trees are walked only where the sandbox's root has DAC
// override on host files: without a user namespace.
func (p *Plan) hostView() []viewEntry {
	if p.Spec.RootFS != "" || p.Spec.HostView == HostViewFull {
		return nil
	}
	return hostViewEntries(!p.UserNS)
}

// coverHostView hides the view's entries beneath host, a directory bound
// read-only at root+host (no upper layer there): an empty read-only tmpfs
// over a directory, /dev/null over a file.
func (p *Plan) coverHostView(view []viewEntry, host, root string) {
	for _, e := range view {
		rel, ok := cutPathPrefix(e.Path, host)
		if !ok || rel == "" || !e.Hide {
			continue
		}
		st := Step{Kind: StepMount, Source: "/dev/null", Target: root + e.Path, Flags: unix.MS_BIND, Optional: true}
		if e.isDir() {
			st = Step{Kind: StepMount, Source: "tmpfs", Target: root + e.Path, FSType: "tmpfs", Flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV, Data: "size=0", Optional: true}
		}
		p.Steps = append(p.Steps, st)
	}
}

// addHostView adds the os view's entries beneath the host path prefix
// (each entry at upper+its path) to an upper layer at upper, which must
// not be mounted yet; opaque is the overlay's opaque xattr
// (trusted.overlay.opaque, or user.overlay.opaque with userxattr).
// chown says the upper layer may carry the host's owners (not in a user
// namespace, where they are not mapped).
func (p *Plan) addHostView(entries []viewEntry, prefix, upper, opaque string, chown bool) {
	for _, e := range entries {
		rel, ok := cutPathPrefix(e.Path, prefix)
		if !ok || rel == "" {
			continue
		}
		st := Step{Kind: StepUpper, Target: upper + rel, Mode: e.Mode}
		if chown {
			st.UID, st.GID = e.UID, e.GID
		}
		if e.Hide && e.isDir() {
			st.Data = opaque
		}
		p.Steps = append(p.Steps, st)
	}
}

// cutPathPrefix returns p's part below dir ("/x" for dir/x), and whether p
// is beneath dir ("/" holds everything).
func cutPathPrefix(p, dir string) (string, bool) {
	if dir == "/" {
		return p, true
	}
	if p == dir {
		return "", true
	}
	rest, ok := strings.CutPrefix(p, dir+"/")
	return "/" + rest, ok
}
