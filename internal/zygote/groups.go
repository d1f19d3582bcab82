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
	go g.pool.recycle(g)
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

// recycle waits for a used group to empty, killing what is left, and puts
// it back with its counters re-based. (Its peak memory is not reset: no
// one reads a request group's.) The first look is a millisecond after the
// release: a request's process, killed as its reply came, takes about that
// long to exit (its memory and namespaces torn down), and each look that
// finds it still there is a timer and a thread woken in the daemon for
// nothing (from 100 µs, one at 0.1, 0.3, 0.7 and 1.5 ms). It waits for
// as long as the killed processes take to go, up to recycleWait: on a
// saturated host an exit can take longer than 100 ms (where it used to
// give up), and removing the group instead waits for the same exit and
// then makes a new one.
func (p *groupPool) recycle(g *requestGroup) {
	deadline := time.Now().Add(recycleWait)
	for delay := time.Millisecond; g.watch.Pids() > 0; delay = min(2*delay, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			g.remove() // kills what is still there, retrying
			p.kick()
			return
		}
		g.KillMembers()
		time.Sleep(delay)
	}
	g.oomBase, g.throttledBase = g.watch.OOMKills(), g.watch.Throttled()
	p.stock.put(g)
}

// recycleWait bounds recycle's wait for a group's killed processes to exit.
const recycleWait = 5 * time.Second

func (g *requestGroup) remove() {
	g.removeOnce.Do(func() {
		closeAll(g.procs)
		g.Remove() // kills what is left, retrying
		g.watch.Close()
	})
}

// ready returns a ready group, if there is one.
func (p *groupPool) ready() (*requestGroup, bool) { return p.stock.tryTake() }

// take returns a ready group, or makes one when none is.
func (p *groupPool) take() (*requestGroup, error) {
	if g, ok := p.stock.tryTake(); ok {
		return g, nil
	}
	return p.make()
}

// close removes the groups still ready; groups in use are removed when
// released.
func (p *groupPool) close() { p.stock.close() }
