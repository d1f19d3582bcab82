package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// The bytecode layer: many slim images ship Python's standard library
// without compiled files, so every run compiles what it imports (and
// throws it away with its writable layer). Compiled once in a sandbox from
// the image itself (its own python3, so the magic number is right), with
// unchecked-hash .pyc files (never compared with the sources, which a
// read-only layer never changes), it is a layer of its own stacked on the
// image, keyed by the image's digest.

// bytecodeRecord says what the bytecode layer of one image is.
type bytecodeRecord struct {
	Version int `json:"version"`
	// Layer is the compiled files' layer; empty when the image needs none
	// (Reason says why: no Python, or compiled files already).
	Layer  store.Digest `json:"layer,omitempty"`
	Reason string       `json:"reason,omitempty"`
	// Ms is how long the compilation took.
	Ms float64 `json:"ms,omitempty"`
}

// Bytecode is the outcome of Store.Bytecode.
type Bytecode struct {
	// Path is the layer's directory ("" when the image needs none).
	Path string
	// Built: compiled by this call, in Ms milliseconds.
	Built bool
	Ms    float64
	// Reason says why there is no layer.
	Reason string
}

// Bytecode returns img's bytecode layer, compiling it first when the
// image's standard library has no compiled files. Two processes asking at
// once compile it once (a lock per image).
func (s *Store) Bytecode(img *Image) (Bytecode, error) {
	h := hexOf(img.Record.Digest)
	rec := s.path("bytecode", h+".json")
	if b, ok := s.readBytecode(rec); ok {
		return b, nil
	}
	if err := os.MkdirAll(s.path("bytecode"), 0o700); err != nil {
		return Bytecode{}, err
	}
	unlock, err := lockFile(s.path("locks", "bytecode-"+h), unix.LOCK_EX)
	if err != nil {
		return Bytecode{}, err
	}
	defer unlock()
	if b, ok := s.readBytecode(rec); ok {
		return b, nil // built while this call waited
	}
	stdlib, reason := img.stdlib()
	if stdlib == "" {
		return Bytecode{Reason: reason}, writeAtomic(rec, bytecodeRecord{Version: FormatVersion, Reason: reason})
	}
	t0 := time.Now()
	layer, err := s.compile(img, stdlib)
	if err != nil {
		return Bytecode{}, fmt.Errorf("compile the standard library of %s: %w", img.Ref, err)
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err := writeAtomic(rec, bytecodeRecord{Version: FormatVersion, Layer: layer, Ms: ms}); err != nil {
		return Bytecode{}, err
	}
	return Bytecode{Path: s.Layers.Path(layer), Built: true, Ms: ms}, nil
}

func (s *Store) readBytecode(rec string) (Bytecode, bool) {
	b, err := os.ReadFile(rec)
	if err != nil {
		return Bytecode{}, false
	}
	var r bytecodeRecord
	if json.Unmarshal(b, &r) != nil || r.Version != FormatVersion {
		return Bytecode{}, false
	}
	if r.Layer == "" {
		return Bytecode{Reason: r.Reason}, true
	}
	if !s.Layers.Has(r.Layer) {
		return Bytecode{}, false // collected: build again
	}
	return Bytecode{Path: s.Layers.Path(r.Layer), Ms: r.Ms}, true
}

// stdlib finds the image's Python standard library (the directory with
// os.py, as the sandbox sees it), or says why there is nothing to compile.
func (img *Image) stdlib() (dir, reason string) {
	for _, prefix := range []string{"usr/local/lib", "usr/lib"} {
		for _, layer := range img.Paths {
			matches, _ := filepath.Glob(filepath.Join(layer, prefix, "python3.*", "os.py"))
			for _, m := range matches {
				d := filepath.Dir(m)
				rel := strings.TrimPrefix(d, layer)
				if img.hasCompiled(strings.TrimPrefix(rel, "/")) {
					return "", "its standard library has compiled files"
				}
				return rel, ""
			}
		}
	}
	return "", "it has no Python standard library"
}

// hasCompiled reports whether any layer holds compiled files of the
// standard library at rel.
func (img *Image) hasCompiled(rel string) bool {
	for _, layer := range img.Paths {
		if m, _ := filepath.Glob(filepath.Join(layer, rel, "__pycache__", "os.*.pyc")); len(m) > 0 {
			return true
		}
	}
	return false
}

// compile runs the image's python3 -m compileall over stdlib in a live
// sandbox of the image, and commits what it wrote (its writable layer:
// the __pycache__ directories) as a layer, pinned to the image.
func (s *Store) compile(img *Image, stdlib string) (store.Digest, error) {
	spec := &sandbox.Spec{Seccomp: seccomp.Default, DiskBytes: 512 << 20,
		DefaultLimits: cgroup.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids}}
	return s.buildLayer(img, spec, layerBuild{
		what: "python3 -m compileall",
		args: []string{"python3", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", "-x", `/(test|tests|idlelib|tkinter|turtledemo|lib2to3)/`, stdlib},
		pin:  "bytecode-" + hexOf(img.Record.Digest), tail: 400,
	})
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// WithLayer returns img with layer stacked on top of its own (a bytecode
// or dependency layer).
func (img *Image) WithLayer(layer string) *Image {
	c := *img
	c.Paths = append([]string{layer}, img.Paths...)
	return &c
}

// WithBytecode returns img with its bytecode layer stacked on it (built
// first when needed), or img itself when it needs none or the build
// failed (err says why: the image still runs, only slower to import).
func (s *Store) WithBytecode(img *Image) (*Image, Bytecode, error) {
	bc, err := s.Bytecode(img)
	if err != nil || bc.Path == "" {
		return img, bc, err
	}
	return img.WithLayer(bc.Path), bc, nil
}
