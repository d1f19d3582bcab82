package zygote

import (
	"strconv"
	"sync"
)

// spareCount is how many request groups a zygote keeps a spare child
// waiting in: one per CPU of the machine this was tuned on; a burst past
// it forks.
const spareCount = 2

// spares are the request groups a zygote has been armed with: for each,
// the zygote forks a child that walls itself in and joins the group, then
// waits for its request. A request that takes an armed group finds its
// process already in its cgroup: on a v1 hierarchy, moving a process after
// a quiet spell waits for an RCU grace period (≈10 ms here), which the
// spare pays while nothing waits for it.
type spares struct {
	z    *zygoteProc
	pool *groupPool

	mu     sync.Mutex
	ready  []*requestGroup // oldest first: the order the zygote got them
	arming int             // arms in flight
	closed bool
}

func newSpares(z *zygoteProc, pool *groupPool) *spares {
	s := &spares{z: z, pool: pool}
	go s.refill()
	return s
}

// take returns the oldest armed group, or nil when there is none (or s
// is nil: the zygote arms no spares). kick arms another once the request
// has been sent, so the zygote hands it over before it forks the next
// spare.
func (s *spares) take() *requestGroup {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ready) == 0 {
		return nil
	}
	rg := s.ready[0]
	s.ready = s.ready[1:]
	return rg
}

// kick starts a refill when one is needed.
func (s *spares) kick() {
	if s == nil {
		return
	}
	s.mu.Lock()
	need := !s.closed && len(s.ready)+s.arming < spareCount
	s.mu.Unlock()
	if need {
		go s.refill()
	}
}

// refill arms groups until spareCount are armed or arming.
func (s *spares) refill() {
	for {
		s.mu.Lock()
		if s.closed || len(s.ready)+s.arming >= spareCount {
			s.mu.Unlock()
			return
		}
		s.arming++
		s.mu.Unlock()
		rg, err := s.arm()
		s.mu.Lock()
		s.arming--
		if err == nil && !s.closed {
			s.ready = append(s.ready, rg)
			rg = nil
		}
		s.mu.Unlock()
		if err != nil {
			return // the next request forks and joins on its own
		}
		if rg != nil { // closed meanwhile
			rg.release()
		}
	}
}

// arm takes a group and hands it to the zygote for a spare.
func (s *spares) arm() (*requestGroup, error) {
	rg, err := s.pool.take()
	if err != nil {
		return nil, err
	}
	if err := s.z.send(armMessage(rg), rg.procs); err != nil {
		rg.release()
		return nil, err
	}
	return rg, nil
}

// close gives the armed groups back (their spares die with the zygote, or
// are killed when the pool recycles the groups).
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	ready := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, rg := range ready {
		rg.release()
	}
}

// armMessage asks the zygote to fork a spare into rg.
func armMessage(rg *requestGroup) []byte { return []byte("arm " + strconv.FormatUint(rg.id, 10)) }

// toSpare prefixes a request's header with the armed group it is for.
func toSpare(rg *requestGroup, hdr []byte) []byte {
	return append([]byte("to "+strconv.FormatUint(rg.id, 10)+"\n"), hdr...)
}
