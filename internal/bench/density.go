package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// DensityTargets are the bars for many idle sandboxes: the PSS each
// adds, and the exec round trip with all of them live against with one.
var DensityTargets = struct{ PSSBytes, ExecRatio float64 }{512 << 10, 1.5}

// DensityOptions size the density suite.
type DensityOptions struct {
	// Count is how many idle sandboxes are live at the end.
	Count int
	// Execs is how many execs are timed at each checkpoint (after 10
	// discarded).
	Execs int
	// Parallel is how many creates are in flight at once.
	Parallel int
	Progress io.Writer
}

// DaemonFlags are the serve flags the density suite needs: a budget that
// admits opts.Count sandboxes whatever limits they get by default, and no
// pool (whose ready sandboxes would count as idle ones).
func (o DensityOptions) DaemonFlags() []string {
	return []string{"--pool", "0", "--max-sandboxes", fmt.Sprint(o.Count + 16), "--max-memory", "1000t"}
}

// DensityCheckpoints are the live counts the suite samples at: 1, a tenth,
// a quarter, a half and all of count (fewer when they coincide).
func DensityCheckpoints(count int) []int {
	var at []int
	for _, n := range []int{1, count / 10, count / 4, count / 2, count} {
		if n >= 1 && !slices.Contains(at, n) {
			at = append(at, n)
		}
	}
	slices.Sort(at)
	return at
}

// DensityPoint is what was read with Live idle sandboxes up.
type DensityPoint struct {
	Live int `json:"live"`
	// ProcessPSSBytes sums the PSS of the daemon and every process under
	// it (each sandbox's PID 1 and whatever it holds), over Processes.
	ProcessPSSBytes int64 `json:"process_pss_bytes"`
	DaemonPSSBytes  int64 `json:"daemon_pss_bytes"`
	// DaemonRSSBytes is the daemon's VmRSS: its pages whether or not the
	// PID 1s cloned from it share them, the image the next clone copies.
	DaemonRSSBytes int64 `json:"daemon_rss_bytes"`
	Processes      int   `json:"processes"`
	// CgroupBytes sums the sandboxes' memory cgroups (memory.current on
	// v2, memory.usage_in_bytes on v1): their pages, tmpfs and the kernel
	// objects charged to them.
	CgroupBytes int64 `json:"cgroup_bytes"`
	// HostUsedBytes is MemTotal − MemAvailable: everything, the
	// neighbours' memory too.
	HostUsedBytes int64 `json:"host_used_bytes"`
	// HostKernel are meminfo's PageTables, KernelStack and SUnreclaim:
	// where the kernel's share of HostUsedBytes goes (host-wide too).
	HostKernel    HostKernel `json:"host_kernel"`
	DaemonThreads int64      `json:"daemon_threads"`
	DaemonFDs     int        `json:"daemon_fds"`
	// GrowSeconds is how long the creates from the previous checkpoint
	// took.
	GrowSeconds float64 `json:"grow_seconds"`
}

// DensityRaw is the density suite's datapoints and fits (in bytes, or
// threads and descriptors, per sandbox), in its JSON as raw.
type DensityRaw struct {
	Points []DensityPoint `json:"points"`
	// Top is the last checkpoint read again after its execs.
	Top  DensityPoint    `json:"top_again_after_execs"`
	Fits map[string]Line `json:"fits"`
}

// densityFleet is the set of sandboxes the suite created, for growing,
// picking at random and cleaning up.
type densityFleet struct {
	c   *client.Client
	mu  sync.Mutex
	ids []string
}

// grow creates sandboxes, parallel at a time, until n are live.
func (f *densityFleet) grow(ctx context.Context, n, parallel int) error {
	f.mu.Lock()
	todo := n - len(f.ids)
	f.mu.Unlock()
	work := make(chan struct{})
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range min(parallel, max(todo, 0)) {
		wg.Go(func() {
			for range work {
				sb, err := f.c.Create(ctx, &api.SandboxSpec{})
				if err != nil {
					f.mu.Lock()
					live := len(f.ids)
					f.mu.Unlock()
					errs <- fmt.Errorf("create sandbox %d (with %d live): %w", live+1, live, err)
					return
				}
				f.mu.Lock()
				f.ids = append(f.ids, sb.ID)
				f.mu.Unlock()
			}
		})
	}
	var err error
feed:
	for range todo {
		select {
		case work <- struct{}{}:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs // a worker that failed on the last items
	}
	return err
}

// shrink deletes sandboxes until keep are left (the first ones created).
func (f *densityFleet) shrink(keep, parallel int) error {
	f.mu.Lock()
	gone := slices.Clone(f.ids[min(keep, len(f.ids)):])
	f.ids = f.ids[:min(keep, len(f.ids))]
	f.mu.Unlock()
	return deleteAll(f.c, gone, parallel)
}

// deleteAll deletes ids, parallel at a time, whatever the caller's
// context says (it is cleanup), and returns the first error.
func deleteAll(c *client.Client, ids []string, parallel int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	work := make(chan string)
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for id := range work {
				if err := c.Delete(ctx, id); err != nil && client.ErrorCode(err) != api.CodeNotFound {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("delete sandbox %s: %w", id, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return first
}

func (f *densityFleet) random() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[rand.IntN(len(f.ids))]
}

// ends returns the first and the last sandbox created.
func (f *densityFleet) ends() (first, last string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[0], f.ids[len(f.ids)-1]
}

// cleanup deletes every sandbox the daemon has (the suite's daemon runs
// nothing else), including one whose create was cut short by an
// interrupt after the daemon had made it, and reports what is left.
func (f *densityFleet) cleanup(parallel int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	if list, err := f.c.List(ctx); err == nil {
		for _, s := range list {
			ids = append(ids, s.ID)
		}
	} else {
		f.mu.Lock()
		ids = slices.Clone(f.ids)
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.ids = nil
	f.mu.Unlock()
	err := deleteAll(f.c, ids, parallel)
	if list, lerr := f.c.List(ctx); lerr == nil && len(list) > 0 {
		err = cmp.Or(err, fmt.Errorf("%d sandboxes still listed after deleting all", len(list)))
	}
	return err
}

// Density measures many idle live sandboxes on one daemon: it grows to
// opts.Count sandboxes through DensityCheckpoints, reading at each the
// total PSS of the daemon's process tree, the sandboxes' cgroup memory and
// the host's used memory (their least-squares slopes against the live
// count are the cost per sandbox), and timing execs of /bin/true to random
// live sandboxes; then it deletes all but one and times the execs at one
// live again, so that the ratio of all live to one live brackets the
// drift of the run. Every sandbox is deleted at the end, on error and on
// interrupt too.
func Density(ctx context.Context, d *Daemon, opts DensityOptions) (r *SeriesReport, err error) {
	if opts.Count < 2 || opts.Execs < 1 || opts.Parallel < 1 {
		return nil, fmt.Errorf("density needs a count of at least 2, execs and parallel of at least 1")
	}
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("density", g)
	f := &densityFleet{c: d.Client}
	defer func() {
		if cerr := f.cleanup(opts.Parallel); cerr != nil {
			err = cmp.Or(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	progress := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	hostLimits(r, d, opts.Count)

	var points []DensityPoint
	var oneLive []sample
	for _, n := range DensityCheckpoints(opts.Count) {
		t0 := time.Now()
		if err := f.grow(ctx, n, opts.Parallel); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w\ndaemon log (tail):\n%s", err, d.LogTail(2000))
		}
		grew := time.Since(t0)
		progress("density: %d live (grown in %.1fs); settling, then reading memory", n, grew.Seconds())
		time.Sleep(2 * time.Second) // let the creates' garbage and page-table churn settle
		p, err := readDensityPoint(ctx, d, n)
		if err != nil {
			return nil, err
		}
		p.GrowSeconds = grew.Seconds()
		points = append(points, p)
		ss := execRandom(ctx, f, 10, opts.Execs)
		name := fmt.Sprintf("exec /bin/true, %d live (random target)", n)
		if n == 1 {
			name = "exec /bin/true, 1 live (before growing)"
			oneLive = append(oneLive, ss...)
		}
		r.Series = append(r.Series, summarize(name, ss))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	// The PID 1s differ: each is a clone of the daemon as it was when
	// made, so the newest carries the biggest image. Execs to the oldest
	// and to the newest, interleaved, tell a per-PID 1 cost from a
	// daemon-wide one.
	oldest, newest := f.ends()
	var toOldest, toNewest []sample
	for i := range 10 + opts.Execs {
		o, w := execOnce(ctx, f.c, oldest), execOnce(ctx, f.c, newest)
		if i >= 10 {
			toOldest, toNewest = append(toOldest, o), append(toNewest, w)
		}
	}
	r.Series = append(r.Series,
		summarize(fmt.Sprintf("exec /bin/true, %d live, to the oldest", opts.Count), toOldest),
		summarize(fmt.Sprintf("exec /bin/true, %d live, to the newest", opts.Count), toNewest))

	// PSS again at the top count after its execs: a clone of the daemon
	// keeps pages the daemon has since written, so the cost grows a little
	// with age.
	top, err := readDensityPoint(ctx, d, opts.Count)
	if err != nil {
		return nil, err
	}

	progress("density: deleting all but one, then timing execs at 1 live again")
	if err := f.shrink(1, opts.Parallel); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	after := execRandom(ctx, f, 10, opts.Execs)
	oneLive = append(oneLive, after...)
	r.Series = append(r.Series, summarize("exec /bin/true, 1 live (after deleting the rest)", after))
	one := summarize("exec /bin/true, 1 live (before and after, pooled)", oneLive)
	all := r.Series[len(DensityCheckpoints(opts.Count))-1]

	fit := func(field func(DensityPoint) float64) Line {
		xs, ys := make([]float64, len(points)), make([]float64, len(points))
		for i, p := range points {
			xs[i], ys[i] = float64(p.Live), field(p)
		}
		l, _ := FitLine(xs, ys) // at least two checkpoints: count >= 2
		return l
	}
	pss := fit(func(p DensityPoint) float64 { return float64(p.ProcessPSSBytes) })
	daemonPSS := fit(func(p DensityPoint) float64 { return float64(p.DaemonPSSBytes) })
	daemonRSS := fit(func(p DensityPoint) float64 { return float64(p.DaemonRSSBytes) })
	cg := fit(func(p DensityPoint) float64 { return float64(p.CgroupBytes) })
	host := fit(func(p DensityPoint) float64 { return float64(p.HostUsedBytes) })
	pageTables := fit(func(p DensityPoint) float64 { return float64(p.HostKernel.PageTablesBytes) })
	kstack := fit(func(p DensityPoint) float64 { return float64(p.HostKernel.KernelStackBytes) })
	slab := fit(func(p DensityPoint) float64 { return float64(p.HostKernel.SlabUnreclaimBytes) })
	threads := fit(func(p DensityPoint) float64 { return float64(p.DaemonThreads) })
	fds := fit(func(p DensityPoint) float64 { return float64(p.DaemonFDs) })

	kib := func(b float64) string { return fmt.Sprintf("%.0f KiB", b/1024) }
	for i, p := range append(points, top) {
		key := fmt.Sprintf("memory at %5d live", p.Live)
		if i == len(points) {
			key += " (again, after its execs)"
		}
		r.Figures[key] = fmt.Sprintf("PSS %.1f MiB over %d processes (daemon %.1f MiB, RSS %.1f MiB), cgroups %.1f MiB, host used %.1f MiB (page tables %.1f); daemon %d threads, %d fds; grown in %.1fs",
			mib(p.ProcessPSSBytes), p.Processes, mib(p.DaemonPSSBytes), mib(p.DaemonRSSBytes), mib(p.CgroupBytes), mib(p.HostUsedBytes), mib(p.HostKernel.PageTablesBytes), p.DaemonThreads, p.DaemonFDs, p.GrowSeconds)
	}
	r.Figures["per sandbox: PSS slope, daemon + every sandbox process (the target's figure)"] = kib(pss.Slope)
	r.Figures["per sandbox: of which the daemon's own PSS"] = kib(daemonPSS.Slope)
	r.Figures["per sandbox: the daemon's RSS (the image each later PID 1 clones)"] = kib(daemonRSS.Slope)
	r.Figures["per sandbox: cgroup-charged slope (pages, tmpfs and kernel objects charged to the sandboxes' cgroups)"] = kib(cg.Slope)
	r.Figures["per sandbox: daemon PSS + cgroup-charged slope"] = kib(daemonPSS.Slope + cg.Slope)
	r.Figures["per sandbox: host MemTotal−MemAvailable slope (all kernel memory too; the neighbours' changes too)"] = kib(host.Slope)
	r.Figures["per sandbox: of the host slope, page tables, kernel stacks, unreclaimable slab"] = kib(pageTables.Slope) + ", " + kib(kstack.Slope) + ", " + kib(slab.Slope)
	r.Figures["per sandbox: daemon threads, fds"] = fmt.Sprintf("%.2f, %.2f", threads.Slope, fds.Slope)
	if gs := points[len(points)-1].GrowSeconds; len(points) > 1 && gs > 0 {
		r.Figures["creates per second (last checkpoint's batch)"] = fmt.Sprintf("%.0f", float64(points[len(points)-1].Live-points[len(points)-2].Live)/gs)
	}
	r.Figures[fmt.Sprintf("exec p99 at %d live / p99 at 1 live", opts.Count)] = fmt.Sprintf("%.2f", ratioOf(all.Latency.P99Ns, one.Latency.P99Ns))
	r.Series = append(r.Series, one)
	r.Raw = DensityRaw{Points: points, Top: top, Fits: map[string]Line{
		"process_pss": pss, "daemon_pss": daemonPSS, "daemon_rss": daemonRSS, "cgroup": cg, "host_used": host, "page_tables": pageTables,
		"kernel_stack": kstack, "slab_unreclaimable": slab, "daemon_threads": threads, "daemon_fds": fds,
	}}

	r.Checks = append(r.Checks,
		check("PSS per idle sandbox (slope of the daemon's and every sandbox process's PSS), KiB (at most)", pss.Slope/1024, DensityTargets.PSSBytes/1024, true),
		check(fmt.Sprintf("exec p50 at %d live / at 1 live (at most)", opts.Count), ratioOf(all.Latency.P50Ns, one.Latency.P50Ns), DensityTargets.ExecRatio, true))
	r.finish(g, before, true)
	return r, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// execRandom times execs of /bin/true, one at a time, each to a random
// sandbox of f; the first warmup are discarded.
func execRandom(ctx context.Context, f *densityFleet, warmup, n int) []sample {
	out := make([]sample, 0, n)
	for i := range warmup + n {
		if s := execOnce(ctx, f.c, f.random()); i >= warmup {
			out = append(out, s)
		}
	}
	return out
}

// execOnce times one exec of /bin/true in sandbox id.
func execOnce(ctx context.Context, c *client.Client, id string) sample {
	t0 := time.Now()
	res, err := c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"/bin/true"}})
	s := sample{latency: time.Since(t0), err: err}
	if err == nil && res.ExitCode != 0 {
		s.err = fmt.Errorf("exec /bin/true in %s: exit code %d: %s", id, res.ExitCode, res.Stderr)
	}
	return s
}

// readDensityPoint reads the memory, threads and descriptors with live
// sandboxes up.
func readDensityPoint(ctx context.Context, d *Daemon, live int) (DensityPoint, error) {
	p := DensityPoint{Live: live}
	var err error
	if p.ProcessPSSBytes, p.Processes, err = treePSSCount(d.Pid()); err != nil {
		return p, err
	}
	if p.DaemonPSSBytes, err = processPSS(d.Pid()); err != nil {
		return p, err
	}
	list, err := d.Client.List(ctx)
	if err != nil {
		return p, fmt.Errorf("list sandboxes: %w", err)
	}
	if len(list) != live {
		return p, fmt.Errorf("the daemon lists %d sandboxes, want %d", len(list), live)
	}
	for _, s := range list {
		p.CgroupBytes += s.Usage.MemoryBytes
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return p, err
	}
	if p.HostUsedBytes, err = parseHostUsed(string(meminfo)); err != nil {
		return p, err
	}
	if p.HostKernel, err = parseHostKernel(string(meminfo)); err != nil {
		return p, err
	}
	status, err := processStatus(d.Pid())
	if err != nil {
		return p, err
	}
	if p.DaemonThreads, err = parseIntField(status, "Threads:"); err != nil {
		return p, err
	}
	if p.DaemonRSSBytes, err = parseKBField(status, "VmRSS:"); err != nil {
		return p, err
	}
	p.DaemonFDs, err = openFDs(d.Pid())
	return p, err
}

// hostLimits records the host's and the daemon's limits that bound how
// many sandboxes can live at once, so a failed create can be read against
// them.
func hostLimits(r *SeriesReport, d *Daemon, count int) {
	var lim []string
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		lim = append(lim, "pid_max "+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/threads-max"); err == nil {
		lim = append(lim, "threads-max "+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", d.Pid())); err == nil {
		if soft, hard, err := parseLimit(string(b), "Max open files"); err == nil {
			lim = append(lim, fmt.Sprintf("daemon open files %d soft, %d hard", soft, hard))
		}
		if soft, _, err := parseLimit(string(b), "Max processes"); err == nil {
			lim = append(lim, fmt.Sprintf("daemon processes %d", soft))
		}
	}
	r.Figures["host and daemon limits"] = strings.Join(lim, "; ")
	r.Figures["idle sandboxes"] = count
}
