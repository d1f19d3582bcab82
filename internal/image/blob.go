package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"
)

// blobSource fetches the blobs of the repository an image's manifest came
// from over HTTP itself (with go-containerregistry's authenticating
// transport), so that a download cut short resumes with a Range request
// for the rest: go-containerregistry's layers are read whole.
type blobSource struct {
	repo   name.Repository
	client *http.Client
}

func (s *Store) newBlobSource(ctx context.Context, repo name.Repository) (*blobSource, error) {
	auth, err := authn.Resolve(ctx, s.opts.Keychain, repo)
	if err != nil {
		return nil, err
	}
	base := s.opts.Transport
	if base == nil {
		base = remote.DefaultTransport
	}
	t, err := transport.NewWithContext(ctx, repo.Registry, auth, base, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	return &blobSource{repo: repo, client: &http.Client{Transport: t}}, nil
}

// open returns blob digest (size bytes) from byte offset on, or from 0
// when the registry sends it whole (the offset it starts at is returned).
func (b *blobSource) open(ctx context.Context, digest string, offset, size int64) (io.ReadCloser, int64, error) {
	u := url.URL{Scheme: b.repo.Registry.Scheme(), Host: b.repo.RegistryStr(), Path: "/v2/" + b.repo.RepositoryStr() + "/blobs/" + digest}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	if offset > 0 {
		// A closed range: some registries (go-containerregistry's own)
		// take no open-ended one.
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, size-1))
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return resp.Body, 0, nil
	case resp.StatusCode == http.StatusPartialContent && offset > 0 &&
		strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", offset)):
		return resp.Body, offset, nil
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
		resp.Body.Close()
		return b.open(ctx, digest, 0, size) // the whole blob, then
	case resp.StatusCode == http.StatusPartialContent:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("blob %s: the registry answered a range we did not ask for (%q)", digest, resp.Header.Get("Content-Range"))
	}
	defer resp.Body.Close()
	return nil, 0, fmt.Errorf("blob %s: %w", digest, transport.CheckError(resp, http.StatusOK))
}

// partialBlob is what a pull has of a blob, kept in a file beside the
// pulls while it downloads, so that the next pull resumes from there when
// the connection is cut. It is flock'ed by its user (Prune removes the
// unlocked ones).
type partialBlob struct {
	f    *os.File // opened for appending
	path string
	have int64
}

func (s *Store) openPartial(blob string) (*partialBlob, error) {
	p := s.path("pulls", "blob-"+strings.TrimPrefix(blob, "sha256:"))
	for {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		// Prune may have removed the file between the open and the lock.
		st, err := f.Stat()
		now, nerr := os.Stat(p)
		if err == nil && nerr == nil && os.SameFile(st, now) {
			return &partialBlob{f: f, path: p, have: st.Size()}, nil
		}
		f.Close()
		if err != nil {
			return nil, err
		}
	}
}

// restart drops what the file has (the registry sends the blob whole).
func (p *partialBlob) restart() error {
	p.have = 0
	return p.f.Truncate(0)
}

// close keeps the file for a resume (when it has bytes), or removes it.
func (p *partialBlob) close(keep bool) {
	if st, err := p.f.Stat(); !keep || err != nil || st.Size() == 0 {
		os.Remove(p.path)
	}
	p.f.Close()
}

// resumable reads a blob: the bytes a partial file has, then the body,
// which it appends to the file as they arrive and hashes with them. It
// tells an error of the connection (worth resuming after) from the others.
type resumable struct {
	r       io.Reader
	body    io.Reader
	sum     hash.Hash
	bodyErr error
}

func newResumable(p *partialBlob, body io.Reader) *resumable {
	rs := &resumable{sum: sha256.New()}
	rs.body = &errRecorder{r: body, err: &rs.bodyErr}
	rs.r = io.MultiReader(io.NewSectionReader(p.f, 0, p.have), io.TeeReader(rs.body, p.f))
	return rs
}

func (rs *resumable) Read(b []byte) (int, error) {
	k, err := rs.r.Read(b)
	rs.sum.Write(b[:k])
	return k, err
}

// digest is the sha256 of everything read so far.
func (rs *resumable) digest() string { return "sha256:" + hex.EncodeToString(rs.sum.Sum(nil)) }

// errRecorder remembers the error, other than EOF, its reader returned.
type errRecorder struct {
	r   io.Reader
	err *error
}

func (e *errRecorder) Read(b []byte) (int, error) {
	k, err := e.r.Read(b)
	if err != nil && !errors.Is(err, io.EOF) && *e.err == nil {
		*e.err = err
	}
	return k, err
}

// prunePartials removes the partial blobs no pull is using.
func (s *Store) prunePartials() (int, error) {
	entries, err := os.ReadDir(s.path("pulls"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "blob-") {
			continue
		}
		unlock, err := lockFile(s.path("pulls", e.Name()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue // a pull is downloading it
		}
		if err != nil {
			return n, err
		}
		os.Remove(s.path("pulls", e.Name()))
		unlock()
		n++
	}
	return n, nil
}
