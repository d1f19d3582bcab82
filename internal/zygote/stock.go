package zygote

import "sync"

// stock keeps things made ahead (request cgroups, Node workers): up to
// ahead of them, refilled in the background whenever kicked, and up to
// cap(ready) when more are given back (put); close stops the refill and
// discards what is left.
type stock[T any] struct {
	ready   chan T
	ahead   int
	produce func() (T, error)
	discard func(T)
	need    chan struct{}
	stop    chan struct{}
	done    sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	lastErr   error // of the last make in the background
	closeOnce sync.Once
}

func newStock[T any](ahead, keep int, produce func() (T, error), discard func(T)) *stock[T] {
	s := &stock[T]{ready: make(chan T, max(ahead, keep)), ahead: ahead, produce: produce, discard: discard, need: make(chan struct{}, 1), stop: make(chan struct{})}
	s.done.Go(s.fill)
	s.kick()
	return s
}

// kick asks the background filler to top the stock up.
func (s *stock[T]) kick() {
	select {
	case s.need <- struct{}{}:
	default:
	}
}

func (s *stock[T]) fill() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.need:
		}
		for len(s.ready) < s.ahead {
			v, err := s.produce()
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
			if err != nil {
				break // the next taker makes its own, and reports why
			}
			if !s.put(v) {
				return
			}
		}
	}
}

// put adds v to the stock, or discards it when the stock holds
// cap(ready) or is closed; it reports whether the stock is still open.
func (s *stock[T]) put(v T) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		select {
		case s.ready <- v:
			return true
		default:
		}
	}
	s.discard(v)
	return !s.closed
}

// tryTake returns a ready thing, if there is one.
func (s *stock[T]) tryTake() (T, bool) {
	select {
	case v := <-s.ready:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// err is why the last background make failed, nil if it did not.
func (s *stock[T]) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// close stops the refill and discards what is left; later calls do
// nothing.
func (s *stock[T]) close() {
	s.closeOnce.Do(s.closeNow)
}

func (s *stock[T]) closeNow() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.done.Wait()
	for {
		v, ok := s.tryTake()
		if !ok {
			return
		}
		s.discard(v)
	}
}
