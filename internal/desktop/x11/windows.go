package x11

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jezek/xgb/xproto"
)

// Window is a top-level application window.
type Window struct {
	ID       uint32
	Title    string // _NET_WM_NAME (UTF-8), else WM_NAME
	Class    string // WM_CLASS class, e.g. "XTerm"
	Instance string // WM_CLASS instance, e.g. "xterm"
	PID      int    // _NET_WM_PID, 0 when the client does not say
	// Geometry of the client area on the screen (without decorations).
	X, Y, Width, Height int
	Focused             bool
}

// Windows lists the top-level windows: the window manager's
// _NET_CLIENT_LIST when there is an EWMH window manager, otherwise the
// mapped children of the root window that look like applications.
func (d *Display) Windows() ([]Window, error) {
	wm := d.ewmh()
	ids, err := d.clients(wm)
	if err != nil {
		return nil, d.connErr(err)
	}
	focus := d.focused(ids, wm)

	// Every request for every window goes out before the first reply is
	// read: one round trip for the whole list.
	type cookies struct {
		netName, name, class, pid xproto.GetPropertyCookie
		geom                      xproto.GetGeometryCookie
		pos                       xproto.TranslateCoordinatesCookie
	}
	cs := make([]cookies, len(ids))
	for i, id := range ids {
		cs[i] = cookies{
			netName: d.getProp(id, "_NET_WM_NAME"),
			name:    d.getProp(id, "WM_NAME"),
			class:   d.getProp(id, "WM_CLASS"),
			pid:     d.getProp(id, "_NET_WM_PID"),
			geom:    xproto.GetGeometry(d.conn, xproto.Drawable(id)),
			pos:     xproto.TranslateCoordinates(d.conn, id, d.root, 0, 0),
		}
	}
	out := make([]Window, 0, len(ids))
	for i, id := range ids {
		c := cs[i]
		g, err := c.geom.Reply()
		pos, perr := c.pos.Reply()
		netName, _ := c.netName.Reply()
		name, _ := c.name.Reply()
		class, _ := c.class.Reply()
		pid, _ := c.pid.Reply()
		if err != nil || perr != nil {
			continue // gone between listing and asking: not in the list
		}
		w := Window{ID: uint32(id), X: int(pos.DstX), Y: int(pos.DstY), Width: int(g.Width), Height: int(g.Height), Focused: id == focus}
		w.Title = propString(netName)
		if w.Title == "" {
			w.Title = propString(name)
		}
		if class != nil {
			parts := strings.Split(string(class.Value), "\x00")
			if len(parts) >= 2 {
				w.Instance, w.Class = parts[0], parts[1]
			}
		}
		if pid != nil && pid.Format == 32 && len(pid.Value) >= 4 {
			w.PID = int(binary.LittleEndian.Uint32(pid.Value))
		}
		out = append(out, w)
	}
	return out, nil
}

func (d *Display) getProp(w xproto.Window, name string) xproto.GetPropertyCookie {
	return xproto.GetProperty(d.conn, false, w, d.atom(name), xproto.GetPropertyTypeAny, 0, 1<<14)
}

// prop reads a property; nil when it is not set.
func (d *Display) prop(w xproto.Window, name string) (*xproto.GetPropertyReply, error) {
	r, err := d.getProp(w, name).Reply()
	if err != nil {
		return nil, windowErr(w, err)
	}
	if r.Format == 0 {
		return nil, nil
	}
	return r, nil
}

func propString(r *xproto.GetPropertyReply) string {
	if r == nil || r.Format != 8 {
		return ""
	}
	return strings.TrimRight(string(r.Value), "\x00")
}

// propWindows decodes a property of 32-bit window ids (little endian, as
// xgb hands them over on this side).
func propWindows(r *xproto.GetPropertyReply) []xproto.Window {
	if r == nil || r.Format != 32 {
		return nil
	}
	ids := make([]xproto.Window, 0, len(r.Value)/4)
	for i := 0; i+4 <= len(r.Value); i += 4 {
		ids = append(ids, xproto.Window(binary.LittleEndian.Uint32(r.Value[i:])))
	}
	return ids
}

// ewmh says whether an EWMH window manager runs (it owns _NET_CLIENT_LIST
// and _NET_ACTIVE_WINDOW).
func (d *Display) ewmh() bool {
	r, err := d.prop(d.root, "_NET_SUPPORTING_WM_CHECK")
	return err == nil && len(propWindows(r)) > 0
}

// clients lists top-level windows, from the window manager's list when wm
// (an EWMH window manager runs).
func (d *Display) clients(wm bool) ([]xproto.Window, error) {
	if wm {
		r, err := d.prop(d.root, "_NET_CLIENT_LIST")
		if err != nil {
			return nil, err
		}
		if r != nil {
			return propWindows(r), nil
		}
	}
	tree, err := xproto.QueryTree(d.conn, d.root).Reply()
	if err != nil {
		return nil, err
	}
	attrs := make([]xproto.GetWindowAttributesCookie, len(tree.Children))
	classes := make([]xproto.GetPropertyCookie, len(tree.Children))
	for i, c := range tree.Children {
		attrs[i] = xproto.GetWindowAttributes(d.conn, c)
		classes[i] = d.getProp(c, "WM_CLASS")
	}
	var ids []xproto.Window
	for i, c := range tree.Children {
		a, err := attrs[i].Reply()
		cl, cerr := classes[i].Reply()
		if err != nil || cerr != nil || a.OverrideRedirect || a.MapState != xproto.MapStateViewable {
			continue
		}
		if cl.Format != 0 { // applications set WM_CLASS; bare helper windows do not
			ids = append(ids, c)
		}
	}
	return ids, nil
}

// focused is the client among ids that has the focus, or 0.
func (d *Display) focused(ids []xproto.Window, wm bool) xproto.Window {
	if wm {
		if r, err := d.prop(d.root, "_NET_ACTIVE_WINDOW"); err == nil {
			if a := propWindows(r); len(a) > 0 && a[0] != 0 {
				return a[0]
			}
		}
	}
	f, err := xproto.GetInputFocus(d.conn).Reply()
	if err != nil {
		return 0
	}
	// The focus may sit on a child of the client: walk up to it.
	for w := f.Focus; w != 0 && w != d.root && w != xproto.InputFocusPointerRoot; {
		if slices.Contains(ids, w) {
			return w
		}
		t, err := xproto.QueryTree(d.conn, w).Reply()
		if err != nil {
			return 0
		}
		w = t.Parent
	}
	return 0
}

// exists fails with *NoWindowError when id is not a window.
func (d *Display) exists(id uint32) error {
	_, err := xproto.GetGeometry(d.conn, xproto.Drawable(id)).Reply()
	if err != nil {
		return windowErr(xproto.Window(id), d.connErr(err))
	}
	return nil
}

// clientMessage sends a 32-bit ClientMessage about win to dest, the way
// EWMH and ICCCM want requests to the window manager and to clients.
func (d *Display) clientMessage(dest, win xproto.Window, typ string, data ...uint32) error {
	ev := xproto.ClientMessageEvent{Format: 32, Window: win, Type: d.atom(typ), Data: xproto.ClientMessageDataUnionData32New(append(data, make([]uint32, 5-len(data))...))}
	mask := uint32(0)
	if dest == d.root {
		mask = xproto.EventMaskSubstructureRedirect | xproto.EventMaskSubstructureNotify
	}
	return xproto.SendEventChecked(d.conn, false, dest, mask, string(ev.Bytes())).Check()
}

// focusWait bounds how long Focus waits for the window manager to confirm.
const focusWait = 2 * time.Second

// FocusWindow raises window id and gives it the keyboard focus. With an EWMH
// window manager it asks the manager (as a pager would) and waits until
// _NET_ACTIVE_WINDOW names the window; without one it sets the focus
// itself.
func (d *Display) FocusWindow(id uint32) error {
	if err := d.exists(id); err != nil {
		return err
	}
	w := xproto.Window(id)
	if !d.ewmh() {
		xproto.ConfigureWindow(d.conn, w, xproto.ConfigWindowStackMode, []uint32{xproto.StackModeAbove})
		if err := xproto.SetInputFocusChecked(d.conn, xproto.InputFocusParent, w, xproto.TimeCurrentTime).Check(); err != nil {
			return windowErr(w, err)
		}
		return nil
	}
	const sourcePager = 2 // a pager's request is obeyed even without a recent user timestamp
	if err := d.clientMessage(d.root, w, "_NET_ACTIVE_WINDOW", sourcePager, xproto.TimeCurrentTime); err != nil {
		return d.connErr(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), focusWait)
	defer cancel()
	err := d.waitFor(ctx, func() (bool, error) {
		if err := d.exists(id); err != nil {
			return false, err
		}
		r, err := d.prop(d.root, "_NET_ACTIVE_WINDOW")
		a := propWindows(r)
		return err == nil && len(a) > 0 && a[0] == w, nil
	})
	if err != nil {
		return fmt.Errorf("focus window 0x%x: %w", id, err)
	}
	return nil
}

// CloseWindow asks window id to close, the way a click on its close button does:
// WM_DELETE_WINDOW when the client supports it (it may ask to save first),
// else the window manager's _NET_CLOSE_WINDOW, else KillClient. It does not
// wait for the window to go; use WaitWindowGone for that.
func (d *Display) CloseWindow(id uint32) error {
	if err := d.exists(id); err != nil {
		return err
	}
	w := xproto.Window(id)
	protocols, err := d.prop(w, "WM_PROTOCOLS")
	if err != nil {
		return err
	}
	del := d.atom("WM_DELETE_WINDOW")
	if slices.Contains(propWindows(protocols), xproto.Window(del)) {
		err = d.clientMessage(w, w, "WM_PROTOCOLS", uint32(del), xproto.TimeCurrentTime)
	} else if d.ewmh() {
		err = d.clientMessage(d.root, w, "_NET_CLOSE_WINDOW", xproto.TimeCurrentTime, 2)
	} else {
		err = xproto.KillClientChecked(d.conn, uint32(w)).Check()
	}
	if err != nil {
		return windowErr(w, d.connErr(err))
	}
	return nil
}

// WaitForWindow waits until a top-level window matches, and returns it.
// It re-checks on X events (windows mapped, renamed, focused, …), not on a
// timer; ctx bounds the wait.
func (d *Display) WaitForWindow(ctx context.Context, match func(Window) bool) (Window, error) {
	var found Window
	watched := map[uint32]bool{}
	err := d.waitFor(ctx, func() (bool, error) {
		for {
			ws, err := d.Windows()
			if err != nil {
				return false, err
			}
			fresh := false
			for _, w := range ws {
				if match(w) {
					found = w
					return true, nil
				}
				if !watched[w.ID] {
					// Titles change on the client window, not the root:
					// listen there too (event masks are per client).
					watched[w.ID], fresh = true, true
					xproto.ChangeWindowAttributes(d.conn, xproto.Window(w.ID), xproto.CwEventMask,
						[]uint32{xproto.EventMaskPropertyChange | xproto.EventMaskStructureNotify})
				}
			}
			if !fresh {
				return false, nil
			}
			// A change between the listing and the selection above sent no
			// event to us: list once more.
		}
	})
	return found, err
}

// WaitWindowGone waits until window id no longer exists or is no longer
// listed by Windows.
func (d *Display) WaitWindowGone(ctx context.Context, id uint32) error {
	xproto.ChangeWindowAttributes(d.conn, xproto.Window(id), xproto.CwEventMask, []uint32{xproto.EventMaskStructureNotify})
	return d.waitFor(ctx, func() (bool, error) {
		ws, err := d.Windows()
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(ws, func(w Window) bool { return w.ID == id }), nil
	})
}

// waitFor evaluates cond now and after every X event until it holds, it
// fails, or ctx ends.
func (d *Display) waitFor(ctx context.Context, cond func() (bool, error)) error {
	for {
		next, open := d.changes() // taken before cond: no event is missed
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if !open {
			return ErrClosed
		}
		select {
		case <-next:
		case <-ctx.Done():
			return fmt.Errorf("wait: %w", ctx.Err())
		}
	}
}

// SetLaunchCredential makes Launch start applications as cred (nil: as
// this process): a desktop's session account.
func (d *Display) SetLaunchCredential(cred *syscall.Credential) { d.launchCred = cred }

// Launch starts an application on this display (DISPLAY set to it) and
// returns at once; wait for its window with WaitForWindow.
func (d *Display) Launch(name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+d.name)
	if d.launchCred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.launchCred}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	return cmd, nil
}
