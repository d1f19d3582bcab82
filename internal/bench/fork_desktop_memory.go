package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// firstFrame is a desktop's screenshot frame hash once two captures in a
// row agree (the screen has settled).
func firstFrame(ctx context.Context, c *client.Client, id string) (string, error) {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return "", err
	}
	defer a.Close()
	var last string
	for range 100 {
		rep, _, err := a.Screenshot(ctx, &api.ACIScreenshot{})
		if err != nil {
			return "", err
		}
		if rep.FrameHash == last {
			return last, nil
		}
		last = rep.FrameHash
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("desktop %s: the screen never held still", id)
}

// sameScreen is whether desktop id's first screenshot has frame hash want:
// asked with if_none_match, so an identical screen costs no encoding.
func sameScreen(ctx context.Context, c *client.Client, id, want string) error {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return err
	}
	defer a.Close()
	rep, _, err := a.Screenshot(ctx, &api.ACIScreenshot{IfNoneMatch: want})
	if err != nil {
		return err
	}
	if !rep.NotModified {
		return fmt.Errorf("desktop %s: first frame %s, the golden's %s", id, rep.FrameHash, want)
	}
	return nil
}

// forkDesktopMemory measures the memory tier of a desktop (an xterm with a
// directory listing): the golden's pause,
// fork → usable (the restored guest answers its ACI with the golden's
// frame), and a fan-out of 16 with every replica's screen and marker file
// checked.
func forkDesktopMemory(ctx context.Context, c *client.Client, r *SeriesReport, n int) error {
	golden, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
	if err != nil {
		return fmt.Errorf("create the golden desktop: %w", err)
	}
	defer c.DeleteDesktop(ctx, golden.ID)
	if _, err := execOut(ctx, c, golden.ID, "echo desktop-memory > /etc/tine-bench-marker"); err != nil {
		return err
	}
	if err := typeListing(ctx, c, golden.ID); err != nil {
		return err
	}
	want, err := firstFrame(ctx, c, golden.ID)
	if err != nil {
		return err
	}
	var pauses []sample
	var sid string
	for range n {
		sn, err := c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
		if err != nil {
			return fmt.Errorf("memory snapshot of the desktop: %w", err)
		}
		pauses = append(pauses, sample{latency: time.Duration(sn.PausedMs * 1e6)})
		if sid != "" {
			c.DeleteSnapshot(ctx, sid)
		}
		sid = sn.ID
	}
	defer c.DeleteSnapshot(ctx, sid)
	if err := sameScreen(ctx, c, golden.ID, want); err != nil {
		return fmt.Errorf("the golden's screen moved while it was snapshotted: pixel identity cannot be checked: %w", err)
	}
	pause := summarize("desktop memory snapshot: golden paused", pauses)
	r.Series = append(r.Series, pause)

	identical, forked := 0, 0
	verify := func(id string) error {
		forked++
		if err := sameScreen(ctx, c, id, want); err != nil {
			return err
		}
		identical++
		got, err := execOut(ctx, c, id, "cat /etc/tine-bench-marker")
		if err == nil && got != "desktop-memory" {
			err = fmt.Errorf("desktop replica %s: marker %q", id, got)
		}
		return err
	}
	var forks []sample
	for range n {
		t0 := time.Now()
		res, err := c.Fork(ctx, sid, nil)
		var id string
		if err == nil {
			id = res.Desktops[0].ID
			err = sameScreen(ctx, c, id, want)
		}
		lat := time.Since(t0)
		if err == nil {
			forked++
			identical++
		}
		forks = append(forks, sample{latency: lat, err: err})
		if id != "" {
			c.DeleteDesktop(ctx, id)
		}
	}
	fork := summarize("desktop memory fork → usable (ACI answers with the golden's frame)", forks)
	r.Series = append(r.Series, fork)

	t0 := time.Now()
	res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: 16})
	var wall time.Duration
	if err == nil {
		ids := make([]api.Sandbox, len(res.Desktops))
		for i, dt := range res.Desktops {
			ids[i] = dt.Sandbox
		}
		err = eachReplica(ids, verify)
		wall = time.Since(t0)
		for _, dt := range res.Desktops {
			c.DeleteDesktop(ctx, dt.ID)
		}
	}
	if err != nil {
		r.Series = append(r.Series, Series{Name: "desktop memory fan-out N=16", Errors: 1, FirstError: err.Error()})
	} else {
		r.Figures["desktop memory fan-out N=16: wall ms (every replica's frame the golden's, marker read)"] = fmt.Sprintf("%.1f", float64(wall.Microseconds())/1000)
		r.Checks = append(r.Checks, check("desktop memory fan-out N=16 wall ms, all verified (at most)", float64(wall.Microseconds())/1000, MemoryForkTargets.FanOut16Ms, true))
	}
	r.Figures["desktop memory replicas whose first frame is the golden's"] = fmt.Sprintf("%d of %d", identical, forked)
	r.Checks = append(r.Checks,
		check("desktop memory fork → usable p50 ms (at most)", float64(fork.Latency.P50Ns)/1e6, MemoryForkTargets.ForkP50Ms, true),
		check("desktop memory snapshot pause p50 ms (at most)", float64(pause.Latency.P50Ns)/1e6, MemoryForkTargets.PauseMs, true),
		check("desktop memory replicas with the golden's first frame (share, at least)", float64(identical)/float64(max(forked, 1)), 1, false))
	return nil
}

// typeListing types a directory listing into the xterm of desktop id and
// waits until the shell got past it, so the listing is on the screen.
func typeListing(ctx context.Context, c *client.Client, id string) error {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return err
	}
	err = a.Type(ctx, "ls -l /usr/bin | head -40; touch /tmp/listed\n")
	a.Close()
	if err != nil {
		return err
	}
	if _, err := execOut(ctx, c, id, "i=0; while [ ! -e /tmp/listed ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e /tmp/listed"); err != nil {
		return fmt.Errorf("the golden's xterm did not run what was typed: %w", err)
	}
	return nil
}
