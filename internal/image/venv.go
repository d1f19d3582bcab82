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
	"github.com/tine-run/tine/internal/network"
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
	// from (copied into the build).
	FindLinks string
	// IndexURL is a PEP 503 simple index pip installs from, reached over
	// the store's egress network under a policy that allows only the
	// index's host and port. At least one of FindLinks and IndexURL.
	IndexURL string
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
// file's bytes, and the packages it may come from (the index's URL, and
// every file of the find-links directory by name and content, so a
// directory that changed, or one a tenant filled, never yields an
// environment built from other packages). An index's content is not in
// the key: pin versions (and hashes) in the file to make it so.
func venvKey(img *Image, req Requirements) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", img.Record.Digest, len(req.File))
	h.Write(req.File)
	fmt.Fprintf(h, "index %q\n", req.IndexURL)
	if req.FindLinks == "" {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
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
// bytes, package sources) with the image's own pip (pip --python VENV, no
// ensurepip), in a sandbox of the image, and shared by every run and
// function that names the same key. Concurrent builds of one key build
// once. A failed build leaves nothing.
func (s *Store) Venv(img *Image, req Requirements) (Venv, error) {
	if req.FindLinks == "" && req.IndexURL == "" {
		return Venv{}, fmt.Errorf("requirements need packages to install: a --find-links directory of wheels and sdists, or an --index-url")
	}
	if req.FindLinks != "" {
		if st, err := os.Stat(req.FindLinks); err != nil || !st.IsDir() {
			return Venv{}, fmt.Errorf("--find-links %s: not a directory", req.FindLinks)
		}
	}
	if req.IndexURL != "" {
		if _, err := indexRule(req.IndexURL); err != nil {
			return Venv{}, err
		}
		if s.opts.Network == nil {
			return Venv{}, fmt.Errorf("%w: --index-url %s needs egress networking (root, nftables: see tine doctor)", ErrNoEgress, req.IndexURL)
		}
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
	if req.FindLinks != "" {
		if err := copyFlat(req.FindLinks, filepath.Join(reqDir, "find-links")); err != nil {
			return "", err
		}
	}
	spec := &sandbox.Spec{Seccomp: seccomp.Default, DiskBytes: 1 << 30,
		DefaultLimits: cgroup.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids},
		Binds:         []sandbox.Bind{{Source: reqDir, Target: "/tine/build"}}}
	b := layerBuild{what: "pip", env: []string{"PIP_NO_CACHE_DIR=1"}, pin: "venv-" + key, tail: 1200, reason: pipReason}
	if req.IndexURL != "" {
		// The build's network allows the index's host and port, nothing
		// else (a requirements file's own --extra-index-url included).
		rule, _ := indexRule(req.IndexURL) // checked in Venv
		att, err := s.opts.Network.Attach(network.Policy{Allow: []network.Rule{rule}}, nil)
		if err != nil {
			return "", fmt.Errorf("egress network for the index: %w", err)
		}
		defer att.Detach()
		spec.NetNS = att.NetNS()
		b.resolvConf = att.ResolvConf()
	}
	b.args = []string{"/bin/sh", "-c", "set -e; mkdir -p " + filepath.Dir(VenvDir) + "; python3 -m venv --without-pip " + VenvDir +
		"; python3 -m pip --python " + VenvDir + "/bin/python install --no-input --disable-pip-version-check" + indexArgs(req) + " -r /tine/build/requirements.txt"}
	return s.buildLayer(img, spec, b)
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
