package main

import (
	"context"
	"fmt"
	"github.com/tine-run/tine/internal/zygote"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/server"
)

type serveFlags struct {
	socket, listen, tokenFile, dataDir string
	stateDir, registries               string
	maxSandboxes, pool                 int
	poolPreload                        []string
	maxMemory, defaultMemory           string
	defaultPids                        int64
	logJSON, debug                     bool
}

func newServeCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the daemon: live sandboxes behind an HTTP API",
		Long: `serve runs tine's daemon. It serves the HTTP API of api/openapi.yaml (see
docs/api.md) on a unix socket (mode 0660) and, with --listen, on TCP, where
every request needs "Authorization: Bearer <token>". The token is read from
--token-file, or generated once into <data-dir>/token (mode 0600; the default
/run/tine is hidden from sandboxes, which mount their own /run; a --data-dir
or --token-file elsewhere on the host's root is readable inside sandboxes that
see that part of it: every one with host_view full, and with the default os
view those where it lies in /usr, /etc (world-readable), /opt or an allowed
/var/lib directory).

Clients (tine ps, create, exec, inspect, rm; the Go package client) find the
daemon through --socket or TINE_SOCKET. tine run hands its runs to the daemon
when one answers there, with its own stdio; --pool sandboxes are kept ready
for them.

The host budget: at most --max-sandboxes live sandboxes whose memory limits
add up to at most --max-memory (a sandbox without a limit gets and counts
--default-memory). Past it, creates fail with 429 and Retry-After. Running as
root, a sandbox or run that asks for no memory or pids limit gets
--default-memory and --default-pids. At start the daemon raises its open-files
limit to cover the budget (8 descriptors a sandbox, 1024 more), which past
the hard limit needs CAP_SYS_RESOURCE, and logs a warning when it cannot.

Desktops run the guest build next to this binary (tine-guest, which make
build writes with libjpeg-turbo linked in) when there is one, else this
binary (its JPEG is then image/jpeg, several times slower).

Snapshots (tine snapshot, tine fork) live under --state-dir (default
/var/lib/tine, hidden from sandboxes) and survive restarts; their layers
are kept on a filesystem of their own (a sparse ext4 image,
<state-dir>/store.img, loop-mounted on <state-dir>/store while the daemon
runs) when the state directory shares the root filesystem, since overlayfs
cannot stack a layer that lies inside the host's root over it.

Sandboxes die with the daemon. At start it reaps what a killed daemon left
(cgroups; processes and mounts die with their sandboxes' PID 1s); it does not
re-adopt them. SIGINT or SIGTERM destroys every sandbox and exits.`,
		Example: `  tine serve
  tine serve --socket /tmp/tine.sock --max-sandboxes 20 --max-memory 8g
  tine serve --listen 127.0.0.1:7070 --log-json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("serve takes no arguments, got %q", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(f) },
	}
	fl := cmd.Flags()
	defaultSocket := client.DefaultSocket
	if env := os.Getenv("TINE_SOCKET"); env != "" {
		defaultSocket = env
	}
	fl.StringVar(&f.socket, "socket", defaultSocket, "unix socket to listen on (default $TINE_SOCKET, or "+client.DefaultSocket+")")
	fl.StringVar(&f.listen, "listen", "", "also listen on this TCP address, e.g. 127.0.0.1:7070 (needs the token)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token for --listen (default: <data-dir>/token, generated)")
	fl.StringSliceVar(&f.poolPreload, "pool-preload", nil, "modules the runtime pool's Python zygote imports once, e.g. json,re,decimal (scripts registered with tine script put run on it)")
	fl.StringVar(&f.dataDir, "data-dir", "/run/tine", "directory for the daemon's token and registered scripts; keep it off the parts of the host's root that sandboxes see (read-only): sandboxes mount their own /run")
	fl.StringVar(&f.stateDir, "state-dir", "/var/lib/tine", "directory for what outlives the daemon: snapshots and their layers (one daemon per directory)")
	fl.StringVar(&f.registries, "registries", "", "registries file for image pulls: mirrors and plain-HTTP registries (default "+image.DefaultRegistriesFile+" when it exists)")
	fl.IntVar(&f.maxSandboxes, "max-sandboxes", server.DefaultMaxSandboxes, "most live sandboxes at once")
	fl.StringVar(&f.maxMemory, "max-memory", "", "most memory the live sandboxes' limits may add up to, e.g. 16g (default: the host's memory)")
	fl.IntVar(&f.pool, "pool", 2, "sandboxes kept ready for tine run handed to the daemon (0: none)")
	fl.StringVar(&f.defaultMemory, "default-memory", "1g", "memory limit of a sandbox or run that asks for none (as root; rootless there is none), and what it counts against --max-memory")
	fl.Int64Var(&f.defaultPids, "default-pids", sandbox.DefaultPids, "process and thread limit of a sandbox or run that asks for none (as root; rootless there is none)")
	fl.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	fl.BoolVar(&f.debug, "debug", false, "log every request")
	return cmd
}

func runServe(f serveFlags) error {
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if f.logJSON {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)

	if f.maxSandboxes <= 0 {
		return usageError{fmt.Sprintf("invalid --max-sandboxes %d: want a positive whole number", f.maxSandboxes)}
	}
	if f.pool < 0 {
		return usageError{fmt.Sprintf("invalid --pool %d: want 0 or more", f.pool)}
	}
	cfg := server.Config{Logger: log, MaxSandboxes: f.maxSandboxes, PoolSize: f.pool, StateDir: f.stateDir}
	var err error
	if cfg.Registries, err = image.LoadRegistries(f.registries); err != nil {
		return usageError{err.Error()}
	}
	if f.maxMemory != "" {
		if cfg.MaxMemoryBytes, err = parseSize("max-memory", f.maxMemory); err != nil {
			return err
		}
	}
	if cfg.DefaultMemoryBytes, err = parseSize("default-memory", f.defaultMemory); err != nil {
		return err
	}
	if f.defaultPids <= 0 {
		return usageError{fmt.Sprintf("invalid --default-pids %d: want a positive whole number", f.defaultPids)}
	}
	cfg.DefaultPids = f.defaultPids
	l := server.Listen{Socket: f.socket, SocketMode: 0o660, TCP: f.listen}
	if f.listen != "" {
		if f.tokenFile != "" {
			l.Token, err = server.LoadToken(f.tokenFile)
		} else {
			path := filepath.Join(f.dataDir, "token")
			l.Token, err = server.LoadOrCreateToken(path)
			log.Info("TCP clients need the token in " + path)
		}
		if err != nil {
			return err
		}
	} else if f.tokenFile != "" {
		return usageError{"--token-file is for --listen; the unix socket is guarded by its file mode"}
	}
	fns, err := zygote.NewManager(zygote.Config{Dir: f.dataDir, PoolPreload: f.poolPreload, Images: functionImages(f.stateDir, cfg.Registries)})
	if err != nil {
		return err
	}
	cfg.Functions = fns
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return server.Run(ctx, cfg, l)
}
