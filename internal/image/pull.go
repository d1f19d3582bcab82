package image

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// Progress is one step of a pull or load, for a display or a stream.
type Progress struct {
	// Status: "resolved" (the manifest is known: Total is the image's
	// size), "cached" (a layer the store has), "fetching" (Done of Total
	// bytes of a layer), "unpacked" (a layer is in the store), "done".
	Status string `json:"status"`
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"` // the image's, or the layer's blob
	Done   int64  `json:"done,omitempty"`
	Total  int64  `json:"total,omitempty"`
	Layers int    `json:"layers,omitempty"`
}

// ProgressFunc receives progress; it may be called from several
// goroutines at once (layers are fetched in parallel).
type ProgressFunc func(Progress)

// fetchParallel bounds the layers fetched at once by one pull.
const fetchParallel = 3

// Pull fetches ref from its registry (through its mirrors first) and
// stores it: the platform's image when ref names an index. Layers the
// store has are not fetched again, so a pull that was interrupted resumes
// with the layers it had not finished; two pulls of one layer, in this
// process or another, fetch it once (a lock per layer).
func (s *Store) Pull(ctx context.Context, ref string, progress ProgressFunc) (*Image, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	sources, err := s.opts.Registries.sources(r)
	if err != nil {
		return nil, err
	}
	var img v1.Image
	var from name.Reference
	var errs []error
	for _, src := range sources {
		img, err = s.remoteImage(ctx, src)
		if err == nil {
			from = src
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", src.Context().RegistryStr(), err))
	}
	if img == nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPull, ref, errors.Join(errs...))
	}
	blobs, err := s.newBlobSource(ctx, from.Context())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPull, ref, err)
	}
	if err := s.install(ctx, img, []name.Reference{r}, blobs, progress); err != nil {
		return nil, err
	}
	return s.Lookup(ref)
}

func (s *Store) remoteImage(ctx context.Context, ref name.Reference) (v1.Image, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(s.opts.Keychain), remote.WithPlatform(*s.opts.Platform)}
	if s.opts.Transport != nil {
		opts = append(opts, remote.WithTransport(s.opts.Transport))
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, err
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		return pickPlatform(idx, *s.opts.Platform)
	}
	return desc.Image()
}

// pickPlatform returns the index's image for platform p.
func pickPlatform(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var seen []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			continue
		}
		seen = append(seen, d.Platform.String())
		if d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture && (p.Variant == "" || d.Platform.Variant == "" || d.Platform.Variant == p.Variant) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s in the index (it has %v)", p, seen)
}

// install stores img's layers and record and points refs at it. With
// blobs the layers come from a registry (fetched compressed, resumably,
// and counted as such); a loaded one's (blobs nil) are read uncompressed.
func (s *Store) install(ctx context.Context, img v1.Image, refs []name.Reference, blobs *blobSource, progress ProgressFunc) error {
	remote := blobs != nil
	if progress == nil {
		progress = func(Progress) {}
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("%w: manifest: %w", ErrPull, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("%w: config: %w", ErrPull, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("%w: layers: %w", ErrPull, err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf("%w: %s: the manifest lists %d layers, the config %d diff IDs", ErrPull, digest, len(layers), len(cfg.RootFS.DiffIDs))
	}
	if len(layers) == 0 {
		return fmt.Errorf("%w: %s has no layers", ErrPull, digest)
	}
	rec := &Record{Version: FormatVersion, Digest: digest.String(), Config: Config{
		Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd,
		WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
	}, Platform: cfg.OS + "/" + cfg.Architecture, Created: cfg.Created.Time, Stored: time.Now().UTC()}
	ids := make([]store.Digest, len(layers))
	for i, l := range layers {
		d, err := store.ParseDigest(cfg.RootFS.DiffIDs[i].String())
		if err != nil {
			return fmt.Errorf("%w: layer %d: %w", ErrPull, i, err)
		}
		ids[i] = d
		lr := Layer{DiffID: d}
		if remote {
			if bd, err := l.Digest(); err == nil {
				lr.Digest = bd.String()
			}
			if n, err := l.Size(); err == nil {
				lr.Size = n
				rec.Size += n
			}
		}
		rec.Layers = append(rec.Layers, lr)
	}
	var names []string
	for _, r := range refs {
		names = append(names, Familiar(r.Name()))
	}
	progress(Progress{Status: "resolved", Ref: joinNames(names), Digest: rec.Digest, Total: rec.Size, Layers: len(layers)})

	// While the pull runs, its pin keeps what it has fetched from the
	// snapshot catalog's collection, and from prune (the pull's lock is
	// held); a crashed pull's pin keeps them for the pull that resumes.
	h := hexOf(rec.Digest)
	unlockPull, err := lockFile(s.path("pulls", h), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("%w: lock: %w", ErrPull, err)
	}
	defer unlockPull()
	pin := "pull-" + h
	if err := s.Layers.Pin(pin, ids); err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}

	var wg sync.WaitGroup
	errs := make([]error, len(layers))
	sem := make(chan struct{}, fetchParallel)
	for i := range layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = s.fetchLayer(ctx, layers[i], &rec.Layers[i], blobs, progress)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}

	if err := writeAtomic(s.recordPath(rec.Digest), rec); err != nil {
		return fmt.Errorf("%w: write record: %w", ErrPull, err)
	}
	if err := s.Layers.Pin("image-"+h, ids); err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}
	if err := s.updateRefs(func(m map[string]string) error {
		for _, r := range refs {
			m[r.Name()] = rec.Digest
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}
	if err := s.Layers.Unpin(pin); err != nil {
		return err
	}
	os.Remove(s.path("pulls", h))
	progress(Progress{Status: "done", Ref: joinNames(names), Digest: rec.Digest, Total: rec.Size, Layers: len(layers)})
	return nil
}

func joinNames(n []string) string {
	if len(n) == 0 {
		return ""
	}
	out := n[0]
	for _, x := range n[1:] {
		out += ", " + x
	}
	return out
}

// fetchLayer makes layer l (described by lr) present in the store, under
// the layer's lock: whoever holds it first fetches, the others find it
// there. From a registry (blobs) the compressed bytes are kept as they
// arrive, so that a pull cut short resumes within the layer.
func (s *Store) fetchLayer(ctx context.Context, l v1.Layer, lr *Layer, blobs *blobSource, progress ProgressFunc) error {
	unlock, err := lockFile(s.path("locks", lr.DiffID.Hex()), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("lock layer %s: %w", lr.DiffID, err)
	}
	defer unlock()
	if s.Layers.Has(lr.DiffID) {
		progress(Progress{Status: "cached", Digest: lr.Digest, Done: lr.Size, Total: lr.Size})
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if blobs == nil || lr.Digest == "" || lr.Size <= 0 {
		var rc io.ReadCloser
		if blobs != nil {
			rc, err = l.Compressed() // no digest or size to resume by
		} else {
			rc, err = l.Uncompressed()
		}
		if err != nil {
			return fmt.Errorf("layer %s: %w", lr.DiffID, err)
		}
		defer rc.Close()
		_, err = s.unpackLayer(ctx, rc, lr, nil, progress)
		return err
	}

	part, err := s.openPartial(lr.Digest)
	if err != nil {
		return fmt.Errorf("layer %s: %w", lr.DiffID, err)
	}
	if part.have >= lr.Size {
		part.restart() // more than the blob: not a prefix of it
	}
	body, from, err := blobs.open(ctx, lr.Digest, part.have, lr.Size)
	if err != nil {
		part.close(true)
		return fmt.Errorf("layer %s: %w", lr.DiffID, err)
	}
	defer body.Close()
	if from == 0 && part.have > 0 {
		if err := part.restart(); err != nil {
			part.close(false)
			return err
		}
	}
	rs := newResumable(part, body)
	n, err := s.unpackLayer(ctx, rs, lr, func(n int64) error {
		if n != lr.Size || rs.digest() != lr.Digest {
			return fmt.Errorf("its blob is %d bytes with digest %s, the manifest says %d, %s: corrupt or tampered with", n, rs.digest(), lr.Size, lr.Digest)
		}
		return nil
	}, progress)
	// What arrived is kept only when the connection failed (or the pull
	// was stopped): then it is a true prefix of the blob to resume from.
	keep := err != nil && (rs.bodyErr != nil || ctx.Err() != nil)
	part.close(keep)
	if keep {
		return fmt.Errorf("%w (%d of %d bytes kept: the next pull resumes from there)", err, n, lr.Size)
	}
	return err
}

// unpackLayer unpacks the (compressed or plain) tar in r into the layer
// of lr and publishes it when its content's digest is lr's diff ID and
// verify (if any) accepts the count of r's bytes, read to its end (past
// the tar's); that count is returned.
func (s *Store) unpackLayer(ctx context.Context, r io.Reader, lr *Layer, verify func(n int64) error, progress ProgressFunc) (int64, error) {
	counted := &counter{r: r, ctx: ctx, report: func(n int64) {
		progress(Progress{Status: "fetching", Digest: lr.Digest, Done: n, Total: lr.Size})
	}}
	tarStream, err := decompress(counted)
	if err != nil {
		return counted.n, fmt.Errorf("layer %s: %w", lr.DiffID, err)
	}
	defer tarStream.Close()
	draft, err := s.Layers.Draft(lr.DiffID)
	if err != nil {
		return counted.n, err
	}
	u, err := Unpack(tarStream, draft.Dir())
	if err == nil && u.DiffID != string(lr.DiffID) {
		err = fmt.Errorf("its content's digest is %s: corrupt or tampered with", u.DiffID)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, counted)
	}
	if err == nil && verify != nil {
		err = verify(counted.n)
	}
	if err != nil {
		draft.Discard()
		return counted.n, fmt.Errorf("layer %s: %w", lr.DiffID, err)
	}
	if _, err := draft.Publish(); err != nil {
		return counted.n, err
	}
	progress(Progress{Status: "unpacked", Digest: lr.Digest, Done: counted.n, Total: lr.Size})
	return counted.n, nil
}

// counter counts the bytes read through it, reporting every 256 KiB, and
// stops when ctx ends.
type counter struct {
	r       io.Reader
	ctx     context.Context
	n, last int64
	report  func(int64)
}

func (c *counter) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	k, err := c.r.Read(p)
	c.n += int64(k)
	if c.n-c.last >= 256<<10 {
		c.last = c.n
		c.report(c.n)
	}
	return k, err
}

// decompress returns the tar stream inside r: gzip and zstd are told by
// their magic numbers (media types are not always right), anything else
// is read as a plain tar.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
