package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
)

// The routes of sessions over the fake runtime (the interpreter runs on
// the host): what the HTTP layer adds, not the sandbox's walls, which
// internal/session and test/api test against real sandboxes.
func TestSessionRoutes(t *testing.T) {
	require.Binary(t, "python3")
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ts.c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := s.Run(ctx, "x = 41"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("first cell: %+v %v", ex, err)
	}
	ex, err := s.Run(ctx, "x + 1")
	if err != nil || ex.Text() != "42" || ex.ExecutionCount != 2 {
		t.Fatalf("second cell: %+v %v", ex, err)
	}
	// A syntax error is the cell's result, not the call's failure.
	if ex, err = s.Run(ctx, "def ("); err != nil || ex.Status != api.ExecError || ex.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v %v", ex, err)
	}
	var events []string
	ex, err = s.RunStream(ctx, &api.CellRequest{Code: "print('hi')\nx"}, func(e api.SessionEvent) {
		if len(events) == 0 || events[len(events)-1] != string(e.Type) { // output may come in chunks
			events = append(events, string(e.Type))
		}
	})
	if err != nil || ex.Text() != "41" || ex.Stdout != "" || strings.Join(events, ",") != "stdout,result" {
		t.Fatalf("stream: %+v %v %v", ex, events, err)
	}
	list, err := ts.c.Sessions(ctx, sb.ID)
	if err != nil || len(list) != 1 || list[0].ID != s.ID || list[0].ExecutionCount != 4 || list[0].State != api.SessionIdle {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if ex, err = s.Run(ctx, "'x' in globals()"); err != nil || ex.Text() != "False" {
		t.Fatalf("after restart: %+v %v", ex, err)
	}

	// Bad input.
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/sandboxes/" + sb.ID + "/sessions/snope/run", `{"code":"1"}`, http.StatusNotFound},
		{"GET", "/v1/sandboxes/" + sb.ID + "/sessions/snope", "", http.StatusNotFound},
		{"DELETE", "/v1/sandboxes/" + sb.ID + "/sessions/snope", "", http.StatusNotFound},
		{"POST", "/v1/sandboxes/nope/sessions", `{}`, http.StatusNotFound},
		{"POST", "/v1/sandboxes/" + sb.ID + "/sessions", `{"language":"ruby"}`, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/" + sb.ID + "/sessions", `{"workdir":"rel"}`, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/" + sb.ID + "/sessions/" + s.ID + "/run", `{"code":"1","timeout_ms":-1}`, http.StatusBadRequest},
		{"POST", "/v1/sandboxes/" + sb.ID + "/sessions/" + s.ID + "/run", `{"cod":"1"}`, http.StatusBadRequest},
	} {
		resp, e := ts.raw(t, c.method, c.path, c.body)
		if resp.StatusCode != c.status || e.Message == "" {
			t.Errorf("%s %s %s: %d %+v, want %d", c.method, c.path, c.body, resp.StatusCode, e, c.status)
		}
	}
	// The session goes with its sandbox.
	if err := ts.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, "1"); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("run in a deleted sandbox: %v", err)
	}
}

// The live fork's preflight, in its order; past it, this stand-in
// runtime answers 501 (test/api forks for real).
func TestSessionForkPreflight(t *testing.T) {
	require.Binary(t, "python3")
	ts := newTestServer(t, Config{MaxSandboxes: 3})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ts.c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, e := ts.raw(t, "POST", "/v1/sandboxes/"+sb.ID+"/sessions/"+plain.ID+"/fork", `{"count": 1}`); resp.StatusCode != http.StatusConflict || !strings.Contains(e.Message, "forkable") {
		t.Errorf("fork of a session not created forkable: %d %q", resp.StatusCode, e.Message)
	}
	s, err := ts.c.CreateSession(ctx, sb.ID, &api.SessionSpec{Forkable: true})
	if err != nil {
		t.Fatal(err)
	}
	fork := func(body string) (int, api.Error) {
		resp, e := ts.raw(t, "POST", "/v1/sandboxes/"+sb.ID+"/sessions/"+s.ID+"/fork", body)
		return resp.StatusCode, e
	}
	for _, c := range []struct {
		body, want string
		status     int
	}{
		{`{"count": 0}`, "count 0", http.StatusBadRequest},
		{`{"count": 257}`, "count 257", http.StatusBadRequest},
		{`{"count": 3}`, "capacity for 3 sandboxes", http.StatusTooManyRequests},
		{`{"count": 2}`, "cannot be forked live", http.StatusNotImplemented},
	} {
		if status, e := fork(c.body); status != c.status || !strings.Contains(e.Message, c.want) {
			t.Errorf("fork %s: %d %q, want %d with %q", c.body, status, e.Message, c.status, c.want)
		}
	}
	if resp, _ := ts.raw(t, "POST", "/v1/sandboxes/"+sb.ID+"/sessions/snope/fork", `{"count":1}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("fork of an unknown session: %d", resp.StatusCode)
	}
	// What a copy cannot carry is named.
	if ex, err := s.Run(ctx, "import threading, socket\nev = threading.Event(); th = threading.Thread(target=ev.wait); th.start()\nsk = socket.socket()"); err != nil || ex.Status != api.ExecOK {
		t.Fatalf("cell: %+v %v", ex, err)
	}
	if status, e := fork(`{"count": 1}`); status != http.StatusConflict || !strings.Contains(e.Message, "thread") || !strings.Contains(e.Message, "socket") {
		t.Errorf("fork of a session holding a thread and a socket: %d %q", status, e.Message)
	}
	s.Run(ctx, "ev.set(); th.join(); sk.close()")
	// A running cell: 409 at once, not queued behind it.
	go s.Run(ctx, "import time\nwhile not __import__('os').path.exists('"+t.TempDir()+"/never'): time.sleep(0.01)")
	for {
		if info, _ := s.Info(ctx); info.State == api.SessionBusy {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if status, e := fork(`{"count": 1}`); status != http.StatusConflict || !strings.Contains(e.Message, "running a cell") {
		t.Errorf("fork while a cell runs: %d %q", status, e.Message)
	}
	s.Interrupt(ctx)
}

// A stream's client that goes away interrupts its cell; the session goes on.
func TestSessionStreamClientLeaves(t *testing.T) {
	require.Binary(t, "python3")
	ts := newTestServer(t, Config{})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ts.c.CreateSession(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Run(ctx, "kept = 'yes'")
	sctx, cancel := context.WithCancel(ctx)
	_, err = s.RunStream(sctx, &api.CellRequest{Code: "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)"}, func(e api.SessionEvent) {
		if e.Type == api.EventStdout {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("the stream ended normally after its client left")
	}
	// The next cell queues behind the interrupted one, then answers.
	ex, err := s.Run(ctx, "kept")
	if err != nil || ex.Text() != "'yes'" || ex.ExecutionCount != 3 {
		t.Fatalf("after the client left: %+v %v", ex, err)
	}
}
