package x11

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xproto"
)

// screenDamage counts screen changes reported by the DAMAGE extension.
type screenDamage struct {
	id      damage.Damage // 0 when the server lacks DAMAGE
	version atomic.Uint64
}

// initDamage asks for one notification each time the screen goes from
// unchanged to changed (ReportLevelNonEmpty); the event loop re-arms it.
// Damage on the root window covers drawing in every window on it.
func (d *Display) initDamage() {
	if damage.Init(d.conn) != nil {
		return
	}
	if _, err := damage.QueryVersion(d.conn, 1, 1).Reply(); err != nil {
		return
	}
	id, err := damage.NewDamageId(d.conn)
	if err != nil {
		return
	}
	if damage.CreateChecked(d.conn, id, xproto.Drawable(d.root), damage.ReportLevelNonEmpty).Check() == nil {
		d.damage.id = id
	}
}

// onDamage counts a change and re-arms the report (subtracting all damage
// makes the next drawing report again).
func (d *Display) onDamage() {
	d.damage.version.Add(1)
	damage.Subtract(d.conn, d.damage.id, 0, 0)
}

// ScreenVersion is a counter that grows whenever something is drawn on
// the screen (0 forever on a server without DAMAGE; see Damage). Read it
// before an action, then WaitScreenChange for a change after it.
func (d *Display) ScreenVersion() uint64 { return d.damage.version.Load() }

// Damage says whether the server reports screen changes.
func (d *Display) Damage() bool { return d.damage.id != 0 }

// WaitScreenChange waits until ScreenVersion is past since, and returns
// the new version.
func (d *Display) WaitScreenChange(ctx context.Context, since uint64) (uint64, error) {
	if !d.Damage() {
		return 0, fmt.Errorf("the X server has no DAMAGE extension: screen changes cannot be watched")
	}
	var v uint64
	err := d.waitFor(ctx, func() (bool, error) {
		v = d.ScreenVersion()
		return v > since, nil
	})
	return v, err
}

// WaitScreenIdle waits until the screen has not changed for quiet (an
// application finished drawing), or ctx ends.
func (d *Display) WaitScreenIdle(ctx context.Context, quiet time.Duration) error {
	if !d.Damage() {
		return fmt.Errorf("the X server has no DAMAGE extension: screen changes cannot be watched")
	}
	for {
		v := d.ScreenVersion()
		wait, cancel := context.WithTimeout(ctx, quiet)
		_, err := d.WaitScreenChange(wait, v)
		cancel()
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("wait for an idle screen: %w", ctx.Err())
		case err != nil && wait.Err() == context.DeadlineExceeded:
			return nil // quiet for the whole period
		case err != nil:
			return err
		}
	}
}
