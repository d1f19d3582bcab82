package zygote

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/sandbox"
)

// requestGroup is a per-request cgroup made ahead of its request, with its
// cgroup.procs files open for the request's process to join by.
type requestGroup struct {
	*cgroup.Group
	procs []int
}

// release kills what is left in the group and removes it, in the
// background: the request's answer does not wait for cgroupfs.
func (g *requestGroup) release() {
	closeAll(g.procs)
	go func() { g.Kill(); g.Remove() }()
}

// groupPool keeps a few request groups ready in one sandbox: creating one
// is three mkdirs and a handful of writes per hierarchy, too slow for the
// warm path (≈0.3 ms here).
type groupPool struct {
	sb    *sandbox.Sandbox
	lim   cgroup.Limits
	seq   *atomic.Uint64
	ready chan *requestGroup
	need  chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup
}

func newGroupPool(sb *sandbox.Sandbox, lim cgroup.Limits, size int, seq *atomic.Uint64) *groupPool {
	p := &groupPool{sb: sb, lim: lim, seq: seq, ready: make(chan *requestGroup, size), need: make(chan struct{}, 1), stop: make(chan struct{})}
	p.done.Go(p.fill)
	p.kick()
	return p
}

func (p *groupPool) make() (*requestGroup, error) {
	g, err := p.sb.RequestGroup("r"+strconv.FormatUint(p.seq.Add(1), 10), p.lim)
	if err != nil {
		return nil, err
	}
	fds, err := g.ProcsFiles()
	if err != nil {
		g.Remove()
		return nil, err
	}
	return &requestGroup{Group: g, procs: fds}, nil
}

func (p *groupPool) kick() {
	select {
	case p.need <- struct{}{}:
	default:
	}
}

func (p *groupPool) fill() {
	for {
		select {
		case <-p.stop:
			return
		case <-p.need:
		}
		for len(p.ready) < cap(p.ready) {
			g, err := p.make()
			if err != nil {
				break // the next take makes its own, and reports why
			}
			select {
			case p.ready <- g:
			case <-p.stop:
				g.release()
				return
			}
		}
	}
}

// take returns a ready group, or makes one when none is.
func (p *groupPool) take() (*requestGroup, error) {
	defer p.kick()
	select {
	case g := <-p.ready:
		return g, nil
	default:
		return p.make()
	}
}

// close stops refilling and removes the groups still ready.
func (p *groupPool) close() {
	close(p.stop)
	p.done.Wait()
	for {
		select {
		case g := <-p.ready:
			g.release()
		default:
			return
		}
	}
}
