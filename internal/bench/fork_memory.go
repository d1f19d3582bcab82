package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// MemoryForkTargets are the bars for the memory tier of a desktop
// (the code sandbox is held to them too).
var MemoryForkTargets = struct {
	ForkP50Ms, FanOut16Ms, PauseMs float64
}{300, 3000, 300}

// holderProgram is a memory-tier golden process: setup (Python lines)
// builds its state, only in its heap, and digest (an expression) sums it
// up with a nonce; on SIGUSR1 it writes its nonce and digest to
// /tmp/state, which a replica's answer must match. No single quotes: it
// is passed to sh in them.
func holderProgram(setup, digest string) string {
	return `
import hashlib, os, random, signal, time
` + setup + `
nonce = "%016x" % random.getrandbits(64)
digest = ` + digest + `
def report(sig, frame):
    with open("/tmp/state.new", "w") as f:
        f.write(nonce + " " + digest)
    os.rename("/tmp/state.new", "/tmp/state")
signal.signal(signal.SIGUSR1, report)
open("/tmp/ready", "w").close()
while True:
    time.sleep(0.01)
`
}

// memoryHolder holds ~50 MiB of random bytes.
var memoryHolder = holderProgram("state = bytearray(random.randbytes(50 << 20))", "hashlib.sha256(state).hexdigest()[:16]")

// startHolder starts program (holderProgram) in sandbox id, in the
// background, and returns its pid once it is ready.
func startHolder(ctx context.Context, c *client.Client, id, program string) (string, error) {
	return execOut(ctx, c, id, "cd /tmp && python3 -c '"+program+"' </dev/null >/dev/null 2>&1 & echo $!; while [ ! -e /tmp/ready ]; do sleep 0.01; done")
}

// askHolder has the holder (pid) in sandbox id report, and returns what
// it wrote.
func askHolder(ctx context.Context, c *client.Client, id string, pid string) (string, error) {
	return execOut(ctx, c, id, `rm -f /tmp/state; kill -USR1 `+pid+` || exit 3; i=0
while [ ! -s /tmp/state ] && [ $i -lt 4000 ]; do sleep 0.002; i=$((i+1)); done; cat /tmp/state`)
}

// forkMemory measures the memory tier of a code sandbox: the golden holds
// a 50 MiB process and the workspace; a replica is usable when its
// restored process answers with the golden's nonce and digest (and, once
// timed, the workspace is verified in full).
func forkMemory(ctx context.Context, c *client.Client, r *SeriesReport, n int, workspace string) error {
	limits := api.Limits{MemoryBytes: 512 << 20, Pids: 256}
	golden, err := c.Create(ctx, &api.SandboxSpec{Limits: limits})
	if err != nil {
		return err
	}
	defer c.Delete(ctx, golden.ID)
	if _, err := execOut(ctx, c, golden.ID, forkWorkspace); err != nil {
		return fmt.Errorf("build the golden's workspace: %w", err)
	}
	pid, err := startHolder(ctx, c, golden.ID, memoryHolder)
	if err != nil {
		return fmt.Errorf("start the golden's process: %w", err)
	}
	want, err := askHolder(ctx, c, golden.ID, pid)
	if err != nil {
		return fmt.Errorf("the golden's process: %w", err)
	}

	var snaps, pauses []sample
	var sid string
	for range n {
		t0 := time.Now()
		sn, err := c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
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
		return fmt.Errorf("no memory snapshot of the golden: %w", snaps[0].err)
	}
	defer c.DeleteSnapshot(ctx, sid)
	pause := summarize("memory snapshot: golden paused (frozen + stopped by criu)", pauses)
	r.Series = append(r.Series, summarize("memory snapshot (50 MiB process + 20 MiB workspace), wall", snaps), pause)

	usable := func(id string) error {
		got, err := askHolder(ctx, c, id, pid)
		if err == nil && got != want {
			err = fmt.Errorf("replica %s: its process answers %q, the golden's %q", id, got, want)
		}
		return err
	}
	var forks []sample
	for range n {
		t0 := time.Now()
		res, err := c.Fork(ctx, sid, nil)
		var id string
		if err == nil {
			id = res.Sandboxes[0].ID
			err = usable(id)
		}
		lat := time.Since(t0)
		if err == nil {
			err = verifyReplica(ctx, c, id, workspace)
		}
		forks = append(forks, sample{latency: lat, err: err})
		if id != "" {
			c.Delete(ctx, id)
		}
	}
	fork := summarize("memory fork → usable (restored process answers, workspace verified after)", forks)
	r.Series = append(r.Series, fork)

	small := api.Limits{MemoryBytes: 256 << 20, Pids: 128}
	var wall16 time.Duration
	for _, k := range []int{1, 4, 8, 16, 32} {
		t0 := time.Now()
		res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: k, Limits: &small})
		if err == nil {
			err = eachReplica(res.Sandboxes, usable)
		}
		wall := time.Since(t0)
		if err == nil {
			err = verifyAll(ctx, c, res.Sandboxes, workspace)
		}
		if res != nil {
			for _, sb := range res.Sandboxes {
				c.Delete(ctx, sb.ID)
			}
		}
		if err != nil {
			r.Series = append(r.Series, Series{Name: fmt.Sprintf("memory fan-out N=%d", k), Errors: 1, FirstError: err.Error()})
			continue
		}
		if k == 16 {
			wall16 = wall
		}
		r.Figures[fmt.Sprintf("memory fan-out N=%d: wall ms, ms per replica (every process answered)", k)] = fmt.Sprintf("%.1f, %.1f", float64(wall.Microseconds())/1000, float64(wall.Microseconds())/1000/float64(k))
	}

	res, err := c.Fork(ctx, sid, &api.ForkRequest{Count: 8, Limits: &small})
	if err != nil {
		return fmt.Errorf("fork 8 memory replicas for their memory: %w", err)
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
	r.Figures["PSS per added memory replica (KiB, least-squares slope over 1..8; each holds its own 50 MiB)"] = fmt.Sprintf("%.0f", slopeOf(sums)/1024)

	r.Checks = append(r.Checks,
		check("memory fork → usable p50 ms, code sandbox (at most)", float64(fork.Latency.P50Ns)/1e6, MemoryForkTargets.ForkP50Ms, true),
		check("memory snapshot pause p50 ms, code sandbox (at most)", float64(pause.Latency.P50Ns)/1e6, MemoryForkTargets.PauseMs, true))
	if wall16 > 0 {
		r.Checks = append(r.Checks, check("memory fan-out N=16 wall ms, all answered (at most)", float64(wall16.Microseconds())/1000, MemoryForkTargets.FanOut16Ms, true))
	}
	return nil
}

// eachReplica runs fn on every replica at once and returns the first error.
func eachReplica(sbs []api.Sandbox, fn func(id string) error) error {
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Go(func() { errs[i] = fn(sb.ID) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
