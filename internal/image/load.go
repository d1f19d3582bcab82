package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Load stores the images of a `docker save` tarball (file) or an OCI
// image layout (directory), offline. It returns the references (or, for
// an untagged image, the digests) it stored.
func (s *Store) Load(ctx context.Context, path string, progress ProgressFunc) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if st.IsDir() {
		return s.loadLayout(ctx, path, progress)
	}
	return s.loadTarball(ctx, path, progress)
}

func (s *Store) loadTarball(ctx context.Context, path string, progress ProgressFunc) ([]string, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("load %s: not a docker save tarball (%w); for an OCI layout give its directory", path, err)
	}
	var out []string
	for i, m := range manifest {
		var tag *name.Tag
		var refs []name.Reference
		for _, rt := range m.RepoTags {
			t, err := name.NewTag(rt)
			if err != nil {
				return out, fmt.Errorf("load %s: image %d: tag %q: %w", path, i, rt, err)
			}
			refs = append(refs, t)
			if tag == nil {
				tag = &t
			}
		}
		if tag == nil && len(manifest) > 1 {
			return out, fmt.Errorf("load %s: image %d has no tag, and the tarball holds %d images", path, i, len(manifest))
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return out, fmt.Errorf("load %s: %w", path, err)
		}
		names, err := s.installLoaded(ctx, img, refs, progress)
		out = append(out, names...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// refNameAnnotation tags a manifest of an OCI layout.
const refNameAnnotation = "org.opencontainers.image.ref.name"

func (s *Store) loadLayout(ctx context.Context, dir string, progress ProgressFunc) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, fmt.Errorf("load %s: a directory must be an OCI image layout (it has no oci-layout file)", dir)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	var out []string
	for _, d := range m.Manifests {
		var img v1.Image
		switch {
		case d.MediaType.IsImage():
			img, err = idx.Image(d.Digest)
		case d.MediaType.IsIndex():
			var sub v1.ImageIndex
			if sub, err = idx.ImageIndex(d.Digest); err == nil {
				img, err = pickPlatform(sub, *s.opts.Platform)
			}
		default:
			continue
		}
		if err != nil {
			return out, fmt.Errorf("load %s: %s: %w", dir, d.Digest, err)
		}
		var refs []name.Reference
		if rn := d.Annotations[refNameAnnotation]; rn != "" {
			r, err := name.ParseReference(rn)
			if err != nil {
				return out, fmt.Errorf("load %s: reference %q: %w", dir, rn, err)
			}
			refs = append(refs, r)
		}
		names, err := s.installLoaded(ctx, img, refs, progress)
		out = append(out, names...)
		if err != nil {
			return out, err
		}
	}
	if len(out) == 0 {
		return nil, errors.New("load " + dir + ": the layout's index lists no image")
	}
	return out, nil
}

func (s *Store) installLoaded(ctx context.Context, img v1.Image, refs []name.Reference, progress ProgressFunc) ([]string, error) {
	if err := s.install(ctx, img, refs, nil, progress); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		d, _ := img.Digest()
		return []string{d.String()}, nil
	}
	var out []string
	for _, r := range refs {
		out = append(out, Familiar(r.Name()))
	}
	return out, nil
}
