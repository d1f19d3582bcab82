package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/store"
)

// Errors a caller can test for.
var (
	ErrNotFound = errors.New("no such image")
	ErrInUse    = errors.New("image in use")
	ErrInvalid  = errors.New("invalid image reference")
	ErrPull     = errors.New("pull failed")
)

// FormatVersion is the version of the records under images/.
const FormatVersion = 1

// Layout under the state directory (beside the snapshots):
//
//	store/                  the layer store (internal/store), shared
//	images/refs.json        reference → manifest digest
//	images/manifests/<hex>  an image's record (JSON); flock'ed shared by
//	                        every sandbox running from it
//	images/locks/<hex>      one per layer diff ID: held while it is fetched
//	                        or removed, so one process fetches it
//	images/pulls/<hex>      held by the pull of manifest <hex> under way
//	images/pulls/blob-<hex> the bytes a pull has of blob <hex> (flock'ed
//	                        while in use), kept for a resume
//	images/flat/<key>.json  the layer an image's bottom layers were
//	                        merged into (a stack too deep to mount)
//	images/lock             held while refs.json changes

// Record is what is kept of one image (one manifest).
type Record struct {
	Version int    `json:"version"`
	Digest  string `json:"digest"` // the manifest's
	// Layers bottom first, as in the manifest.
	Layers   []Layer   `json:"layers"`
	Config   Config    `json:"config"`
	Platform string    `json:"platform,omitempty"`
	Size     int64     `json:"size"` // compressed, as pulled
	Created  time.Time `json:"created,omitzero"`
	Stored   time.Time `json:"stored"`
}

// Layer is one of an image's layers.
type Layer struct {
	DiffID store.Digest `json:"diff_id"`
	Digest string       `json:"digest,omitempty"` // compressed blob's
	Size   int64        `json:"size,omitempty"`
}

// Config is the part of an image's config a sandbox honours.
type Config struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Options configure where and how images are pulled.
type Options struct {
	// Registries: mirrors and plain-HTTP registries.
	Registries Registries
	// Keychain finds credentials; nil: ~/.docker/config.json and the
	// credential helpers it names (authn.DefaultKeychain).
	Keychain authn.Keychain
	// Platform picks an image from an index; nil: the host's.
	Platform *v1.Platform
	// Transport for registry requests; nil: go-containerregistry's default.
	Transport http.RoundTripper
	// Network gives dependency builds from a package index their egress
	// (the daemon's network manager; nil: builds from an index are refused).
	Network Egress
	// Admit, when set, counts each build's sandbox (bytecode, dependencies)
	// against a budget (the daemon's) while it runs, with its memory limit.
	Admit AdmitFunc
}

// Egress attaches a build's sandbox to an egress network under a policy
// (a *network.Manager).
type Egress interface {
	Attach(p network.Policy, inject []network.Injection) (*network.Attachment, error)
}

// AdmitFunc reserves memoryBytes of a budget for a sandbox, or refuses.
type AdmitFunc func(memoryBytes int64) (release func(), err error)

// Store holds the images of one state directory.
type Store struct {
	dir    string
	Layers *store.Store
	opts   Options
	fs     *store.OwnFilesystem // the hold on Layers' filesystem
}

// Close ends the store's hold on its layers' filesystem (the last user's
// unmounts it). Leases taken from it stay valid until released, but no
// new image can be used through it.
func (s *Store) Close() error { return s.fs.Release() }

// Open opens the images of stateDir, with their layers in the store that
// snapshots use (made a filesystem of its own when it shares the root's,
// store.EnsureOwnFilesystem). Close the Store when done with it: the last
// user of that filesystem unmounts it.
func Open(stateDir string, opts Options) (_ *Store, err error) {
	storeDir := filepath.Join(stateDir, "store")
	fs, err := store.EnsureOwnFilesystem(storeDir, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fs.Release()
		}
	}()
	layers, err := store.Open(storeDir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: filepath.Join(stateDir, "images"), Layers: layers, opts: opts, fs: fs}
	for _, d := range []string{s.dir, s.path("manifests"), s.path("locks"), s.path("pulls")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open images: %w", err)
		}
	}
	if m, ok := opts.Network.(*network.Manager); ok && m == nil {
		s.opts.Network = nil // a typed nil is no network
	}
	if opts.Keychain == nil {
		s.opts.Keychain = authn.DefaultKeychain
	}
	if opts.Platform == nil {
		s.opts.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		if runtime.GOARCH == "arm64" {
			s.opts.Platform.Variant = "v8"
		}
	}
	return s, nil
}

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

func hexOf(digest string) string { return strings.TrimPrefix(digest, "sha256:") }

func (s *Store) recordPath(digest string) string { return s.path("manifests", hexOf(digest)) }

// Image is an image ready to run from.
type Image struct {
	Ref    string // as resolved (familiar form), or the digest
	Record *Record
	// Paths are the layers' directories, topmost first (overlay order).
	Paths []string
	store *Store // flattens the bottom layers when a stack is too deep to mount
}

// Root returns the image as a sandbox root: the bottom layer as the base
// and the others stacked over it, topmost first.
func (img *Image) Root() (base string, layers []string) {
	n := len(img.Paths)
	return img.Paths[n-1], append([]string(nil), img.Paths[:n-1]...)
}

// Summary is one line of List.
type Summary struct {
	Refs    []string  `json:"refs"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Layers  int       `json:"layers"`
	Created time.Time `json:"created,omitzero"`
	InUse   bool      `json:"in_use"`
}

// List returns every image, newest stored first.
func (s *Store) List() ([]Summary, error) {
	refs, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	byDigest := map[string][]string{}
	for r, d := range refs {
		byDigest[d] = append(byDigest[d], Familiar(r))
	}
	entries, err := os.ReadDir(s.path("manifests"))
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	type listed struct {
		sum    Summary
		stored time.Time
	}
	var all []listed
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := s.readRecord("sha256:" + e.Name())
		if err != nil {
			continue // removed meanwhile
		}
		rs := byDigest[r.Digest]
		slices.Sort(rs)
		all = append(all, listed{Summary{Refs: rs, Digest: r.Digest, Size: r.Size, Layers: len(r.Layers), Created: r.Created, InUse: s.inUse(r.Digest)}, r.Stored})
	}
	slices.SortStableFunc(all, func(a, b listed) int { return b.stored.Compare(a.stored) })
	out := make([]Summary, len(all))
	for i, l := range all {
		out[i] = l.sum
	}
	return out, nil
}

func (s *Store) readRecord(digest string) (*Record, error) {
	b, err := os.ReadFile(s.recordPath(digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read image %s: %w", digest, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read image %s: %w", digest, err)
	}
	if r.Version != FormatVersion {
		return nil, fmt.Errorf("read image %s: format version %d, this tine reads %d", digest, r.Version, FormatVersion)
	}
	return &r, nil
}

// Lookup finds a stored image by reference ("busybox", "ghcr.io/o/i:t",
// "name@sha256:…") or by its digest (whole, or 12+ hex digits of it).
func (s *Store) Lookup(ref string) (*Image, error) {
	digest, err := s.find(ref)
	if err != nil {
		return nil, err
	}
	r, err := s.readRecord(digest)
	if err != nil {
		return nil, err
	}
	img := &Image{Ref: ref, Record: r, store: s}
	for i := len(r.Layers) - 1; i >= 0; i-- {
		d := r.Layers[i].DiffID
		if !s.Layers.Has(d) {
			return nil, fmt.Errorf("image %s: layer %s is missing from the store (pull it again)", ref, d)
		}
		img.Paths = append(img.Paths, s.Layers.Path(d))
	}
	if len(img.Paths) == 0 {
		return nil, fmt.Errorf("image %s has no layers", ref)
	}
	return img, nil
}

// find resolves ref to a stored manifest digest.
func (s *Store) find(ref string) (string, error) {
	if d, ok := s.byDigestPrefix(ref); ok {
		return d, nil
	}
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if dg, ok := r.(name.Digest); ok {
		// name@sha256:… names the manifest itself (of an index: the
		// platform's manifest was stored, under the reference).
		if _, err := os.Stat(s.recordPath(dg.DigestStr())); err == nil {
			return dg.DigestStr(), nil
		}
	}
	refs, err := s.readRefs()
	if err != nil {
		return "", err
	}
	if d, ok := refs[r.Name()]; ok {
		return d, nil
	}
	return "", fmt.Errorf("image %s: %w (tine pull %s)", ref, ErrNotFound, ref)
}

func (s *Store) byDigestPrefix(ref string) (string, bool) {
	h := strings.TrimPrefix(ref, "sha256:")
	if len(h) < 12 || len(h) > 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", false
	}
	entries, _ := os.ReadDir(s.path("manifests"))
	var found string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), h) {
			if found != "" {
				return "", false // ambiguous
			}
			found = "sha256:" + e.Name()
		}
	}
	return found, found != ""
}

// ParseRef parses an image reference with Docker Hub's defaults
// ("python:3.12" is docker.io/library/python:3.12).
func ParseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalid, ref, err)
	}
	return r, nil
}

// Familiar shortens a full reference the way docker prints it.
func Familiar(ref string) string {
	for _, p := range []string{"index.docker.io/library/", "index.docker.io/"} {
		if rest, ok := strings.CutPrefix(ref, p); ok {
			return rest
		}
	}
	return ref
}
