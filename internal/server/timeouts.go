package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// Timeouts bound how long a TCP client may take: a peer on the network
// that sends slowly, reads slowly or idles must not hold a connection (and
// its goroutine) forever. The unix socket, reachable only by local users
// with the socket's file mode, has none but the header timeout.
type Timeouts struct {
	// Header bounds reading a request's headers.
	Header time.Duration
	// Read bounds reading a whole request; routes that take long bodies
	// (file uploads) extend it as the body arrives.
	Read time.Duration
	// Write bounds writing an answer; routes that answer slowly (exec,
	// downloads) extend it as they make progress. A WebSocket exec, whose
	// connection is taken over, is not bound by it.
	Write time.Duration
	// Idle bounds a kept-alive connection between requests.
	Idle time.Duration
}

// TCPTimeouts are the TCP listener's.
var TCPTimeouts = Timeouts{Header: 30 * time.Second, Read: 2 * time.Minute, Write: 2 * time.Minute, Idle: 2 * time.Minute}

// unixTimeouts are the unix socket's.
var unixTimeouts = Timeouts{Header: 30 * time.Second}

// ioTimeoutsKey carries a connection's Timeouts into its requests.
type ioTimeoutsKey struct{}

// NewHTTPServer returns the http.Server serving h with t.
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: t.Header, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, ioTimeoutsKey{}, t)
		},
	}
}

func timeoutsOf(r *http.Request) Timeouts {
	t, _ := r.Context().Value(ioTimeoutsKey{}).(Timeouts)
	return t
}

// holdDeadlines lifts the deadlines of r's connection while the handler
// works before answering (a command runs, a body streams in): past the
// read deadline the server would take the client for gone and cancel the
// request's context, past the write deadline the answer would fail. The
// returned func sets a fresh write deadline for the answer.
func holdDeadlines(w http.ResponseWriter, r *http.Request) (answer func()) {
	t := timeoutsOf(r)
	rc := http.NewResponseController(w)
	if t.Read > 0 {
		// A body still to come gets a moving deadline (progressRequestBody).
		rc.SetReadDeadline(time.Time{})
	}
	if t.Write <= 0 {
		return func() {}
	}
	rc.SetWriteDeadline(time.Time{})
	return func() { rc.SetWriteDeadline(time.Now().Add(t.Write)) }
}

// progressWriter is an answer body whose write deadline moves with every
// write: a client that keeps reading gets a large download, one that stops
// reading is cut off after the write timeout.
type progressWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

// progressBody returns w with a moving write deadline (w itself when r's
// connection has no write timeout).
func progressBody(w http.ResponseWriter, r *http.Request) io.Writer {
	t := timeoutsOf(r)
	if t.Write <= 0 {
		return w
	}
	rc := http.NewResponseController(w)
	if t.Read > 0 {
		rc.SetReadDeadline(time.Time{}) // see holdDeadlines
	}
	return &progressWriter{w: w, rc: rc, d: t.Write}
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.rc.SetWriteDeadline(time.Now().Add(p.d))
	return p.w.Write(b)
}

// progressReader is a request body whose read deadline moves with every
// read, as progressWriter's write deadline does.
type progressReader struct {
	r  io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

// progressRequestBody returns r's body with a moving read deadline (the
// body itself when r's connection has no read timeout).
func progressRequestBody(w http.ResponseWriter, r *http.Request) io.ReadCloser {
	t := timeoutsOf(r)
	if t.Read <= 0 {
		return r.Body
	}
	return &progressReader{r: r.Body, rc: http.NewResponseController(w), d: t.Read}
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.rc.SetReadDeadline(time.Now().Add(p.d))
	return p.r.Read(b)
}

func (p *progressReader) Close() error { return p.r.Close() }
