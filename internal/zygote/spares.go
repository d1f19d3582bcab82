package zygote

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spareCount is how many request groups a zygote keeps a spare child
// waiting in: one per CPU of the machine this was tuned on; a burst past
// it forks.
const spareCount = 2

// spares are the request groups a zygote has been armed with: for each,
// the zygote forks a child that offers the daemon a socket of its own,
// walls itself in and joins the group. A request that takes an armed
// group finds its process already in its cgroup (on a v1 hierarchy,
// moving a process after a quiet spell waits for an RCU grace period,
// ≈10 ms here, which the spare pays while nothing waits for it), and is
// sent straight to it: the zygote is not woken, so a request never waits
// behind the zygote's forks.
type spares struct {
	z    *zygoteProc
	pool *groupPool
	sock *os.File // the daemon's end of the spares socket (non-blocking)
	rc   syscall.RawConn
	buf  []byte // for collect, under cmu
	oob  []byte
	cmu  sync.Mutex

	mu      sync.Mutex
	ready   []armedSpare          // oldest first
	pending map[uint64]pendingArm // armed, its spare not offered yet
	arming  int                   // refills between taking a group and arming it
	closed  bool
}

// pendingArm is a group the zygote was armed with, and when.
type pendingArm struct {
	rg *requestGroup
	at time.Time
}

// offerWait is how long an armed group waits for its spare's offer: the
// spare offers itself, first thing after its fork, and one that died
// before it did (killed with its sandbox's memory full) never will. Its
// group is then removed, not reused, so a spare that offers later finds
// no group to join and exits, and the zygote is armed again.
const offerWait = 10 * time.Second

// armedSpare is a spare waiting in its request group, and the daemon's end
// of its socket.
type armedSpare struct {
	rg   *requestGroup
	sock int
}

func newSpares(z *zygoteProc, pool *groupPool, sock *os.File) *spares {
	s := &spares{z: z, pool: pool, sock: sock, pending: map[uint64]pendingArm{},
		buf: make([]byte, 64), oob: make([]byte, unix.CmsgSpace(4))}
	s.rc, _ = sock.SyscallConn()
	go s.refill(true)
	return s
}

// take returns the oldest spare, or false when there is none (or s is
// nil: the zygote arms no spares). kick arms another.
func (s *spares) take() (armedSpare, bool) {
	if s == nil {
		return armedSpare{}, false
	}
	s.collect()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ready) == 0 {
		return armedSpare{}, false
	}
	sp := s.ready[0]
	s.ready = s.ready[1:]
	return sp, true
}

// hand sends a request to sp (its send time first, as the zygote's own
// hand-offs did) and lets go of sp's socket; an error means the spare is
// gone and the request must be forked.
func (sp armedSpare) hand(hdr []byte, fds []int, sent int64) error {
	defer unix.Close(sp.sock)
	msg := binary.NativeEndian.AppendUint64(make([]byte, 0, 8+len(hdr)), uint64(sent))
	return unix.Sendmsg(sp.sock, append(msg, hdr...), unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
}

// kick refills when one is needed, in the caller's goroutine: past the
// start a refill only takes ready groups and sends the zygote a message
// each, and a goroutine of its own was one more thread woken per request.
func (s *spares) kick() {
	if s == nil {
		return
	}
	s.mu.Lock()
	need := !s.closed && s.count() < spareCount
	s.mu.Unlock()
	if need {
		s.refill(false)
	}
}

// refill arms groups until spareCount are ready or on their way. Only
// the first (atStart, as the zygote starts) makes a group when none is ready:
// later, making one for a spare is a memory cgroup's creation (and, once
// the pool is full again, a removal) to save a request the walls, and with
// none ready (every group in a request or still emptying) the next
// request forks and joins on its own, and kicks the refill again.
func (s *spares) refill(atStart bool) {
	for {
		s.mu.Lock()
		if s.closed || s.count() >= spareCount {
			s.mu.Unlock()
			return
		}
		s.arming++
		s.mu.Unlock()
		rg, ok := s.pool.ready()
		if !ok && atStart {
			var err error
			rg, err = s.pool.take()
			ok = err == nil
		}
		s.mu.Lock()
		s.arming--
		if ok && !s.closed {
			s.pending[rg.id] = pendingArm{rg, time.Now()}
		}
		closed := s.closed
		s.mu.Unlock()
		if !ok {
			return
		}
		if closed {
			rg.release()
			return
		}
		if err := s.z.send(armMessage(rg), rg.procs); err != nil {
			s.drop(rg.id)
			return
		}
	}
}

// count is how many spares are ready or on their way (s.mu held).
func (s *spares) count() int { return len(s.ready) + len(s.pending) + s.arming }

// drop gives back a pending group whose spare will not come.
func (s *spares) drop(id uint64) {
	s.mu.Lock()
	p, ok := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if ok {
		p.rg.release()
	}
}

// expire spoils the groups whose spare has not offered itself within
// offerWait.
func (s *spares) expire() {
	var late []*requestGroup
	s.mu.Lock()
	for id, p := range s.pending {
		if time.Since(p.at) > offerWait {
			late = append(late, p.rg)
			delete(s.pending, id)
		}
	}
	s.mu.Unlock()
	for _, rg := range late {
		rg.spoil()
		rg.release()
	}
}

// collect takes the zygote's offers of spares queued on the spares
// socket, without waiting: they are read when a request needs a spare. A
// goroutine waiting on the socket (through the poller) was one more
// goroutine woken, on a thread woken across CPUs, per request.
func (s *spares) collect() {
	if s.rc == nil {
		return
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	for {
		var n, oobn int
		var rerr error
		if err := s.rc.Control(func(fd uintptr) {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), s.buf, s.oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		}); err != nil || rerr != nil || n == 0 {
			break // nothing queued (EAGAIN), or closed: the zygote is gone
		}
		var fds []int
		if cmsgs, err := unix.ParseSocketControlMessage(s.oob[:oobn]); err == nil {
			for _, c := range cmsgs {
				if got, err := unix.ParseUnixRights(&c); err == nil {
					fds = append(fds, got...)
				}
			}
		}
		s.offered(s.buf[:n], fds)
	}
	s.expire()
}

// offered handles one message of the zygote: "armed ID" with the spare's
// socket, or "unarmed ID".
func (s *spares) offered(msg []byte, fds []int) {
	word, idText, _ := bytes.Cut(msg, []byte(" "))
	id, err := strconv.ParseUint(string(idText), 10, 64)
	if err != nil || id == 0 {
		closeAll(fds)
		return
	}
	if string(word) != "armed" || len(fds) != 1 {
		closeAll(fds)
		s.drop(id)
		return
	}
	s.mu.Lock()
	p, ok := s.pending[id]
	delete(s.pending, id)
	if ok && !s.closed {
		s.ready = append(s.ready, armedSpare{rg: p.rg, sock: fds[0]})
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	unix.Close(fds[0]) // not armed here (or closed): the spare sees EOF and exits
	if ok {
		p.rg.release()
	}
}

// close gives the armed groups back and lets their spares go (each sees
// EOF and exits; the pool kills what is left when it recycles the group).
// Called once the zygote is dead.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	ready, pending := s.ready, s.pending
	s.ready, s.pending = nil, map[uint64]pendingArm{}
	s.mu.Unlock()
	s.cmu.Lock()
	s.sock.Close() // offers still queued go with it: their spares see EOF
	s.cmu.Unlock()
	for _, sp := range ready {
		unix.Close(sp.sock)
		sp.rg.release()
	}
	for _, p := range pending {
		p.rg.release()
	}
}

// armMessage asks the zygote to fork a spare into rg.
func armMessage(rg *requestGroup) []byte { return []byte("arm " + strconv.FormatUint(rg.id, 10)) }
