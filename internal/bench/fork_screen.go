package bench

import (
	"context"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/desktop/frame"
	"github.com/tine-run/tine/internal/desktop/x11"
)

// screenGolden starts an X server (without System V shared memory, which
// the memory tier cannot carry: ADR 0013) and an xterm with content, from
// one shell, in a plain sandbox.
const screenGolden = `cd /tmp && (Xvfb :5 -nolisten tcp -screen 0 1280x800x24 &
while [ ! -S /tmp/.X11-unix/X5 ]; do sleep 0.01; done
DISPLAY=:5 xterm -title tinebench -geometry 100x30+20+20 -e sh -c "ls -l /usr/bin | head -40; exec cat" & wait) </dev/null >/dev/null 2>&1 &
i=0; until DISPLAY=:5 xwininfo -root -tree 2>/dev/null | grep -q tinebench; do sleep 0.01; i=$((i+1)); [ $i -lt 3000 ] || exit 1; done; sleep 0.5`

// screenHash captures the screen of display :5 in the sandbox whose PID 1
// is pid1, through its socket file, and returns its frame hash.
func screenHash(pid1 int) (frame.Hash, error) {
	dir, err := os.MkdirTemp("", "tine-bench-x")
	if err != nil {
		return frame.Hash{}, err
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "x:5") // xgb dials "<path>:5" for display "<path>:5"
	if err := os.Symlink(fmt.Sprintf("/proc/%d/root/tmp/.X11-unix/X5", pid1), link); err != nil {
		return frame.Hash{}, err
	}
	d, err := x11.Connect(link, x11.Options{NoSHM: true})
	if err != nil {
		return frame.Hash{}, err
	}
	defer d.Close()
	w, h := d.Size()
	f, err := d.Capture(image.Rect(0, 0, w, h), false)
	if err != nil {
		return frame.Hash{}, err
	}
	return f.Hash(), nil
}

// forkScreen measures the memory tier of an X server with an xterm: the
// golden's pause, fork → usable (the replica's restored X server answers a
// capture) with every first frame checked against the golden's, and a
// fan-out of 16 with every screen identical.
func forkScreen(ctx context.Context, c *client.Client, r *SeriesReport, n int) error {
	golden, err := c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 1 << 30, Pids: 256}})
	if err != nil {
		return err
	}
	defer c.Delete(ctx, golden.ID)
	if _, err := execOut(ctx, c, golden.ID, screenGolden); err != nil {
		return fmt.Errorf("start the golden's X server and xterm: %w", err)
	}
	want, err := screenHash(golden.Pid)
	if err != nil {
		return fmt.Errorf("the golden's screen: %w", err)
	}
	var pauses []sample
	var sid string
	for range n {
		sn, err := c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
		if err != nil {
			return fmt.Errorf("memory snapshot of an X server: %w", err)
		}
		pauses = append(pauses, sample{latency: time.Duration(sn.PausedMs * 1e6)})
		if sid != "" {
			c.DeleteSnapshot(ctx, sid)
		}
		sid = sn.ID
	}
	defer c.DeleteSnapshot(ctx, sid)
	if again, err := screenHash(golden.Pid); err != nil || again != want {
		return fmt.Errorf("the golden's screen moved while it was snapshotted (%v): pixel identity cannot be checked", err)
	}
	pause := summarize("X server + xterm memory snapshot: golden paused", pauses)
	r.Series = append(r.Series, pause)

	identical, forked := 0, 0
	usable := func(sb api.Sandbox) error {
		got, err := screenHash(sb.Pid)
		if err != nil {
			return err
		}
		forked++
		if got == want {
			identical++
			return nil
		}
		return fmt.Errorf("replica %s: first frame %s, the golden's %s", sb.ID, got, want)
	}
	var forks []sample
	for range n {
		t0 := time.Now()
		res, err := c.Fork(ctx, sid, nil)
		if err == nil {
			err = usable(res.Sandboxes[0])
		}
		forks = append(forks, sample{latency: time.Since(t0), err: err})
		if res != nil {
			c.Delete(ctx, res.Sandboxes[0].ID)
		}
	}
	fork := summarize("X server + xterm memory fork → usable (first frame captured)", forks)
	r.Series = append(r.Series, fork)

	t0 := time.Now()
	res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: 16})
	var wall time.Duration
	if err == nil {
		for _, sb := range res.Sandboxes {
			if err = usable(sb); err != nil {
				break
			}
		}
		wall = time.Since(t0)
		for _, sb := range res.Sandboxes {
			c.Delete(ctx, sb.ID)
		}
	}
	if err != nil {
		r.Series = append(r.Series, Series{Name: "X server memory fan-out N=16", Errors: 1, FirstError: err.Error()})
	} else {
		r.Figures["X server + xterm memory fan-out N=16: wall ms (every first frame the golden's)"] = fmt.Sprintf("%.1f", float64(wall.Microseconds())/1000)
		r.Checks = append(r.Checks, check("X server memory fan-out N=16 wall ms (at most)", float64(wall.Microseconds())/1000, MemoryForkTargets.FanOut16Ms, true))
	}
	r.Figures["X server + xterm replicas whose first frame is the golden's"] = fmt.Sprintf("%d of %d", identical, forked)
	r.Checks = append(r.Checks,
		check("X server memory fork → usable p50 ms (at most)", float64(fork.Latency.P50Ns)/1e6, MemoryForkTargets.ForkP50Ms, true),
		check("X server memory snapshot pause p50 ms (at most)", float64(pause.Latency.P50Ns)/1e6, MemoryForkTargets.PauseMs, true),
		check("X server replicas with the golden's first frame (share, at least)", float64(identical)/float64(max(forked, 1)), 1, false))
	return nil
}
