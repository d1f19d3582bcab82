package client

import (
	"container/list"
	"context"
	"sync"

	"github.com/tine-run/tine/api"
)

// FrameCache holds the screenshots that the ACI sessions of a fleet
// fetched, by frame hash, so that a session whose screen shows a frame
// another session already fetched gets the image from here: its guest
// answers with the hash alone (a not_modified reply), and the image
// crosses the wire once for the whole fleet. Replicas forked from one
// golden snapshot show the same screen until their paths part, so N of
// them observing cost one image, not N. Attach it with ACI.ShareFrames
// (ForkEachDesktop does); it is safe for concurrent use.
//
// A shared screenshot costs a probe first (the hash, no image, no
// encoding: if_none_match "*", docs/aci.md) and, when no session has
// fetched that frame yet, the image itself: one more round trip and
// capture than a plain screenshot, the price of never sending an image
// twice. Sessions that ask for the same frame at once wait for the one
// that fetches it.
type FrameCache struct {
	max int64

	mu      sync.Mutex
	size    int64
	lru     *list.List // of *cachedFrame, the most recently used first
	byKey   map[frameKey]*list.Element
	flights map[frameKey]chan struct{} // a fetch under way: closed when it lands
	stats   FrameCacheStats
}

// FrameCacheStats counts what a FrameCache did.
type FrameCacheStats struct {
	Fetched    int64 // images a guest sent (each then held)
	Shared     int64 // screenshots answered from the cache instead
	SavedBytes int64 // the image bytes those did not send
	Frames     int   // images held now
	Bytes      int64 // their size
}

// frameKey names an encoded image: the frame's pixels (their hash and
// size) and how they were encoded.
type frameKey struct {
	hash, format, encoder  string
	quality, width, height int
}

type cachedFrame struct {
	key frameKey
	img []byte
}

// DefaultFrameCacheBytes bounds a FrameCache made with size 0.
const DefaultFrameCacheBytes = 64 << 20

// NewFrameCache makes a cache holding at most maxBytes of images (0:
// DefaultFrameCacheBytes), dropping the least recently used first.
func NewFrameCache(maxBytes int64) *FrameCache {
	if maxBytes <= 0 {
		maxBytes = DefaultFrameCacheBytes
	}
	return &FrameCache{max: maxBytes, lru: list.New(), byKey: map[frameKey]*list.Element{}, flights: map[frameKey]chan struct{}{}}
}

// Stats says what the cache did so far.
func (fc *FrameCache) Stats() FrameCacheStats {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	s := fc.stats
	s.Frames, s.Bytes = fc.lru.Len(), fc.size
	return s
}

func keyOf(a *ACI, o *api.ACIScreenshot, rep *api.ACIReply) frameKey {
	k := frameKey{hash: rep.FrameHash, format: rep.Format, width: rep.Width, height: rep.Height}
	if k.format == "jpeg" {
		k.quality, k.encoder = 80, a.Welcome.JPEG
		if o != nil && o.Quality > 0 {
			k.quality = o.Quality
		}
	}
	return k
}

// screenshot is ACI.Screenshot through the cache.
func (fc *FrameCache) screenshot(ctx context.Context, a *ACI, o *api.ACIScreenshot) (*api.ACIReply, []byte, error) {
	probe := api.ACIScreenshot{}
	if o != nil {
		probe = *o
	}
	probe.IfNoneMatch = api.ACIAnyFrame
	rep, img, err := a.Do(ctx, &api.ACIRequest{Op: "screenshot", Screenshot: &probe})
	if err != nil {
		return rep, img, err
	}
	img, err = fc.fill(ctx, a, o, rep, img)
	return rep, img, err
}

// fill completes rep, the answer to a probe (a screenshot or a step's
// observation asked with if_none_match "*"), with its image: from the
// cache, or fetched (once for all the sessions that want it) and kept.
// rep's image fields are updated to describe the image returned (its
// other fields, a step's results, stay). When the caller's own
// if_none_match is the frame's hash, the answer stays not_modified.
func (fc *FrameCache) fill(ctx context.Context, a *ACI, o *api.ACIScreenshot, rep *api.ACIReply, img []byte) ([]byte, error) {
	if !rep.NotModified { // a guest without frame_probe sent the image
		if img != nil {
			fc.land(keyOf(a, o, rep), img, true)
		}
		return img, nil
	}
	if o != nil && o.IfNoneMatch != "" && o.IfNoneMatch == rep.FrameHash {
		return nil, nil
	}
	k := keyOf(a, o, rep)
	for {
		img, flight := fc.lookup(k)
		if img != nil {
			rep.NotModified, rep.Bytes = false, len(img)
			return img, nil
		}
		if flight != nil { // another session fetches this frame
			select {
			case <-flight:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		full := api.ACIScreenshot{}
		if o != nil {
			full = *o
		}
		full.IfNoneMatch = ""
		got, img, err := a.Do(ctx, &api.ACIRequest{Op: "screenshot", Screenshot: &full})
		if err != nil || img == nil {
			fc.land(k, nil, false)
			return nil, err
		}
		// The screen may have moved since the probe: the image is of the
		// frame got names, kept under that, and k's waiters look again.
		rep.FrameHash, rep.Format, rep.Width, rep.Height = got.FrameHash, got.Format, got.Width, got.Height
		rep.NotModified, rep.Bytes = false, len(img)
		gk := keyOf(a, o, got)
		fc.land(gk, img, true)
		if gk != k {
			fc.land(k, nil, false)
		}
		return img, nil
	}
}

// lookup returns k's image (counted as shared), or the flight to wait
// for; with neither, the caller fetches k and must land it.
func (fc *FrameCache) lookup(k frameKey) ([]byte, chan struct{}) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if e, ok := fc.byKey[k]; ok {
		fc.lru.MoveToFront(e)
		img := e.Value.(*cachedFrame).img
		fc.stats.Shared++
		fc.stats.SavedBytes += int64(len(img))
		return img, nil
	}
	if f, ok := fc.flights[k]; ok {
		return nil, f
	}
	fc.flights[k] = make(chan struct{})
	return nil, nil
}

// land ends k's flight, keeping img when there is one (fetched: a guest
// sent it), and drops the least recently used images past the bound.
func (fc *FrameCache) land(k frameKey, img []byte, fetched bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if f, ok := fc.flights[k]; ok {
		close(f)
		delete(fc.flights, k)
	}
	if img == nil {
		return
	}
	if fetched {
		fc.stats.Fetched++
	}
	if _, ok := fc.byKey[k]; ok || int64(len(img)) > fc.max {
		return
	}
	fc.byKey[k] = fc.lru.PushFront(&cachedFrame{key: k, img: img})
	fc.size += int64(len(img))
	for fc.size > fc.max {
		old := fc.lru.Remove(fc.lru.Back()).(*cachedFrame)
		delete(fc.byKey, old.key)
		fc.size -= int64(len(old.img))
	}
}
