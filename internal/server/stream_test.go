package server

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
)

// execsAre waits until sandbox id runs n commands.
func (ts *testServer) execsAre(t *testing.T, id string, n int, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		sb, err := ts.c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Execs == n {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestStreamClientLeavesUnreadStdin: a client that sends more stdin than a
// pipe holds to a command that never reads it, then leaves, has its
// command killed (the read loop must not hang writing stdin).
func TestStreamClientLeavesUnreadStdin(t *testing.T) {
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if !ts.execsAre(t, sb.ID, 1, 10*time.Second) {
		t.Fatal("the command never started")
	}
	if _, err := st.Stdin.Write(bytes.Repeat([]byte("x"), 256<<10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the daemon take it in
	st.Close()
	if !ts.execsAre(t, sb.ID, 0, 10*time.Second) {
		t.Fatal("the command of a client that left with unread stdin still runs")
	}
}

// TestStreamClientStopsReading: a client that stops reading output loses
// its stream after the write timeout, and its command is killed.
func TestStreamClientStopsReading(t *testing.T) {
	ts := newTestServer(t, Config{StreamWriteTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.ExecStream(ctx, sb.ID, &api.ExecRequest{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !ts.execsAre(t, sb.ID, 1, 10*time.Second) {
		t.Fatal("the command never started")
	}
	// Nothing reads st.Stdout: the client's reader stalls, then the socket.
	if !ts.execsAre(t, sb.ID, 0, 20*time.Second) {
		t.Fatal("a client that stopped reading holds its command and handler")
	}
}
