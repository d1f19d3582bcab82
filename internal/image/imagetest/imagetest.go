// Package imagetest builds small OCI images from host files and serves
// them from an in-process registry, for tests that have no network.
package imagetest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/tine-run/tine/internal/image/hostimage"
	"github.com/tine-run/tine/internal/require"
)

// File is one entry of a layer built by Layer.
type File struct {
	Name string
	// Body is a regular file's content; Link a symlink's target (or, with
	// Hard, a hard link's).
	Body, Link string
	Hard       bool
	Dir        bool
	Mode       int64
	UID, GID   int
}

// Layer makes a layer from files, in order.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	b := TarBytes(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TarBytes is the uncompressed tar of files.
func TarBytes(t testing.TB, files ...File) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: time.Unix(1700000000, 0)}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
		case f.Link != "" && f.Hard:
			h.Typeflag, h.Linkname = tar.TypeLink, f.Link
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if f.Dir {
				h.Mode = 0o755
			}
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := w.Write([]byte(f.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// BusyboxLayer is a base layer: busybox with its applets linked in /bin,
// /etc/passwd and /etc/group with an "app" user (1000:1000), /tmp
// (hostimage.BusyboxTar).
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	require.Binary(t, "busybox") // busybox-static (CI: strict)
	b, err := hostimage.BusyboxTar()
	if err != nil {
		t.Fatal(err)
	}
	return tarLayer(t, b)
}

// Image stacks layers (bottom first) under config cfg.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", hostArch()
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Registry is an in-process registry on a loopback port.
type Registry struct {
	// Host is host:port, for references (plain HTTP: loopback).
	Host string
	// Blobs counts blob downloads (GET of /v2/…/blobs/…).
	Blobs atomic.Int64
	// FailBlobsAfter, when > 0, makes every blob GET after that many
	// fail (an interrupted pull).
	FailBlobsAfter atomic.Int64
	// BasicAuth, when set ("user:password"), is required of every request.
	BasicAuth string
	srv       *httptest.Server
	mu        sync.Mutex
	fetched   map[string]int
	sent      map[string]int64
	ranges    map[string][]string
	cutBlob   string
	cutAt     int64
}

// CutBlob makes every GET of blob digest send at most n bytes of its
// body and then drop the connection (n 0: no more cuts).
func (r *Registry) CutBlob(digest string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutBlob, r.cutAt = digest, n
}

// Sent is how many bytes of blob digest's bodies were sent, and the
// Range headers its GETs had ("" for none).
func (r *Registry) Sent(digest string) (int64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[digest], append([]string(nil), r.ranges[digest]...)
}

// countingWriter counts the body bytes sent for a blob and cuts the
// body short after limit of them (limit 0: never).
type countingWriter struct {
	http.ResponseWriter
	r      *Registry
	digest string
	n      int64
	limit  int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	cut := false
	if w.limit > 0 && w.n+int64(len(b)) > w.limit {
		b, cut = b[:w.limit-w.n], true
	}
	k, err := w.ResponseWriter.Write(b)
	w.n += int64(k)
	w.r.mu.Lock()
	w.r.sent[w.digest] += int64(k)
	w.r.mu.Unlock()
	if cut && err == nil {
		// A body shorter than its Content-Length: the server closes
		// the connection, as a network failure would.
		err = errors.New("cut by the test")
	}
	return k, err
}

// Fetched counts the downloads of blob digest ("sha256:…").
func (r *Registry) Fetched(digest string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetched[digest]
}

// NewRegistry starts a registry, stopped when the test ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{fetched: map[string]int{}, sent: map[string]int64{}, ranges: map[string][]string{}}
	reg := registry.New(registry.Logger(nopLogger()))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.BasicAuth != "" {
			user, pass, ok := req.BasicAuth()
			if !ok || user+":"+pass != r.BasicAuth {
				w.Header().Set("WWW-Authenticate", `Basic realm="tine-test"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			n := r.Blobs.Add(1)
			digest := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
			r.mu.Lock()
			r.fetched[digest]++
			r.ranges[digest] = append(r.ranges[digest], req.Header.Get("Range"))
			cw := &countingWriter{ResponseWriter: w, r: r, digest: digest}
			if digest == r.cutBlob {
				cw.limit = r.cutAt
			}
			r.mu.Unlock()
			if lim := r.FailBlobsAfter.Load(); lim > 0 && n > lim {
				http.Error(w, "injected failure", http.StatusForbidden) // not retried
				return
			}
			w = cw
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Push stores img under repo:tag ("busybox:1") and returns the full
// reference.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// PushIndex stores an index of imgs (each under its platform) as repo:tag.
func (r *Registry) PushIndex(t testing.TB, repoTag string, imgs map[string]v1.Image) string {
	t.Helper()
	var adds []mutate.IndexAddendum
	for plat, img := range imgs {
		p, err := v1.ParsePlatform(plat)
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}
