package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// ForkTargets are the bars for snapshots and forks that the file
// tier can be held to on this 2-core machine; MemoryForkTargets the memory
// tier's.
var ForkTargets = struct{ FSForkOverCreate float64 }{2}

// forkWorkspace is the golden's state: a workspace of 400 files of 8 KiB
// to 256 KiB (about 20 MiB, like a checked-out and built repository) and
// a marker; replicas prove they have it by its digest.
const forkWorkspace = `set -e
mkdir -p /work && cd /work
python3 - <<'PY'
import hashlib, os, random
r = random.Random(7)
h = hashlib.sha256()
for i in range(400):
    b = r.randbytes(r.choice([8, 32, 64, 256]) << 10)
    d = "pkg%02d" % (i % 20)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%03d.bin" % (d, i), "wb") as f:
        f.write(b)
    h.update(b)
open("marker", "w").write(h.hexdigest())
PY
cat marker`

// forkVerify prints the workspace's digest, recomputed from its files.
const forkVerify = `cd /work && python3 -c '
import hashlib, glob
h = hashlib.sha256()
for i in range(400):
    h.update(open(glob.glob("pkg*/f%03d.bin" % i)[0], "rb").read())
print(h.hexdigest())'`

// Fork measures the file tier: snapshot time and the golden's pause;
// fork → usable (the replica answers with the workspace's digest) next to
// a fresh sandbox's create→ready and to the alternative, a fresh sandbox
// replaying the golden's steps; fan-out of N replicas, each verified;
// memory per added replica; a desktop's fork → usable next to a fresh
// desktop's create→ready; and the fleet frame cache's bytes per
// observe-all round of 16 forked desktops (opts.FleetOnly: only that).
func Fork(ctx context.Context, d *Daemon, opts WarmOptions) (*SeriesReport, error) {
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("fork", g)
	c := d.Client
	n := max(opts.Requests/150, 10)
	if opts.FleetOnly {
		if err := forkFleetDedup(ctx, c, r, max(n/2, 3)); err != nil {
			return nil, fmt.Errorf("fleet dedup: %w", err)
		}
		r.finish(g, before, false)
		return r, nil
	}
	limits := api.Limits{MemoryBytes: 512 << 20, Pids: 256}

	golden, err := c.Create(ctx, &api.SandboxSpec{Limits: limits})
	if err != nil {
		return nil, err
	}
	defer c.Delete(ctx, golden.ID)
	want, err := execOut(ctx, c, golden.ID, forkWorkspace)
	if err != nil {
		return nil, fmt.Errorf("build the golden's workspace: %w", err)
	}
	// A process holding 50 MiB of state: the file tier does not carry it,
	// but the golden is frozen with it.
	go c.Exec(ctx, golden.ID, &api.ExecRequest{Argv: []string{"python3", "-c", "import time; x = bytearray(50 << 20); time.sleep(3600)"}})

	var snaps, pauses []sample
	var sid string
	for range n {
		t0 := time.Now()
		sn, err := c.Snapshot(ctx, golden.ID, nil)
		snaps = append(snaps, sample{latency: time.Since(t0), err: err})
		if err == nil {
			pauses = append(pauses, sample{latency: time.Duration(sn.PausedMs * 1e6)})
			if sid != "" {
				c.DeleteSnapshot(ctx, sid)
			}
			sid = sn.ID
		}
	}
	if sid == "" {
		return nil, fmt.Errorf("no snapshot of the golden: %v", snaps[0].err)
	}
	defer c.DeleteSnapshot(ctx, sid)
	r.Series = append(r.Series, summarize("fs snapshot (20 MiB workspace), wall", snaps), summarize("fs snapshot: golden frozen", pauses))

	// fork → usable, fresh create→ready and replay, interleaved.
	// Usable means an exec answers with the workspace's marker; every
	// replica's files are then checked in full, untimed.
	variants := []struct {
		name   string
		run    func() (string, error)
		verify bool
	}{
		{"fresh sandbox create→ready", func() (string, error) {
			sb, err := c.Create(ctx, &api.SandboxSpec{Limits: limits})
			if err != nil {
				return "", err
			}
			return sb.ID, nil
		}, false},
		{"fs fork → usable (marker read)", func() (string, error) {
			res, err := c.Fork(ctx, sid, nil)
			if err != nil {
				return "", err
			}
			id := res.Sandboxes[0].ID
			got, err := execOut(ctx, c, id, "cat /work/marker")
			if err == nil && got != want {
				err = fmt.Errorf("replica %s: marker %q, want %q", id, got, want)
			}
			return id, err
		}, true},
		{"fresh sandbox + replaying the steps", func() (string, error) {
			sb, err := c.Create(ctx, &api.SandboxSpec{Limits: limits})
			if err != nil {
				return "", err
			}
			got, err := execOut(ctx, c, sb.ID, forkWorkspace)
			if err == nil && got != want {
				err = fmt.Errorf("replayed workspace digest %q, want %q", got, want)
			}
			return sb.ID, err
		}, false},
	}
	samples := make([][]sample, len(variants))
	for i := range n {
		for k := range variants {
			v := (i + k) % len(variants) // rotate the order each round
			t0 := time.Now()
			id, err := variants[v].run()
			lat := time.Since(t0)
			if err == nil && variants[v].verify {
				err = verifyReplica(ctx, c, id, want)
			}
			samples[v] = append(samples[v], sample{latency: lat, err: err})
			if id != "" {
				c.Delete(ctx, id)
			}
		}
	}
	var fresh, fork Series
	for v := range variants {
		s := summarize(variants[v].name, samples[v])
		r.Series = append(r.Series, s)
		switch v {
		case 0:
			fresh = s
		case 1:
			fork = s
		}
	}
	r.Figures["fs fork → usable p50 / fresh create→ready p50"] = fmt.Sprintf("%.2f", ratioOf(fork.Latency.P50Ns, fresh.Latency.P50Ns))

	// Fan-out: N replicas at once, each verified.
	small := api.Limits{MemoryBytes: 256 << 20, Pids: 128}
	for _, k := range []int{1, 4, 8, 16, 32} {
		t0 := time.Now()
		res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: k, Limits: &small})
		if err == nil {
			err = verifyAll(ctx, c, res.Sandboxes, want)
		}
		wall := time.Since(t0)
		if res != nil {
			for _, sb := range res.Sandboxes {
				c.Delete(ctx, sb.ID)
			}
		}
		if err != nil {
			r.Series = append(r.Series, Series{Name: fmt.Sprintf("fan-out N=%d", k), Errors: 1, FirstError: err.Error()})
			continue
		}
		r.Figures[fmt.Sprintf("fan-out N=%d: wall ms, ms per replica (all verified)", k)] = fmt.Sprintf("%.1f, %.1f", float64(wall.Microseconds())/1000, float64(wall.Microseconds())/1000/float64(k))
	}

	// Memory per added replica: PSS of every replica's processes.
	res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: 8, Limits: &small})
	if err != nil {
		return nil, fmt.Errorf("fork 8 replicas for their memory: %w", err)
	}
	var sums []int64
	for i := range res.Sandboxes {
		var sum int64
		for _, sb := range res.Sandboxes[:i+1] {
			sum += treePSS(sb.Pid)
		}
		sums = append(sums, sum)
	}
	for _, sb := range res.Sandboxes {
		c.Delete(ctx, sb.ID)
	}
	r.Figures["PSS per added idle fs replica (KiB, least-squares slope over 1..8)"] = fmt.Sprintf("%.0f", slopeOf(sums)/1024)

	if err := forkMemory(ctx, c, r, n, want); err != nil {
		r.Series = append(r.Series, Series{Name: "memory tier (code sandbox)", Errors: 1, FirstError: err.Error()})
	}

	// A desktop: fork → usable (ACI answers, a window, a screenshot)
	// against a fresh desktop's create→ready.
	desk, err := c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}})
	if err != nil {
		return nil, fmt.Errorf("create the golden desktop: %w", err)
	}
	defer c.DeleteDesktop(ctx, desk.ID)
	if _, err := execOut(ctx, c, desk.ID, "echo desktop-state > /etc/tine-bench-marker; cat /etc/tine-bench-marker"); err != nil {
		return nil, err
	}
	dsn, err := c.Snapshot(ctx, desk.ID, nil)
	if err != nil {
		return nil, fmt.Errorf("snapshot the golden desktop: %w", err)
	}
	defer c.DeleteSnapshot(ctx, dsn.ID)
	var freshDesk, forkDesk []sample
	for i := range max(n/2, 5) {
		for k := range 2 {
			t0 := time.Now()
			var id string
			var err error
			if (i+k)%2 == 0 {
				var dt *api.Desktop
				if dt, err = c.CreateDesktop(ctx, &api.DesktopSpec{Apps: [][]string{{"xterm"}}}); err == nil {
					id = dt.ID
					err = desktopUsable(ctx, c, id)
				}
				freshDesk = append(freshDesk, sample{latency: time.Since(t0), err: err})
			} else {
				var res *api.ForkResult
				if res, err = c.Fork(ctx, dsn.ID, nil); err == nil {
					id = res.Desktops[0].ID
					if err = desktopUsable(ctx, c, id); err == nil {
						var got string
						if got, err = execOut(ctx, c, id, "cat /etc/tine-bench-marker"); err == nil && got != "desktop-state" {
							err = fmt.Errorf("desktop replica's marker %q", got)
						}
					}
				}
				forkDesk = append(forkDesk, sample{latency: time.Since(t0), err: err})
			}
			if id != "" {
				c.DeleteDesktop(ctx, id)
			}
		}
	}
	r.Series = append(r.Series, summarize("fresh desktop create→usable (xterm, screenshot)", freshDesk), summarize("desktop fs fork → usable (xterm, screenshot, marker)", forkDesk))
	if err := forkDesktopMemory(ctx, c, r, max(n/2, 5)); err != nil {
		r.Series = append(r.Series, Series{Name: "memory tier (desktop)", Errors: 1, FirstError: err.Error()})
	}

	if err := forkFleetDedup(ctx, c, r, max(n/2, 3)); err != nil {
		r.Series = append(r.Series, Series{Name: "fleet frame dedup (N=16 desktops)", Errors: 1, FirstError: err.Error()})
	}

	r.Checks = append(r.Checks, check("fs fork → usable p50 / fresh create→ready p50 (at most)", ratioOf(fork.Latency.P50Ns, fresh.Latency.P50Ns), ForkTargets.FSForkOverCreate, true))
	// Its fan-outs (32 replicas at once) and their teardown load the host
	// to the end: judged at the start, and by throttling and steal.
	r.finish(g, before, true)
	return r, nil
}

func execOut(ctx context.Context, c *client.Client, id, script string) (string, error) {
	res, err := c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, TimeoutMs: 120000})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

func verifyReplica(ctx context.Context, c *client.Client, id, want string) error {
	got, err := execOut(ctx, c, id, forkVerify)
	if err == nil && got != want {
		err = fmt.Errorf("replica %s: workspace digest %q, want %q", id, got, want)
	}
	return err
}

func verifyAll(ctx context.Context, c *client.Client, sbs []api.Sandbox, want string) error {
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Go(func() { errs[i] = verifyReplica(ctx, c, sb.ID, want) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// desktopUsable: the desktop's ACI answers with a window and a screenshot.
func desktopUsable(ctx context.Context, c *client.Client, id string) error {
	a, err := c.DialACI(ctx, id)
	if err != nil {
		return err
	}
	defer a.Close()
	wins, err := a.Windows(ctx)
	if err != nil {
		return err
	}
	if len(wins) == 0 {
		return fmt.Errorf("desktop %s has no window", id)
	}
	_, img, err := a.Screenshot(ctx, &api.ACIScreenshot{Format: "png"})
	if err == nil && len(img) == 0 {
		err = fmt.Errorf("desktop %s: empty screenshot", id)
	}
	return err
}

// slopeOf is the least-squares slope of sums[i] over i+1 (NaN for fewer
// than two).
func slopeOf(sums []int64) float64 {
	xs, ys := make([]float64, len(sums)), make([]float64, len(sums))
	for i, s := range sums {
		xs[i], ys[i] = float64(i+1), float64(s)
	}
	fit, err := FitLine(xs, ys)
	if err != nil {
		return math.NaN()
	}
	return fit.Slope
}
