package imagetest

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
)

// HostPython is the Debian interpreter PythonLayer copies (python3.11,
// the system's, not a user's pyenv).
const HostPython = "/usr/bin/python3.11"

// skipped are the parts of the standard library no test needs.
var skipped = map[string]bool{"test": true, "tests": true, "idlelib": true, "tkinter": true, "turtledemo": true, "lib2to3": true, "ensurepip": true, "config-3.11-x86_64-linux-gnu": true}

var pythonLayers sync.Map // bool (with bytecode) → []byte, built once per test binary

// PythonLayer is a minimal Python from the host: HostPython, its
// standard library (without its compiled files unless bytecode), the
// shared libraries it and its extension modules link, and pip (Debian's,
// for building virtual environments). Stack it on BusyboxLayer.
func PythonLayer(t testing.TB, bytecode bool) v1.Layer {
	t.Helper()
	if _, err := os.Stat(HostPython); err != nil {
		t.Skipf("needs %s (apt python3): %v", HostPython, err)
	}
	b, ok := pythonLayers.Load(bytecode)
	if !ok {
		built, err := buildPythonTar(bytecode)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = pythonLayers.LoadOrStore(bytecode, built)
	}
	data := b.([]byte)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func buildPythonTar(bytecode bool) ([]byte, error) {
	skip := func(d fs.DirEntry) bool {
		return skipped[d.Name()] || d.Name() == "dist-packages" || (!bytecode && d.Name() == "__pycache__")
	}
	return hostTar(skip, map[string]string{"usr/bin/python3": "python3.11"}, HostPython, "/usr/lib/python3.11", "/usr/lib/python3/dist-packages/pip")
}

// hostTar is a layer of host paths (files, or trees less the directories
// skip says), the shared libraries their ELF files need, transitively, and
// extra symlinks (name → target). /lib and /lib64 are symlinks into /usr,
// as on Debian 12.
func hostTar(skip func(fs.DirEntry) bool, links map[string]string, paths ...string) ([]byte, error) {
	var buf bytes.Buffer
	w := &treeWriter{tw: tar.NewWriter(&buf), seen: map[string]bool{}}
	w.symlink("lib", "usr/lib")
	w.symlink("lib64", "usr/lib64")
	libs := map[string]bool{}
	for _, tree := range paths {
		err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != tree && skip != nil && skip(d) {
				return filepath.SkipDir
			}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				link, err := os.Readlink(p)
				if err != nil {
					return err
				}
				w.symlink(strings.TrimPrefix(p, "/"), link)
			case d.Type().IsRegular():
				w.file(p, strings.TrimPrefix(p, "/"), libs)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for name, target := range links {
		w.symlink(name, target)
	}
	// The libraries, until no new one is needed.
	for done := map[string]bool{}; len(done) < len(libs); {
		for lib := range libs {
			if done[lib] {
				continue
			}
			done[lib] = true
			// Under the name the loader looks for (a soname is often a
			// symlink to the versioned file), in the directory's real place.
			if dir, err := filepath.EvalSymlinks(filepath.Dir(lib)); err == nil {
				w.file(lib, strings.TrimPrefix(filepath.Join(dir, filepath.Base(lib)), "/"), libs)
			}
		}
	}
	w.symlink("usr/lib64/ld-linux-x86-64.so.2", "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), w.err
}

// HostLayer is a layer of host paths and the libraries they need (see
// hostTar); it skips the test when one is missing.
func HostLayer(t testing.TB, paths ...string) v1.Layer {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s on the host: %v", p, err)
		}
	}
	b, err := hostTar(nil, nil, paths...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type treeWriter struct {
	tw   *tar.Writer
	seen map[string]bool
	err  error
}

func (w *treeWriter) dirs(name string) {
	for d := filepath.Dir(name); d != "." && !w.seen[d+"/"]; d = filepath.Dir(d) {
		defer w.header(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1700000000, 0)})
		w.seen[d+"/"] = true
	}
}

func (w *treeWriter) header(h *tar.Header) {
	if err := w.tw.WriteHeader(h); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *treeWriter) symlink(name, target string) {
	if w.seen[name] {
		return
	}
	w.seen[name] = true
	w.dirs(name)
	w.header(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777, ModTime: time.Unix(1700000000, 0)})
}

// file adds host file src as name, and the libraries an ELF file needs to
// libs (by the paths the loader finds them at on the host).
func (w *treeWriter) file(src, name string, libs map[string]bool) {
	if w.seen[name] {
		return
	}
	w.seen[name] = true
	b, err := os.ReadFile(src)
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return
	}
	st, _ := os.Stat(src)
	w.dirs(name)
	w.header(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: int64(st.Mode().Perm()), Size: int64(len(b)), ModTime: st.ModTime()})
	if _, err := w.tw.Write(b); err != nil && w.err == nil {
		w.err = err
	}
	if f, err := elf.NewFile(bytes.NewReader(b)); err == nil {
		needed, _ := f.ImportedLibraries()
		for _, n := range needed {
			for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"} {
				if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
					libs[filepath.Join(dir, n)] = true
					break
				}
			}
		}
		if interp := f.Progs; interp != nil {
			libs["/lib64/ld-linux-x86-64.so.2"] = true
		}
	}
}

// PythonImage is busybox and the host's Python under a config that puts
// them on PATH.
func PythonImage(t testing.TB, bytecode bool) v1.Image {
	return Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}}, BusyboxLayer(t), PythonLayer(t, bytecode))
}
