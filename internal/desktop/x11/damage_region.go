package x11

import (
	"fmt"
	"image"
	"sync"
	"time"

	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xproto"
)

// DamageRegion collects the rectangles drawn on the screen since the last
// Take, for a screencast that reads and encodes only what changed. It is
// a DAMAGE object of its own on the root (DeltaRectangles: the server
// reports each area the damage grows by), apart from the one behind
// ScreenVersion.
type DamageRegion struct {
	d  *Display
	id damage.Damage

	mu      sync.Mutex
	pending []image.Rectangle
	since   time.Time     // when the first pending rectangle came
	wake    chan struct{} // one token: something is pending
}

// maxPendingRects bounds the list between two Takes: past it the pending
// area becomes its bounding box.
const maxPendingRects = 64

// NewDamageRegion starts collecting. Close it when done.
func (d *Display) NewDamageRegion() (*DamageRegion, error) {
	if !d.Damage() {
		return nil, fmt.Errorf("the X server has no DAMAGE extension: screen changes cannot be watched")
	}
	id, err := damage.NewDamageId(d.conn)
	if err != nil {
		return nil, d.connErr(err)
	}
	r := &DamageRegion{d: d, id: id, wake: make(chan struct{}, 1)}
	d.regionsMu.Lock()
	if d.regions == nil {
		d.regions = map[damage.Damage]*DamageRegion{}
	}
	d.regions[id] = r
	d.regionsMu.Unlock()
	if err := damage.CreateChecked(d.conn, id, xproto.Drawable(d.root), damage.ReportLevelDeltaRectangles).Check(); err != nil {
		r.forget()
		return nil, fmt.Errorf("create a damage region: %w", d.connErr(err))
	}
	return r, nil
}

// Changed has a value when something was drawn since the last Take.
func (r *DamageRegion) Changed() <-chan struct{} { return r.wake }

// Take returns the rectangles drawn since the last Take (unmerged, maybe
// overlapping; nil when none) and when the first of them was reported,
// and clears the server's region. Capture
// what it returns after Take: whatever is drawn before the server clears
// the region is in a capture made after it, and whatever comes after
// reports again, so no change is lost (some may be read twice).
func (r *DamageRegion) Take() ([]image.Rectangle, time.Time) {
	r.mu.Lock()
	rects, since := r.pending, r.since
	r.pending = nil
	select {
	case <-r.wake:
	default:
	}
	r.mu.Unlock()
	if rects != nil {
		damage.Subtract(r.d.conn, r.id, 0, 0)
	}
	return rects, since
}

// Close stops collecting.
func (r *DamageRegion) Close() {
	r.forget()
	damage.Destroy(r.d.conn, r.id)
}

func (r *DamageRegion) forget() {
	r.d.regionsMu.Lock()
	delete(r.d.regions, r.id)
	r.d.regionsMu.Unlock()
}

// add records one notification's area.
func (r *DamageRegion) add(a xproto.Rectangle) {
	rect := image.Rect(int(a.X), int(a.Y), int(a.X)+int(a.Width), int(a.Y)+int(a.Height))
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.since = time.Now()
	}
	if len(r.pending) >= maxPendingRects {
		u := rect
		for _, p := range r.pending {
			u = u.Union(p)
		}
		r.pending = append(r.pending[:0], u)
	} else {
		r.pending = append(r.pending, rect)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// regionEvent hands a notification to the region it belongs to; false
// when it is not one of theirs.
func (d *Display) regionEvent(ev damage.NotifyEvent) bool {
	d.regionsMu.Lock()
	r := d.regions[ev.Damage]
	d.regionsMu.Unlock()
	if r == nil {
		return false
	}
	r.add(ev.Area)
	return true
}
