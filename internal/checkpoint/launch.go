package checkpoint

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"runtime"
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
type launcher struct {
	// loader is criu's ELF interpreter ("" for a static criu), libs its
	// library directories, criu the binary: host paths.
	loader, criu string
	libs         []string
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
	if l.loader == "" {
		return l, nil
	}
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range filepath.SplitList(p) {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", filepath.Dir(real))
				if filepath.IsAbs(d) {
					l.libs = append(l.libs, d)
				}
			}
		}
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, d := range []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		l.libs = append(l.libs, d)
	}
	return l, nil
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
