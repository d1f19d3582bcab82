package api_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
)

// TestFleetFrameDedup: the replicas of a desktop's memory snapshot show
// the golden's screen, and a fleet sharing one frame cache fetches it
// once: the other replicas' guests answer not_modified (a hash, a few
// hundred bytes) and their images come from the cache. Once one replica's
// screen changes, only its frame comes over the wire again.
func TestFleetFrameDedup(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "xterm")
	d := startDaemon(t, "--pool", "0")
	ctx := context.Background()
	golden, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480, Apps: [][]string{{"xterm"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteDesktop(ctx, golden.ID)
	a, err := d.c.DialACI(ctx, golden.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Type(ctx, "ls -l /usr/bin | head -20; touch /tmp/typed\n"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	sh(t, d.c, golden.ID, "i=0; while [ ! -e /tmp/typed ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e /tmp/typed")
	want := frameHash(t, d.c, golden.ID)
	sn, err := d.c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteSnapshot(ctx, sn.ID)

	// Negative control: a session without the cache gets the whole image
	// over the wire, so a shared one's few bytes below are the cache's doing.
	plain, err := d.c.DialACI(ctx, golden.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := plain.Received()
	_, full, err := plain.Screenshot(ctx, &api.ACIScreenshot{})
	plain.Close()
	if err != nil || plain.Received()-before < int64(len(full)) || len(full) < 4096 {
		t.Fatalf("control: a plain screenshot of %d bytes brought %d bytes (%v)", len(full), plain.Received()-before, err)
	}

	const n = 3
	cache := client.NewFrameCache(0)
	type seen struct {
		hash      string
		img       []byte
		wireBytes int64
	}
	var (
		mu                   sync.Mutex
		first, second        [n]seen
		observed, typed      sync.WaitGroup
		statsFirst, statsEnd client.FrameCacheStats
	)
	observed.Add(n)
	typed.Add(1)
	errs := d.c.ForkEachDesktop(ctx, sn.ID, n, n, nil, cache, func(ctx context.Context, r api.Sandbox, a *client.ACI, i int) error {
		// Round 1, all at once: one fetch for the three.
		rx := a.Received()
		rep, img, err := a.Screenshot(ctx, &api.ACIScreenshot{})
		if err != nil {
			observed.Done()
			return err
		}
		mu.Lock()
		first[i] = seen{rep.FrameHash, img, a.Received() - rx}
		mu.Unlock()
		observed.Done()
		observed.Wait()
		if i == 0 {
			statsFirst = cache.Stats()
			err := a.Type(ctx, "echo only-here; touch /tmp/typed-here\n")
			if err == nil {
				var res *api.ExecResult
				res, err = d.c.Exec(ctx, r.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "i=0; while [ ! -e /tmp/typed-here ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e /tmp/typed-here"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("the xterm did not run what was typed (exit %d)", res.ExitCode)
				}
			}
			typed.Done()
			if err != nil {
				return fmt.Errorf("type into replica 0: %w", err)
			}
		}
		typed.Wait()
		// Round 2, through a step that waits for the screen to settle.
		rx = a.Received()
		rep, img, err = a.Step(ctx, nil, &api.ACIObserve{Screenshot: &api.ACIScreenshot{}, SettleMs: 200})
		if err != nil {
			return err
		}
		mu.Lock()
		second[i] = seen{rep.FrameHash, img, a.Received() - rx}
		mu.Unlock()
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	statsEnd = cache.Stats()
	if left, err := d.c.Desktops(ctx); err != nil || len(left) != 1 {
		t.Errorf("after the fleet: %d desktops (%v), want the golden alone", len(left), err)
	}

	for i, s := range first {
		if s.hash != want || !bytes.Equal(s.img, first[0].img) || len(s.img) < 4096 {
			t.Errorf("round 1, replica %d: frame %s (%d bytes), want the golden's %s and the same image as replica 0", i, s.hash, len(s.img), want)
		}
	}
	if statsFirst.Fetched != 1 || statsFirst.Shared != n-1 {
		t.Errorf("round 1: %+v, want 1 image fetched and %d shared", statsFirst, n-1)
	}
	fetchers := 0
	for i, s := range first {
		if s.wireBytes >= int64(len(s.img)) {
			fetchers++
		} else if s.wireBytes > 1024 {
			t.Errorf("round 1, replica %d: %d bytes on the wire for a shared frame, want a not_modified of a few hundred", i, s.wireBytes)
		}
	}
	if fetchers != 1 {
		t.Errorf("round 1: %d replicas brought the image over the wire, want 1", fetchers)
	}

	if second[0].hash == want {
		t.Fatalf("typing into replica 0 did not change its screen: the rest proves nothing")
	}
	if second[0].wireBytes < int64(len(second[0].img)) || len(second[0].img) < 4096 {
		t.Errorf("round 2: the changed replica's %d-byte frame came with %d bytes on the wire: not fetched", len(second[0].img), second[0].wireBytes)
	}
	for i := 1; i < n; i++ {
		s := second[i]
		if s.hash != want || !bytes.Equal(s.img, first[0].img) || s.wireBytes > 1024 {
			t.Errorf("round 2, replica %d: frame %s, %d image bytes, %d on the wire; want the golden's frame from the cache", i, s.hash, len(s.img), s.wireBytes)
		}
	}
	if statsEnd.Fetched != 2 || statsEnd.Shared != 2*(n-1) {
		t.Errorf("after round 2: %+v, want 2 images fetched (the golden's, replica 0's new one) and %d shared", statsEnd, 2*(n-1))
	}
}
