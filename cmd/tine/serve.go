package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/zygote"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/kernel/sysmon"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/server"
)

type serveFlags struct {
	socket, listen, tokenFile, dataDir string
	stateDir, osworldHost, registries  string
	maxSandboxes, pool, forkSpares     int
	noForkAhead                        bool
	forkAheadDelay                     time.Duration
	poolPreload                        []string
	maxMemory, defaultMemory           string
	defaultPids                        int64
	logJSON, debug                     bool
	e2b                                e2bFlags
	netName, netPool, netUpstream      string
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
--default-memory; the children a forkable session keeps made ahead for its
live forks, --fork-spares each, count too). Past it, creates fail with 429 and
Retry-After. Running as root, a sandbox or run that asks for no memory or pids limit gets
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
or another tine uses it) when the state directory shares the root filesystem, since overlayfs
cannot stack a layer that lies inside the host's root over it.

With --e2b ADDR it also speaks E2B's API on that TCP address (docs/e2b.md):
the E2B SDKs work unchanged with E2B_API_URL=E2B_SANDBOX_URL=http://ADDR and
E2B_API_KEY set to the key in <data-dir>/e2b-key (generated, mode 0600) or
given with --e2b-key; MCP clients connect to http://ADDR/v1/mcp with the same
key. Paused E2B sandboxes are kept in <data-dir>/e2b-paused.json (mode 0600)
and resumed by the next daemon; running ones end with it.

Egress sandboxes (tine create --network egress) get a veth pair to the
host, an address from --net-pool, NAT, and tine's resolver and proxy on the
pool's first address; the daemon makes its nftables table inet tine_NAME and
link NAME-gw (--net-name) at the first one and turns on net.ipv4.ip_forward
(docs/network.md). Daemons on one host need distinct --net-name and
--net-pool.

Sandboxes die with the daemon. At start it reaps what a killed daemon left
(cgroups; its nftables table and gateway link, for the same --net-name;
processes, mounts and veths die with their sandboxes); it does not re-adopt
them. SIGINT or SIGTERM destroys every sandbox and exits.`,
		Example: `  tine serve
  tine serve --socket /tmp/tine.sock --max-sandboxes 20 --max-memory 8g
  tine serve --listen 127.0.0.1:7070 --log-json
  tine serve --e2b 127.0.0.1:3000`,
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
	fl.IntVar(&f.forkSpares, "fork-spares", 1, "children each forkable session keeps made ahead for its live forks; each counts against --max-sandboxes (0: none)")
	fl.BoolVar(&f.noForkAhead, "no-fork-ahead", false, "do not fork a forkable session's interpreter ahead of its next live fork while it idles (the copy is killed when a cell starts)")
	fl.DurationVar(&f.forkAheadDelay, "fork-ahead-delay", server.DefaultForkAheadDelay, "how long a forkable session idles after a cell, or after its fork's spare is made again, before its interpreter forks ahead; also the longest a fork's spare refill waits for a child's first cell (0: at once)")
	fl.StringVar(&f.defaultMemory, "default-memory", "1g", "memory limit of a sandbox or run that asks for none (as root; rootless there is none), and what it counts against --max-memory")
	fl.Int64Var(&f.defaultPids, "default-pids", sandbox.DefaultPids, "process and thread limit of a sandbox or run that asks for none (as root; rootless there is none)")
	fl.StringVar(&f.osworldHost, "osworld-host", "127.0.0.1", "address the OSWorld APIs of desktops made with --osworld are published on (a port each)")
	fl.StringVar(&f.e2b.addr, "e2b", "", "also serve E2B's API (and MCP at /v1/mcp) on this TCP address, e.g. 127.0.0.1:3000")
	fl.StringVar(&f.e2b.key, "e2b-key", "", "the E2B API key, e2b_<hex> (default: <data-dir>/e2b-key, generated)")
	fl.StringVar(&f.e2b.domain, "e2b-domain", "", "domain the E2B API returns and routes {port}-{id}.<domain> Hosts for (wildcard DNS and TLS in front)")
	fl.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	fl.BoolVar(&f.debug, "debug", false, "log every request")
	fl.StringVar(&f.netName, "net-name", network.DefaultName, "names what egress networking makes on the host (nftables table inet tine_NAME, links NAME-gw and NAME-N): 1 to 6 lower-case letters or digits, distinct per daemon")
	fl.StringVar(&f.netPool, "net-pool", network.DefaultPool, "IPv4 range of egress sandboxes' addresses (its first address is their gateway and resolver); distinct per daemon")
	fl.StringVar(&f.netUpstream, "net-upstream", "", "DNS server (HOST:PORT) tine's resolver asks for the names sandboxes may resolve (default: the host's first nameserver)")
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
	// A daemon wakes from I/O on every call, which keeps the Go runtime's
	// sysmon in its 20 µs rounds: on a VM, ≈ 40% of the daemon's CPU under
	// warm calls (docs/decisions/0007-warm-functions.md).
	if tid, err := sysmon.Relax(sysmon.Slack); err != nil {
		log.Debug("sysmon keeps its default timer slack", "err", err)
	} else {
		log.Debug("sysmon's timer slack widened", "thread", tid, "slack", sysmon.Slack)
	}

	if f.maxSandboxes <= 0 {
		return usageError{fmt.Sprintf("invalid --max-sandboxes %d: want a positive whole number", f.maxSandboxes)}
	}
	if f.pool < 0 {
		return usageError{fmt.Sprintf("invalid --pool %d: want 0 or more", f.pool)}
	}
	if net.ParseIP(f.osworldHost) == nil {
		return usageError{fmt.Sprintf("invalid --osworld-host %q: want an IP address such as 127.0.0.1", f.osworldHost)}
	}
	cfg := server.Config{Logger: log, MaxSandboxes: f.maxSandboxes, PoolSize: f.pool, StateDir: f.stateDir, OSWorldHost: f.osworldHost, ForkSpares: f.forkSpares, NoForkAhead: f.noForkAhead, ForkAheadDelay: f.forkAheadDelay}
	if f.forkAheadDelay <= 0 {
		cfg.ForkAheadDelay = -1 // at once (the Config's 0 is the default)
	}
	if f.forkSpares <= 0 {
		cfg.ForkSpares = -1 // none (the Config's 0 is the default)
	}
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
	pool, err := netip.ParsePrefix(f.netPool)
	if err != nil {
		return usageError{fmt.Sprintf("invalid --net-pool %q: want an IPv4 range such as %s", f.netPool, network.DefaultPool)}
	}
	if cfg.Network, err = network.NewManager(network.Config{Name: f.netName, Pool: pool, Upstream: f.netUpstream, Logger: log}); err != nil {
		return usageError{err.Error()}
	}
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
	if f.e2b.addr == "" && (f.e2b.key != "" || f.e2b.domain != "") {
		return usageError{"--e2b-key and --e2b-domain are for --e2b ADDR"}
	}
	fnImages, closeFnImages := functionImages(f.stateDir, cfg.Registries, cfg.Network)
	defer closeFnImages()
	fns, err := zygote.NewManager(zygote.Config{Dir: f.dataDir, PoolPreload: f.poolPreload, Network: cfg.Network, Images: fnImages})
	if err != nil {
		return err
	}
	cfg.Functions = fns
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.e2b.addr != "" {
		stopE2B, err := startE2B(f, cfg.DefaultMemoryBytes, log)
		if err != nil {
			fns.Close()
			return err
		}
		// The E2B layer stops first, while the daemon still answers, so it
		// can delete its sandboxes' pause snapshots.
		e2bCtx := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-e2bCtx.Done()
			stopE2B()
			cancel()
		}()
	}
	return server.Run(ctx, cfg, l)
}
