package aci_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// TestFrameProbeAndSharedCache: if_none_match "*" answers with the frame's
// hash and no image, and two sessions sharing a client.FrameCache fetch a
// frame once: the second gets the first's image, with a not_modified of a
// few hundred bytes on its wire. A changed screen is fetched again, once.
func TestFrameProbeAndSharedCache(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-geometry", "40x10+0+0"})
	ctx := context.Background()
	if !slices.Contains(a.Welcome.Capabilities, "frame_probe") {
		t.Fatalf("capabilities %v lack frame_probe", a.Welcome.Capabilities)
	}
	full, img, err := a.Screenshot(ctx, &api.ACIScreenshot{})
	if err != nil || len(img) < 1024 {
		t.Fatalf("control: a plain screenshot: %d bytes, %v", len(img), err)
	}
	probe, none, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: api.ACIAnyFrame})
	if err != nil || !probe.NotModified || len(none) != 0 || probe.FrameHash != full.FrameHash || probe.Width != 800 {
		t.Fatalf("probe: %+v, %d bytes, %v; want not_modified with the frame's hash %s and size", probe, len(none), err, full.FrameHash)
	}

	b, err := client.DialGuest(ctx, guestSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fc := client.NewFrameCache(0)
	a.ShareFrames(fc)
	b.ShareFrames(fc)
	shot := func(s *client.ACI) (string, []byte, int64) {
		t.Helper()
		rx := s.Received()
		rep, img, err := s.Screenshot(ctx, &api.ACIScreenshot{})
		if err != nil || rep.NotModified || len(img) == 0 {
			t.Fatalf("shared screenshot: %+v, %d bytes, %v", rep, len(img), err)
		}
		return rep.FrameHash, img, s.Received() - rx
	}
	ha, ia, wa := shot(a)
	hb, ib, wb := shot(b)
	if ha != full.FrameHash || hb != ha || !bytes.Equal(ia, ib) {
		t.Errorf("the sessions' frames %s and %s (the screen's %s) differ", ha, hb, full.FrameHash)
	}
	if wa < int64(len(ia)) || wb > 1024 {
		t.Errorf("wire bytes: %d for the fetch of %d, %d for the shared one (want a few hundred)", wa, len(ia), wb)
	}
	if st := fc.Stats(); st.Fetched != 1 || st.Shared != 1 || st.SavedBytes != int64(len(ia)) {
		t.Errorf("stats %+v: want 1 fetched, 1 shared", st)
	}

	// The session's own if_none_match still answers not_modified.
	if rep, img, err := b.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: ha}); err != nil || !rep.NotModified || img != nil {
		t.Errorf("own if_none_match through the cache: %+v, %d bytes, %v", rep, len(img), err)
	}

	if err := a.Type(ctx, "echo changed\n"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Step(ctx, nil, &api.ACIObserve{Cursor: true, SettleMs: 200}); err != nil {
		t.Fatal(err)
	}
	hb2, ib2, wb2 := shot(b)
	ha2, ia2, wa2 := shot(a)
	if hb2 == ha || ha2 != hb2 || !bytes.Equal(ia2, ib2) {
		t.Errorf("after typing: frames %s and %s (before %s)", hb2, ha2, ha)
	}
	if wb2 < int64(len(ib2)) || wa2 > 1024 {
		t.Errorf("after typing: %d wire bytes for the fetch of %d, %d for the shared one", wb2, len(ib2), wa2)
	}
	if st := fc.Stats(); st.Fetched != 2 || st.Shared != 2 || st.Frames != 2 {
		t.Errorf("stats %+v: want 2 fetched, 2 shared, 2 held", st)
	}
}
