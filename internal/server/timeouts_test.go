package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// serveTCP serves ts's daemon behind the token on a loopback port with t,
// as Run serves its TCP listener.
func serveTCP(tb testing.TB, ts *testServer, t Timeouts) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := NewHTTPServer(ts.s.TokenHandler("s3cret"), t)
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedWithin says whether the server closes conn within d, reading and
// discarding what it sends.
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	ne, timeout := err.(net.Error)
	return !(timeout && ne.Timeout())
}

func TestTCPTimeouts(t *testing.T) {
	ts := newTestServer(t, Config{})
	short := Timeouts{Header: 300 * time.Millisecond, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond, Idle: 300 * time.Millisecond}
	addr := serveTCP(t, ts, short)

	// A client that sends part of a body and stalls is cut off.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nContent-Length: 100\r\n\r\n{\"ho")
	if !closedWithin(conn, 10*time.Second) {
		t.Fatal("a client stalling in its body keeps the connection: no read timeout")
	}

	// An idle kept-alive connection is closed.
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	io.WriteString(conn2, "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n")
	br := bufio.NewReader(conn2)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	io.Copy(io.Discard, resp.Body)
	if !closedWithin(conn2, 10*time.Second) {
		t.Fatal("an idle connection is kept: no idle timeout")
	}

	// Work that takes longer than the timeouts is not cut short by them.
	c := client.NewTCP(addr, "s3cret")
	ctx := context.Background()
	sb, err := c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo slept"}})
	if err != nil || string(res.Stdout) != "slept\n" {
		t.Fatalf("an exec longer than the timeouts: %v %+v", err, res)
	}
	st, err := c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo streamed"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, st.Stderr)
	out, _ := io.ReadAll(st.Stdout)
	if exit, err := st.Wait(); err != nil || exit.ExitCode != 0 || string(out) != "streamed\n" {
		t.Fatalf("a stream longer than the timeouts: %v %+v %q", err, exit, out)
	}
}

// TestUnauthorizedCloses: a 401 closes the connection.
func TestUnauthorizedCloses(t *testing.T) {
	ts := newTestServer(t, Config{})
	addr := serveTCP(t, ts, TCPTimeouts)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 || !resp.Close { // Close: the answer said "Connection: close"
		t.Fatalf("401 answer: status %d, close %v", resp.StatusCode, resp.Close)
	}
	if !closedWithin(conn, 10*time.Second) {
		t.Fatal("the connection stays open after a 401")
	}
}
