package zygote

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/sandbox"
)

// requestGroup is a per-request cgroup made ahead of its request, with its
// join files (cgroup.Group.JoinFiles) open for the request's process to
// join by. Groups are recycled: creating and removing a memory cgroup is
// kernel work (and cgroup_mutex) on every request otherwise.
type requestGroup struct {
	*cgroup.Group
	id    uint64 // unique in the function: names the group to the zygote
	procs []int
	watch *cgroup.Watch // its counters, read on every request
	pool  *groupPool
	// What the group had counted before this request: OOM kills and
	// throttled periods since then are this request's.
	oomBase, throttledBase int64
	// spoiled: the request did not answer, and its process may not have
	// joined yet; the group must go, not be reused.
	spoiled    atomic.Bool
	removeOnce sync.Once
}

// spoil marks the group for removal and starts it at once: a process
// that joins late (the zygote forked after the request was given up)
// then finds no group and exits without running anything.
func (g *requestGroup) spoil() {
	if !g.spoiled.Swap(true) {
		go g.remove()
	}
}

// oomKilled reports whether the kernel killed a process of this request
// for exceeding the memory limit.
func (g *requestGroup) oomKilled() bool { return g.watch.OOMKills() > g.oomBase }

// throttled reports whether this request hit its CPU quota.
func (g *requestGroup) throttled() bool { return g.watch.Throttled() > g.throttledBase }

// KillMembers kills the request's processes (the group's own method, over
// the files held open).
func (g *requestGroup) KillMembers() { g.watch.KillMembers() }

// release puts the group back in the pool once it is empty (recycle kills
// what is left), or removes it and has the pool make a new one; both in the
// background. Callers killed the request's processes already: its answer
// does not wait for cgroupfs a second time.
func (g *requestGroup) release() {
	if g.spoiled.Load() {
		go func() { g.remove(); g.pool.kick() }()
		return
	}
	g.pool.retire(g)
}

// groupPool keeps a few request groups ready in one sandbox: made ahead,
// once, and then recycled; a group is made on the request path only when
// more requests run at once than the pool holds.
//
// It makes ahead one group per slot and the spares' (spareCount), and
// keeps up to as many again of those given back: a released group is back
// only once its process has exited, which under load is a while after the
// reply, so at full concurrency a steady stream needs more groups than
// slots. Keeping only what it made ahead, a stream of 250 requests/s on 4
// slots found the pool empty on 21 to 83 of 600 requests: each a group
// made on the request path, and one removed when a recycled one came back
// to a full pool — a memory cgroup created and removed (≈ 3 ms of CPU)
// for nothing. Now the pool grows to what the load needs, once.
type groupPool struct {
	sb    *sandbox.Sandbox
	lim   cgroup.Limits
	seq   *atomic.Uint64
	stock *stock[*requestGroup]

	mu       sync.Mutex
	draining []retired // released, not yet seen empty; oldest first
	sweeping bool      // a sweep goroutine runs
}

// retired is a released group waiting for its processes to go.
type retired struct {
	g     *requestGroup
	since time.Time
}

func newGroupPool(sb *sandbox.Sandbox, lim cgroup.Limits, size int, seq *atomic.Uint64) *groupPool {
	p := &groupPool{sb: sb, lim: lim, seq: seq}
	p.stock = newStock(size+spareCount, 2*size+spareCount, p.make, (*requestGroup).remove)
	return p
}

func (p *groupPool) make() (*requestGroup, error) {
	id := p.seq.Add(1)
	g, err := p.sb.RequestGroup("r"+strconv.FormatUint(id, 10), p.lim)
	if err != nil {
		return nil, err
	}
	fds, err := g.JoinFiles()
	if err != nil {
		g.Remove()
		return nil, err
	}
	w, err := g.Watch(p.lim.CPUs > 0) // without a quota, never throttled
	if err != nil {
		closeAll(fds)
		g.Remove()
		return nil, err
	}
	return &requestGroup{Group: g, id: id, procs: fds, watch: w, pool: p}, nil
}

func (p *groupPool) kick() { p.stock.kick() }

// retire has a released group put back in the stock once it is empty,
// with its counters re-based. (Its peak memory is not reset: no one reads
// a request group's.) Nothing waits for it per request: a request's
// process, killed as its reply came, takes a millisecond or more to exit
// (its memory and namespaces torn down), and a goroutine per released
// group sleeping until then (recycle, before) was a timer and a thread
// woken in the daemon per request, each finding the process there or not.
// Instead the groups wait in draining, and are looked at in batches: by
// a taker that finds the stock empty (reclaim), and by one sweep goroutine
// every sweepEvery while any wait, which also kills what a request left
// running and, past recycleWait (on a saturated host an exit can take
// longer than 100 ms), removes the group (a new one is made instead).
func (p *groupPool) retire(g *requestGroup) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = append(p.draining, retired{g, time.Now()})
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
}

// sweepEvery is how often released groups are looked at while some wait.
const sweepEvery = 20 * time.Millisecond

func (p *groupPool) sweep() {
	for {
		time.Sleep(sweepEvery)
		if !p.reclaim(true) {
			return
		}
	}
}

// reclaim puts the released groups that are empty back in the stock.
// swept (the sweep goroutine) also kills what is left in the others and
// removes those past recycleWait; it reports whether groups still wait,
// and when none does, the sweep ends (p.sweeping is cleared).
func (p *groupPool) reclaim(swept bool) bool {
	p.mu.Lock()
	var back, gone []*requestGroup
	keep := p.draining[:0]
	now := time.Now()
	for _, r := range p.draining {
		switch {
		case r.g.watch.Pids() == 0:
			back = append(back, r.g)
		case swept && now.Sub(r.since) > recycleWait:
			gone = append(gone, r.g)
		default:
			if swept {
				r.g.KillMembers()
			}
			keep = append(keep, r)
		}
	}
	clear(p.draining[len(keep):])
	p.draining = keep
	waiting := len(keep) > 0
	if swept && !waiting {
		p.sweeping = false
	}
	p.mu.Unlock()
	for _, g := range back {
		g.oomBase, g.throttledBase = g.watch.OOMKills(), g.watch.Throttled()
		p.stock.put(g)
	}
	for _, g := range gone {
		g.remove() // kills what is still there, retrying
	}
	if len(gone) > 0 {
		p.kick()
	}
	return waiting
}

// recycleWait bounds the wait for a released group's killed processes to
// exit.
const recycleWait = 5 * time.Second

func (g *requestGroup) remove() {
	g.removeOnce.Do(func() {
		closeAll(g.procs)
		g.Remove() // kills what is left, retrying
		g.watch.Close()
	})
}

// ready returns a ready group, if there is one (reclaiming the released
// groups that have emptied when the stock has none).
func (p *groupPool) ready() (*requestGroup, bool) {
	if g, ok := p.stock.tryTake(); ok {
		return g, true
	}
	p.reclaim(false)
	return p.stock.tryTake()
}

// take returns a ready group, or makes one when none is.
func (p *groupPool) take() (*requestGroup, error) {
	if g, ok := p.ready(); ok {
		return g, nil
	}
	return p.make()
}

// close removes the groups still ready; groups in use are removed when
// released, and those draining once they are empty (the stock is closed:
// put discards them).
func (p *groupPool) close() { p.stock.close() }
