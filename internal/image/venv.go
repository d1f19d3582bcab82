package image

import (
	"crypto/sha256"
	"encoding/hex"
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

// VenvDir is where a dependency layer's virtual environment lives inside
// the sandbox (a venv's scripts name their interpreter by absolute path,
// so it is built where it runs).
const VenvDir = "/opt/tine/venv"

// Requirements says what a dependency layer installs.
type Requirements struct {
	// File is the requirements file's content.
	File []byte
	// FindLinks is a host directory of wheels and sdists pip installs
	// from (bound read-only into the build); required, since a sandbox has
	// no network to reach an index.
	FindLinks string
}

type venvRecord struct {
	Version int          `json:"version"`
	Image   string       `json:"image"`
	Layer   store.Digest `json:"layer"`
	Ms      float64      `json:"ms"`
}

// Venv is the outcome of Store.Venv.
type Venv struct {
	Path  string // the layer's directory
	Built bool
	Ms    float64
}

// venvKey names the environment of req over img: the image's digest, the
// file's bytes, and the packages it may come from (every file of the
// find-links directory by name and content, so a directory that changed,
// or one a tenant filled, never yields an environment built from other
// packages).
func venvKey(img *Image, req Requirements) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", img.Record.Digest, len(req.File))
	h.Write(req.File)
	entries, err := os.ReadDir(req.FindLinks)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(req.FindLinks, e.Name()))
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%q %x\n", e.Name(), sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Venv returns the dependency layer of req over img: a virtual
// environment at VenvDir built once per (image digest, requirements
// bytes) with the image's own pip (pip --python VENV, no ensurepip), in a
// sandbox of the image, and shared by every run and function that names
// the same pair. Concurrent builds of one key build once.
func (s *Store) Venv(img *Image, req Requirements) (Venv, error) {
	if req.FindLinks == "" {
		return Venv{}, fmt.Errorf("requirements need a --find-links directory of packages (a sandbox has no network to reach an index)")
	}
	if st, err := os.Stat(req.FindLinks); err != nil || !st.IsDir() {
		return Venv{}, fmt.Errorf("--find-links %s: not a directory", req.FindLinks)
	}
	key, err := venvKey(img, req)
	if err != nil {
		return Venv{}, fmt.Errorf("--find-links %s: %w", req.FindLinks, err)
	}
	rec := s.path("venvs", key+".json")
	if v, ok := s.readVenv(rec); ok {
		return v, nil
	}
	if err := os.MkdirAll(s.path("venvs"), 0o700); err != nil {
		return Venv{}, err
	}
	unlock, err := lockFile(s.path("locks", "venv-"+key), unix.LOCK_EX)
	if err != nil {
		return Venv{}, err
	}
	defer unlock()
	if v, ok := s.readVenv(rec); ok {
		return v, nil
	}
	t0 := time.Now()
	layer, err := s.buildVenv(img, req, key)
	if err != nil {
		return Venv{}, fmt.Errorf("build the requirements' environment: %w", err)
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err := writeAtomic(rec, venvRecord{Version: FormatVersion, Image: img.Record.Digest, Layer: layer, Ms: ms}); err != nil {
		return Venv{}, err
	}
	return Venv{Path: s.Layers.Path(layer), Built: true, Ms: ms}, nil
}

func (s *Store) readVenv(rec string) (Venv, bool) {
	b, err := os.ReadFile(rec)
	if err != nil {
		return Venv{}, false
	}
	var r venvRecord
	if json.Unmarshal(b, &r) != nil || r.Version != FormatVersion || !s.Layers.Has(r.Layer) {
		return Venv{}, false
	}
	return Venv{Path: s.Layers.Path(r.Layer), Ms: r.Ms}, true
}

func (s *Store) buildVenv(img *Image, req Requirements, key string) (store.Digest, error) {
	// The requirements and a copy of the packages, bound writable: a
	// read-only bind would narrow the Landlock rules to the image's
	// existing top-level entries, and the venv's parent may be new.
	reqDir, err := os.MkdirTemp("", "tine-requirements-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(reqDir)
	if err := os.WriteFile(filepath.Join(reqDir, "requirements.txt"), req.File, 0o644); err != nil {
		return "", err
	}
	if err := copyFlat(req.FindLinks, filepath.Join(reqDir, "find-links")); err != nil {
		return "", err
	}
	spec := &sandbox.Spec{Seccomp: seccomp.Default, DiskBytes: 1 << 30,
		DefaultLimits: cgroup.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids},
		Binds:         []sandbox.Bind{{Source: reqDir, Target: "/tine/build"}}}
	script := "set -e; mkdir -p " + filepath.Dir(VenvDir) + "; python3 -m venv --without-pip " + VenvDir +
		"; python3 -m pip --python " + VenvDir + "/bin/python install --no-input --disable-pip-version-check --no-index --find-links /tine/build/find-links -r /tine/build/requirements.txt"
	return s.buildLayer(img, spec, layerBuild{
		what: "pip", args: []string{"/bin/sh", "-c", script}, env: []string{"PIP_NO_CACHE_DIR=1"},
		pin: "venv-" + key, tail: 600,
	})
}

// VenvEnv is what a sandbox with a dependency layer adds to the image's
// environment: the venv's scripts first on the image's PATH, VIRTUAL_ENV.
// Put it before the caller's own entries (which win).
func (img *Image) VenvEnv() []string {
	path := sandbox.DefaultPath
	for _, e := range img.Record.Config.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	return []string{"VIRTUAL_ENV=" + VenvDir, "PATH=" + VenvDir + "/bin:" + path}
}

// copyFlat copies the regular files of directory src (not below) into a
// new directory dst.
func copyFlat(src, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
