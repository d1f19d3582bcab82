// Package hostimage builds OCI image layers from the host's own files:
// busybox-static, a minimal Python (the interpreter, its standard library
// and the libraries it links), any binaries with their libraries. The
// image tests (internal/image/imagetest) and tine bench image use them, so
// neither needs a network or a registry of its own.
package hostimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Busybox is Debian's busybox-static (apt busybox-static).
const Busybox = "/bin/busybox"

// HostPython is the Debian interpreter PythonTar copies (python3.11, the
// system's, not a user's pyenv).
const HostPython = "/usr/bin/python3.11"

// skipped are the parts of the standard library no test needs.
var skipped = map[string]bool{"test": true, "tests": true, "idlelib": true, "tkinter": true, "turtledemo": true, "lib2to3": true, "ensurepip": true, "config-3.11-x86_64-linux-gnu": true}

// PythonTar is a layer (uncompressed tar) of HostPython, its standard
// library (without its compiled files unless bytecode), the shared
// libraries it and its extension modules link, and Debian's pip (for
// building virtual environments).
func PythonTar(bytecode bool) ([]byte, error) {
	skip := func(d fs.DirEntry) bool {
		return skipped[d.Name()] || d.Name() == "dist-packages" || (!bytecode && d.Name() == "__pycache__")
	}
	return HostTar(skip, map[string]string{"usr/bin/python3": "python3.11"}, HostPython, "/usr/lib/python3.11", "/usr/lib/python3/dist-packages/pip")
}

// HostTar is a layer (uncompressed tar) of host paths (files, or trees less the directories
// skip says), the shared libraries their ELF files need, transitively, and
// extra symlinks (name → target). /lib and /lib64 are symlinks into /usr,
// as on Debian 12.
func HostTar(skip func(fs.DirEntry) bool, links map[string]string, paths ...string) ([]byte, error) {
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

// BusyboxTar is a base layer: busybox with its applets linked in /bin,
// /etc/passwd and /etc/group with an "app" user (1000:1000), /tmp.
func BusyboxTar() ([]byte, error) {
	bin, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("needs busybox-static: %w", err)
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		h.ModTime = time.Unix(1700000000, 0)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err == nil {
			err = w.WriteHeader(h)
		}
		if err == nil && len(body) > 0 {
			_, err = w.Write(body)
		}
	}
	for _, d := range []struct {
		name     string
		mode     int64
		uid, gid int
	}{{"bin/", 0o755, 0, 0}, {"etc/", 0o755, 0, 0}, {"tmp/", 0o1777, 0, 0}, {"home/", 0o755, 0, 0}, {"home/app/", 0o755, 1000, 1000}} {
		add(&tar.Header{Name: d.name, Typeflag: tar.TypeDir, Mode: d.mode, Uid: d.uid, Gid: d.gid}, nil)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bin)
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"))
	add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:\napp:x:1000:\nextra:x:2000:app\n"))
	for _, a := range Applets {
		add(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	if err == nil {
		err = w.Close()
	}
	return buf.Bytes(), err
}

// Applets are the busybox commands BusyboxTar links.
var Applets = []string{"sh", "cat", "echo", "env", "id", "ls", "pwd", "test", "true", "false", "sleep", "stat", "touch", "rm", "mkdir", "readlink", "sync", "ps", "wc", "head"}

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
