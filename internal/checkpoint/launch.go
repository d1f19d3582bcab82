package checkpoint

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// launcher starts criu inside a sandbox's mount namespace without finding
// any of its files there: an OCI container's root holds only its image,
// and a sandbox's root is its tenant's to write, so a criu, loader or
// library looked up by path after nsenter's setns could be missing, or
// the tenant's, run as root. Every file is reached instead through a
// descriptor of the host's root that criu holds across the setns
// (/proc/self/fd/N/...), and criu's dynamic loader is run explicitly with
// only criu's own and the host's library directories, skipping the
// sandbox's ld.so.cache.
//
// A path walked from that descriptor still follows an absolute symlink
// from the process's root, which after the setns is the sandbox's: the
// host's /lib64/ld-linux-x86-64.so.2 is one on Debian. So every path the
// loader is given is resolved on the host first, and a library criu needs
// that is reached through an absolute symlink in its directory refuses the
// launcher. criu's plugin directory (dlopen'ed from /usr/lib/criu/ by
// default, in the sandbox) is pointed at a host directory too.
type launcher struct {
	// loader is criu's ELF interpreter ("" for a static criu), libs its
	// library directories, criu the binary, plugins criu's plugin
	// directory: host paths without symlinks.
	loader, criu, plugins string
	libs                  []string
}

func newLauncher(path string) (*launcher, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil, err
	}
	f, err := elf.Open(real)
	if err != nil {
		return nil, fmt.Errorf("read criu's ELF header: %w", err)
	}
	defer f.Close()
	l := &launcher{criu: real}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("read criu's interpreter: %w", err)
		}
		l.loader = strings.TrimRight(string(b), "\x00")
	}
	// criu's own plugin directory when it has one (a private prefix's),
	// else the directory of the binary itself, which holds no plugin.
	l.plugins = filepath.Dir(real)
	if d, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "criu")); err == nil {
		l.plugins = d
	}
	if l.loader == "" {
		return l, nil
	}
	if l.loader, err = filepath.EvalSymlinks(l.loader); err != nil {
		return nil, fmt.Errorf("criu's loader: %w", err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range filepath.SplitList(p) {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", filepath.Dir(real))
				if filepath.IsAbs(d) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	for _, d := range dirs {
		if d, err := filepath.EvalSymlinks(d); err == nil && !slices.Contains(l.libs, d) {
			l.libs = append(l.libs, d)
		}
	}
	if err := l.checkLibraries(f); err != nil {
		return nil, err
	}
	return l, nil
}

// checkLibraries follows every library criu needs, and those they need,
// the way the loader will find them (the first of l.libs that has it),
// and refuses one reached through an absolute symlink: from the sandbox's
// mount namespace its target would be the sandbox's file.
func (l *launcher) checkLibraries(criu *elf.File) error {
	seen := map[string]bool{}
	var visit func(f *elf.File, who string) error
	visit = func(f *elf.File, who string) error {
		needed, _ := f.ImportedLibraries()
		for _, name := range needed {
			if seen[name] {
				continue
			}
			seen[name] = true
			path, err := l.findLibrary(name)
			if err != nil {
				return fmt.Errorf("criu's library %s (needed by %s): %w", name, who, err)
			}
			lib, err := elf.Open(path)
			if err != nil {
				return fmt.Errorf("criu's library %s: %w", path, err)
			}
			err = visit(lib, name)
			lib.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	return visit(criu, "criu")
}

// findLibrary returns the file the loader opens for name: the first
// directory of l.libs that holds it, followed through relative symlinks
// only.
func (l *launcher) findLibrary(name string) (string, error) {
	for _, d := range l.libs {
		p := filepath.Join(d, name)
		for range 40 {
			fi, err := os.Lstat(p)
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				break
			}
			target, err := os.Readlink(p)
			if err != nil {
				return "", err
			}
			if filepath.IsAbs(target) {
				return "", fmt.Errorf("%s is a symlink to the absolute path %s, which criu would resolve in the sandbox's root: install criu with its own libraries (make criu)", p, target)
			}
			p = filepath.Join(filepath.Dir(p), target)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(l.libs, ":"))
}

// env is criu's environment, the host's root being descriptor rootFD.
func (l *launcher) env(rootFD int) []string {
	return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", fmt.Sprintf("CRIU_LIBS_DIR=/proc/self/fd/%d%s", rootFD, l.plugins)}
}

// argv is the command line that runs criu with args, the host's root
// being descriptor rootFD.
func (l *launcher) argv(rootFD int, args ...string) []string {
	at := func(p string) string { return fmt.Sprintf("/proc/self/fd/%d%s", rootFD, p) }
	if l.loader == "" {
		return append([]string{at(l.criu)}, args...)
	}
	libs := make([]string, len(l.libs))
	for i, d := range l.libs {
		libs[i] = at(d)
	}
	return append([]string{at(l.loader), "--inhibit-cache", "--library-path", strings.Join(libs, ":"), at(l.criu)}, args...)
}
