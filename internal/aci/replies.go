package aci

import (
	"context"

	"github.com/coder/websocket"
)

// replyWriter writes a session's replies, in order, on a goroutine of
// its own: the session reads and runs its next request while a reply (or
// a screencast frame ahead of it) is still on its way to a slow client,
// so a stream a client does not keep up with never holds its input up.
type replyWriter struct {
	ch   chan reply
	done chan struct{}
	err  error
}

type reply struct {
	typ   websocket.MessageType
	msg   []byte
	after func() // run once written (a screencast's start)
}

// maxQueuedReplies bounds the replies waiting: a client that sends this
// many requests without reading any reply waits to send more.
const maxQueuedReplies = 256

// startReplies starts the writer; a failed write cancels the session.
func startReplies(ctx context.Context, c *websocket.Conn, cancel context.CancelFunc) *replyWriter {
	w := &replyWriter{ch: make(chan reply, maxQueuedReplies), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for r := range w.ch {
			if err := c.Write(ctx, r.typ, r.msg); err != nil {
				w.err = err
				cancel()
				return
			}
			if r.after != nil {
				r.after()
			}
		}
	}()
	return w
}

// send queues a reply; an error once the writer has failed.
func (w *replyWriter) send(r reply) error {
	select {
	case w.ch <- r:
		return nil
	case <-w.done:
		return w.err
	}
}

// close writes what is queued and stops the writer.
func (w *replyWriter) close() {
	close(w.ch)
	<-w.done
}
