package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/session"
)

// SessionTarget is the bar for a cell's round trip.
var SessionTarget = Target{Variant: "session cell (JSON)", MaxRatio: 2, Text: "cell round trip of 1 + 1 p50 at most 2x the same-run exec floor (exec of /bin/true through the daemon)"}

// LiveForkTarget is the bar for the live fork against replaying:
// at least 20x faster (its other bar, 10 ms to the first answered cell,
// is read off the table).
var LiveForkTarget = Target{Variant: "live fork ×1", MaxRatio: 0.05, Text: "live fork → first answered cell p50 at least 20x faster than a new sandbox + session + replay"}

// LiveForkMemoryTarget is the bar for the live fork against the
// memory-tier fork of the whole sandbox, measured in the same run.
var LiveForkMemoryTarget = Target{Variant: "live fork ×1", Reference: memoryTierName, MaxRatio: 0.1, Text: "live fork → first answered cell p50 at least 10x faster than the memory-tier fork of a sandbox whose python3 holds the same state"}

const memoryTierName = "memory-tier fork (snapshot + fork + answer)"

// sessionState is what the state-carrying variants start from: the 16
// imports of the warm suites and 50 MiB of data, touched.
var sessionState = []string{
	"import " + strings.Join(WarmImports, ", "),
	"data = bytes(range(256)) * (50 << 12)",
	"marker = hashlib.sha256(data).hexdigest()[:16]",
}

// sessionProbe is the first cell a session holding sessionState answers.
const sessionProbe = "len(data) >> 20, marker"

// LiveForkCounts are the fork sizes measured: fork → first cell answered
// in the first child.
var LiveForkCounts = []int{1, 8, 32}

// memoryTierVariant is the memory-tier fork of a sandbox whose python3,
// started by an exec (a session's socket to the daemon cannot be dumped),
// holds sessionState: a memory snapshot, a fork of it, until the restored
// process answers with the golden's nonce and digest (timed whole, as the
// live fork's time holds its file-tier snapshot). Unavailable when the
// memory tier is (no criu, not root): the first snapshot says why.
func memoryTierVariant(ctx context.Context, c *client.Client) (Variant, func()) {
	v := Variant{Name: memoryTierName}
	golden, err := c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20, Pids: 256}})
	if err != nil {
		v.Unavailable = "not available: create its golden: " + err.Error()
		return v, func() {}
	}
	cleanup := func() { c.Delete(context.Background(), golden.ID) }
	program := holderProgram(strings.Join(sessionState, "\n"), "marker")
	pid, err := startHolder(ctx, c, golden.ID, program)
	var want string
	if err == nil {
		want, err = askHolder(ctx, c, golden.ID, pid)
	}
	if err == nil {
		var sn *api.Snapshot
		if sn, err = c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory}); err == nil {
			c.DeleteSnapshot(ctx, sn.ID)
		}
	}
	if err != nil {
		v.Unavailable = "not available: " + err.Error()
		return v, cleanup
	}
	var snap, replica string
	v.Func = func(ctx context.Context) error {
		sn, err := c.Snapshot(ctx, golden.ID, &api.SnapshotRequest{Tier: api.TierMemory})
		if err != nil {
			return err
		}
		snap = sn.ID
		res, err := c.Fork(ctx, sn.ID, nil)
		if err != nil {
			return err
		}
		replica = res.Sandboxes[0].ID
		got, err := askHolder(ctx, c, replica, pid)
		if err == nil && got != want {
			err = fmt.Errorf("the replica's process answers %q, the golden's %q", got, want)
		}
		return err
	}
	v.After = func(ctx context.Context) error {
		if replica != "" {
			c.Delete(context.Background(), replica)
		}
		if snap != "" {
			c.DeleteSnapshot(context.Background(), snap)
		}
		replica, snap = "", ""
		return nil
	}
	return v, cleanup
}

// SessionGroups is the session suite, against d: a cell's round trip
// (JSON and streamed) next to the exec floor, and getting a session's
// state into a new sandbox: a new sandbox and session replaying the
// cells, next to the live fork of a forkable session holding the same
// state (into 1, 8 and 32 children), and the memory-tier fork reported as
// not available (a session's socket to the daemon cannot be dumped; bench
// fork times the tier on a plain Python process).
func SessionGroups(d *Daemon) ([]Group, func(), error) {
	ctx := context.Background()
	c := d.Client
	sb, err := c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		return nil, nil, fmt.Errorf("create the sandbox to measure: %w", err)
	}
	cleanup := func() { c.Delete(context.Background(), sb.ID) }
	s, err := c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("start the session to measure: %w", err)
	}

	execFloor := Variant{Name: "exec floor (/bin/true)", Func: func(ctx context.Context) error {
		res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", res.ExitCode)
		}
		return err
	}}
	cell := func(ex *api.Execution, err error) error {
		switch {
		case err != nil:
			return err
		case ex.Text() != "2":
			return fmt.Errorf("1 + 1 answered %q (%s)", ex.Text(), ex.Status)
		}
		return nil
	}
	cellJSON := Variant{Name: "session cell (JSON)", Func: func(ctx context.Context) error {
		return cell(s.Run(ctx, "1 + 1"))
	}}
	cellStream := Variant{Name: "session cell (stream)", Func: func(ctx context.Context) error {
		return cell(s.RunStream(ctx, &api.CellRequest{Code: "1 + 1"}, nil))
	}}

	// The state's answer, computed once in a session that ran the cells.
	want, err := replayed(ctx, d, nil)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("build the session state: %w", err)
	}
	replay := Variant{Name: "new sandbox + session + replay", Func: func(ctx context.Context) error {
		_, err := replayed(ctx, d, &want)
		return err
	}}
	forks, err := liveForkVariants(ctx, d, want)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	memory, memoryCleanup := memoryTierVariant(ctx, c)
	stateVariants := append(append([]Variant{replay}, forks.variants...), memory)
	prev := cleanup
	cleanup = func() { memoryCleanup(); forks.cleanup(); prev() }
	return []Group{
		{Name: "cell round trip", Reference: execFloor.Name, Subject: cellJSON.Name, Variants: []Variant{execFloor, cellJSON, cellStream}, Targets: []Target{SessionTarget}},
		{Name: "session state → new sandbox, first cell answered", Reference: replay.Name, Subject: forks.variants[0].Name,
			Variants: stateVariants, Targets: []Target{LiveForkTarget, LiveForkMemoryTarget}, Measure: forks.measure},
	}, cleanup, nil
}

// replayed makes a sandbox and a session, runs sessionState's cells and
// the probe, and deletes the sandbox; the probe's answer must be *want
// when want is not nil.
func replayed(ctx context.Context, d *Daemon, want *string) (string, error) {
	c := d.Client
	sb, err := c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		return "", err
	}
	defer c.Delete(context.Background(), sb.ID)
	s, err := c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		return "", err
	}
	for _, code := range append(sessionState, sessionProbe) {
		ex, err := s.Run(ctx, code)
		if err != nil {
			return "", err
		}
		if ex.Status != api.ExecOK {
			return "", fmt.Errorf("cell %q: %s %+v", code, ex.Status, ex.Error)
		}
		if code == sessionProbe {
			if want != nil && ex.Text() != *want {
				return "", fmt.Errorf("the replayed state answers %q, want %q", ex.Text(), *want)
			}
			return ex.Text(), nil
		}
	}
	return "", nil
}

type liveForks struct {
	variants []Variant
	// measure forks LiveForkPSSChildren children and reads their memory.
	measure func(ctx context.Context) ([]Check, error)
	cleanup func()
}

// LiveForkPSSChildren is how many children the PSS figures fork, and
// LiveForkPSSBarMiB the bar for an untouched child's PSS.
const (
	LiveForkPSSChildren = 8
	LiveForkPSSBarMiB   = 2
)

// agentPids are the session interpreters (tine's code-interpreter agent)
// among the processes of the daemon whose pid is daemon.
func agentPids(daemon int) map[int]bool {
	out := map[int]bool{}
	for _, pid := range processTree(daemon) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(b, []byte("code-interpreter agent")) {
			out[pid] = true
		}
	}
	return out
}

// parentPid is pid's parent's pid (0 when gone).
func parentPid(pid int) int {
	st, err := processStatus(pid)
	if err != nil {
		return 0
	}
	n, _ := parseIntField(st, "PPid:")
	return int(n)
}

// aheadCopies counts the copies forked ahead among pids: interpreters
// whose parent is one too (a child sandbox's interpreter is PID 1's).
func aheadCopies(pids map[int]bool) int {
	n := 0
	for pid := range pids {
		if pids[parentPid(pid)] {
			n++
		}
	}
	return n
}

// settledAgentPids is agentPids once it holds want copies forked ahead,
// or after d. A PSS sum must count the session's copy forked ahead (a
// standing cost of the parent, the same with 1 child or 32) both before a
// fork and after it, or the copy made again after the fork is charged to
// the children in one run and not in the next (ADR 0013, session 7).
func settledAgentPids(daemon, want int, d time.Duration) map[int]bool {
	deadline := time.Now().Add(d)
	for {
		pids := agentPids(daemon)
		if aheadCopies(pids) == want || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sumPSS is the PSS of pids, in bytes.
func sumPSS(pids map[int]bool) int64 {
	var total int64
	for pid := range pids {
		pss, _ := processPSS(pid)
		total += pss
	}
	return total
}

// liveForkVariants are the live forks of a forkable session that ran
// sessionState, one variant per LiveForkCounts: each fork is timed until
// the first child answers the probe with want; its children are deleted
// after, untimed.
func liveForkVariants(ctx context.Context, d *Daemon, want string) (*liveForks, error) {
	c := d.Client
	sb, err := c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		return nil, fmt.Errorf("create the sandbox to fork: %w", err)
	}
	out := &liveForks{cleanup: func() { c.Delete(context.Background(), sb.ID) }}
	// One interpreter forks at most session.MaxForks times: the session is
	// replaced by a new one with the same state when it has, untimed.
	var s *client.Session
	forks := 0
	fresh := func() error {
		if s != nil {
			s.Delete(context.Background())
		}
		var err error
		if s, err = c.CreateSession(ctx, sb.ID, &api.SessionSpec{Forkable: true}); err != nil {
			return fmt.Errorf("start the forkable session: %w", err)
		}
		forks = 0
		for _, code := range sessionState {
			if ex, err := s.Run(ctx, code); err != nil || ex.Status != api.ExecOK {
				return fmt.Errorf("the forkable session's state: cell %q: %+v %v", code, ex, err)
			}
		}
		return nil
	}
	if err := fresh(); err != nil {
		out.cleanup()
		return nil, err
	}
	out.measure = func(ctx context.Context) ([]Check, error) {
		if forks >= session.MaxForks {
			if err := fresh(); err != nil {
				return nil, err
			}
		}
		before := settledAgentPids(d.Pid(), 1, time.Second) // none when fork ahead is off
		copies := aheadCopies(before)
		total := sumPSS(before)
		forks++
		kids, res, err := s.Fork(ctx, LiveForkPSSChildren)
		if res != nil {
			defer func() {
				var wg sync.WaitGroup
				for _, sb := range res.Sandboxes {
					wg.Go(func() { c.Delete(context.Background(), sb.ID) })
				}
				wg.Wait()
			}()
		}
		if err != nil {
			return nil, fmt.Errorf("fork %d children: %w", LiveForkPSSChildren, err)
		}
		// Each child answers a cell first, so its copy has settled.
		slope := func(code string) (float64, error) {
			for _, k := range kids {
				if ex, err := k.Run(ctx, code); err != nil || ex.Status != api.ExecOK {
					return 0, fmt.Errorf("a child's cell %q: %+v %v", code, ex, err)
				}
			}
			now := settledAgentPids(d.Pid(), copies, 2*time.Second)
			fresh := 0
			for pid := range now {
				if !before[pid] && !now[parentPid(pid)] { // (a copy forked ahead is the parent's child: not a child sandbox's)
					fresh++
				}
			}
			if fresh != LiveForkPSSChildren {
				return 0, fmt.Errorf("found %d new interpreters after forking %d", fresh, LiveForkPSSChildren)
			}
			for pid := range before {
				now[pid] = true // the parent's own PSS falls as it shares
			}
			return float64(sumPSS(now)-total) / LiveForkPSSChildren / (1 << 20), nil
		}
		untouched, err := slope("1")
		if err != nil {
			return nil, err
		}
		read, err := slope("hashlib.sha256(data).hexdigest()[:16] == marker")
		if err != nil {
			return nil, err
		}
		return []Check{
			check(fmt.Sprintf("PSS per untouched live-fork child (slope over %d), MiB (at most)", LiveForkPSSChildren), untouched, LiveForkPSSBarMiB, true),
			{Text: "PSS per live-fork child after it reads its 50 MiB, MiB", Value: read}, // no bar
		}, nil
	}
	for _, n := range LiveForkCounts {
		var made []string
		out.variants = append(out.variants, Variant{
			Name: fmt.Sprintf("live fork ×%d", n),
			Func: func(ctx context.Context) error {
				forks++
				kids, res, err := s.Fork(ctx, n)
				if res != nil {
					for _, sb := range res.Sandboxes {
						made = append(made, sb.ID)
					}
				}
				if err != nil {
					return err
				}
				ex, err := kids[0].Run(ctx, sessionProbe)
				if err != nil {
					return err
				}
				if ex.Text() != want {
					return fmt.Errorf("the fork's first child answers %q, want %q", ex.Text(), want)
				}
				return nil
			},
			After: func(ctx context.Context) error {
				var wg sync.WaitGroup
				for _, id := range made {
					wg.Go(func() { c.Delete(context.Background(), id) })
				}
				wg.Wait()
				made = made[:0]
				if forks >= session.MaxForks {
					return fresh()
				}
				return nil
			},
		})
	}
	return out, nil
}
