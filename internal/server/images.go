package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
)

// ErrNoImages says the daemon has no state directory to keep images in.
var ErrNoImages = errors.New("images are unavailable")

// imageStore is the daemon's image store, opened on first use.
type imageStore struct {
	mu sync.Mutex
	st *image.Store
}

func (s *Server) images() (*image.Store, error) {
	s.imgs.mu.Lock()
	defer s.imgs.mu.Unlock()
	if s.imgs.st != nil {
		return s.imgs.st, nil
	}
	if s.cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: the daemon has no --state-dir", ErrNoImages)
	}
	// Builds (the bytecode layer) count against the host budget as sandboxes.
	st, err := image.Open(s.cfg.StateDir, image.Options{Registries: s.cfg.Registries, Network: s.net, Admit: s.capacity.admit})
	if err != nil {
		return nil, err
	}
	s.imgs.st = st
	return st, nil
}

// resolveImage finds image ref, pulling it when missing.
func (s *Server) resolveImage(ctx context.Context, ref string) (*image.Store, *image.Image, error) {
	st, err := s.images()
	if err != nil {
		return nil, nil, err
	}
	img, err := st.Lookup(ref)
	if errors.Is(err, image.ErrNotFound) {
		img, err = st.Pull(ctx, ref, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	withBC, bc, err := st.WithBytecode(img)
	if err != nil {
		s.log.Warn("no bytecode layer", "image", ref, "err", err)
	} else if bc.Built {
		s.log.Info("bytecode layer compiled", "image", ref, "ms", bc.Ms)
	}
	return st, withBC, nil
}

// useImage makes ref the root of spec (pulled when missing) and leases it
// for as long as the sandbox lives. It returns the image's digest, which
// the sandbox's spec records, so that its snapshots fork from the very
// image even after the reference moves on.
func (s *Server) useImage(ctx context.Context, ref string, spec *sandbox.Spec, o image.ApplyOptions) (*image.Lease, string, error) {
	if ref == "" {
		return nil, "", nil
	}
	if spec.RootFS != "" {
		return nil, "", fmt.Errorf("%w: image and rootfs both name the root: give one", ErrInvalidArgument)
	}
	st, img, err := s.resolveImage(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	lease, err := st.Use(img)
	if err != nil {
		return nil, "", err
	}
	if err := img.Apply(spec, o); err != nil {
		lease.Release()
		return nil, "", err
	}
	return lease, img.Record.Digest, nil
}

// holdImage keeps the image a snapshot's source ran from (its spec names
// it by digest) from removal while the snapshot exists.
func (s *Server) holdImage(digest, snapshotID string) error {
	if digest == "" {
		return nil
	}
	st, err := s.images()
	if err != nil {
		return err
	}
	return st.Hold(digest, "snapshot-"+snapshotID)
}

func (s *Server) unholdImage(digest, snapshotID string) {
	if digest == "" {
		return
	}
	if st, err := s.images(); err == nil {
		if err := st.Unhold(digest, "snapshot-"+snapshotID); err != nil {
			s.log.Warn("release a snapshot's image", "snapshot", snapshotID, "image", digest, "err", err)
		}
	}
}

func imageSummary(im image.Summary) api.Image {
	return api.Image{Refs: im.Refs, Digest: im.Digest, Size: im.Size, Layers: im.Layers, Created: im.Created, InUse: im.InUse}
}

func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) error {
	var req api.ImagePullRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if _, err := image.ParseRef(req.Ref); err != nil {
		return err
	}
	st, err := s.images()
	if err != nil {
		return err
	}
	// From here the answer is a stream: its status is sent now, and how
	// the pull ended is its last line.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	send := func(ev api.ImagePullEvent) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	img, err := st.Pull(r.Context(), req.Ref, func(p image.Progress) {
		if p.Status == "done" {
			return // the last line carries the image
		}
		send(api.ImagePullEvent{Status: p.Status, Ref: p.Ref, Digest: p.Digest, Done: p.Done, Total: p.Total, Layers: p.Layers})
	})
	if err != nil {
		_, e := wireError(err)
		send(api.ImagePullEvent{Status: "error", Ref: req.Ref, Error: e})
		s.log.Warn("image pull failed", "ref", req.Ref, "err", err)
		return nil
	}
	sum := api.Image{Refs: []string{image.Familiar(req.Ref)}, Digest: img.Record.Digest, Size: img.Record.Size, Layers: len(img.Record.Layers), Created: img.Record.Created}
	send(api.ImagePullEvent{Status: "done", Ref: req.Ref, Digest: img.Record.Digest, Image: &sum})
	s.log.Info("image pulled", "ref", req.Ref, "digest", img.Record.Digest)
	return nil
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	st, err := s.images()
	if err != nil {
		return err
	}
	list, err := st.List()
	if err != nil {
		return err
	}
	out := api.ImageList{Images: make([]api.Image, 0, len(list))}
	for _, im := range list {
		out.Images = append(out.Images, imageSummary(im))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) error {
	st, err := s.images()
	if err != nil {
		return err
	}
	removed, err := st.Remove(r.PathValue("ref"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ImageRemoved{Removed: removed})
	return nil
}
