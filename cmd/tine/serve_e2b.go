package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/e2b"
	"github.com/tine-run/tine/internal/server"
)

// e2bFlags are serve's flags for the E2B-compatible listener.
type e2bFlags struct {
	addr, key, domain string
}

// startE2B listens on --e2b and serves E2B's API there, as a client of the
// daemon's own socket; the returned stop ends it (and its sandboxes).
func startE2B(f serveFlags, defaultMemory int64, log *slog.Logger) (stop func(), err error) {
	key := f.e2b.key
	if key == "" {
		path := filepath.Join(f.dataDir, "e2b-key")
		if key, err = e2b.LoadOrCreateKey(path); err != nil {
			return nil, err
		}
		log.Info("E2B clients need the API key in " + path + " (E2B_API_KEY)")
	} else if !e2b.KeyPattern.MatchString(key) {
		return nil, usageError{fmt.Sprintf("invalid --e2b-key %q: want e2b_ followed by lowercase hex digits (the Python SDK checks the shape)", key)}
	}
	c := client.NewUnix(f.socket)
	srv, err := e2b.New(e2b.Config{
		Client: c, Keys: []string{key}, Domain: f.e2b.domain,
		DefaultMemoryBytes: defaultMemory, Logger: log, MCP: newMCPHandler(c),
		StateFile: filepath.Join(f.dataDir, "e2b-paused.json"),
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.e2b.addr)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("listen on %s for E2B: %w", f.e2b.addr, err)
	}
	// No read or write deadline: command and watch streams last as long as
	// the SDK asks (Connect-Timeout-Ms).
	hs := server.NewHTTPServer(srv, server.Timeouts{Header: 30 * time.Second, Idle: 2 * time.Minute})
	go hs.Serve(ln)
	log.Info("listening", "e2b", ln.Addr().String(), "hint", "E2B_API_URL=E2B_SANDBOX_URL=http://"+ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		srv.Close()
	}, nil
}
