package e2b

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestExpiryTickLockOrder: a kill holds its box's lock while the daemon
// deletes the tine sandbox, then takes the server's lock. An expiry tick
// that comes meanwhile must wait for the box without holding the server's
// lock, or the kill, and every request after it, hang (seen: bench e2b
// stopped at its first kill). The test holds a box's lock as the kill
// does, lets a tick block on it (found in the goroutine dump), and checks
// that the server's lock is free.
func TestExpiryTickLockOrder(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), boxes: map[string]*box{}}
	b := &box{id: "a", state: stateRunning, endAt: time.Now().Add(time.Hour), started: time.Now()}
	s.boxes["a"] = b

	b.mu.Lock()
	ticked := make(chan struct{})
	go func() {
		s.expire(context.Background(), time.Now())
		close(ticked)
	}()
	for !blockedInExpire() {
		runtime.Gosched()
	}
	free := s.mu.TryLock()
	if free {
		s.mu.Unlock()
	}
	b.mu.Unlock()
	if !free {
		// The tick holds the server's lock; released now that it got b.
		<-ticked
		t.Fatal("an expiry tick waiting for a box held the server's lock: a kill (box, then server) deadlocks with it")
	}
	<-ticked
}

// blockedInExpire reports whether a goroutine is in Server.expire, waiting
// for a mutex.
func blockedInExpire() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Server).expire(") && strings.Contains(g, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}
