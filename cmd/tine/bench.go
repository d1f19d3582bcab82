package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/bench"
	"github.com/tine-run/tine/internal/runcli"
)

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure tine against its peers on this host",
		Long: `bench runs a benchmark suite on this host. Variants of one task run
interleaved in the same run and are compared by the ratio of their medians;
figures are p50, p90 and p99 with n, after discarded warm-ups, and come with
the host's fingerprint.

Exit status: 0 all measured and every target met; 1 a variant failed or a
target was missed; 2 the host was loaded or CPU-throttled during the run, so
the affected figures are NOT MEASURED (run again on a quiet host).`,
		Args: noArgs,
	}
	cmd.AddCommand(
		newSuiteCommand("cold", "Time a one-shot `tine run` of /bin/true and python3 against bare exec, bwrap and unshare",
			`cold starts /bin/true and /usr/bin/python3 -c pass, each bare (the floor),
under tine run --memory 512m --pids 256 --cpus 1 in-process, the same with
--userns, the same handed to a tine serve started for the run (with a pool of
ready sandboxes), under bwrap
and under unshare, interleaved, and compares each with bwrap. The targets:
`+bench.ColdTargets[0].Text+`; `+bench.ColdTargets[1].Text+`; `+bench.ColdTargets[2].Text+`; `+bench.ColdTargets[3].Text+`.
A peer that is not installed is reported as not available.`,
			func(self string) ([]bench.Group, func(), error) {
				d, err := bench.StartDaemon(self, 2)
				if err != nil {
					return bench.ColdGroups(self, "", "not available: "+err.Error()), func() {}, nil
				}
				return bench.ColdGroups(self, d.Socket, ""), d.Stop, nil
			}),
		newSuiteCommand("oci", "Time ctr run --rm of a busybox image with tine-runc against Debian's runc, under containerd",
			`oci starts a containerd of its own (Debian's package; root, state and socket
in a temporary directory), imports a busybox image it builds, and times ctr
run --rm IMAGE true with the runc shim's runtime binary set to Debian's runc
and to tine-runc, interleaved. The target: `+bench.OCITarget.Text+`.`,
			func(self string) ([]bench.Group, func(), error) { return bench.OCIGroups(self) }),
		newSuiteCommand("api", "Time the daemon's API: create a live sandbox, exec /bin/true, put and get 1 MiB",
			`api starts a tine serve for the run and measures, through the Go client on
its unix socket: create→ready of a live sandbox, the round trip of an exec of
/bin/true (JSON and WebSocket), and a 1 MiB file put and get, each next to a
floor measured in the same run without tine (fork+exec of /bin/true; a local
write and read of 1 MiB). The target: `+bench.APITarget.Text+`.`,
			func(self string) ([]bench.Group, func(), error) {
				d, err := bench.StartDaemon(self, 0)
				if err != nil {
					return nil, nil, err
				}
				groups, cleanup, err := bench.APIGroups(d)
				if err != nil {
					d.Stop()
					return nil, nil, err
				}
				return groups, func() { cleanup(); d.Stop() }, nil
			}),
		newSuiteCommand("net", "Time egress networking: create→ready, TCP connect, bulk throughput and DNS against the host's own paths",
			`net makes test hosts for the run (network namespaces on this machine with
a DNS zone and a discard server; nothing leaves the host), starts a tine
serve whose egress network has a name and pool of its own, and measures,
interleaved: create→ready of an egress sandbox (allowing one name) vs a
loopback one; a TCP connect and a 64 MiB upload to the test host from the
egress sandbox's network namespace (veth, its nftables chain, NAT) vs from
the host's own; an A query through tine's resolver from the sandbox vs the
zone's server asked directly. Targets: `+bench.NetTargets.Create.Text+`;
`+bench.NetTargets.Bulk.Text+`.`,
			func(self string) ([]bench.Group, func(), error) {
				nb, err := bench.StartNetBench(self)
				if err != nil {
					return nil, nil, err
				}
				return nb.Groups(), nb.Close, nil
			}),
		newSuiteCommand("embed", "Time a 16-import Python script as a warm function, as tine run and under bwrap",
			`embed starts a tine serve for the run, registers a function whose entry
imports 16 stdlib modules, and times, interleaved: a call of it through the
Go client, tine run /usr/bin/python3 of the same script, and bwrap + python3
of it. The target: the warm call's p50 at most 1/20 of tine run's.`,
			func(self string) ([]bench.Group, func(), error) {
				d, err := bench.StartDaemon(self, 0)
				if err != nil {
					return nil, nil, err
				}
				groups, cleanup, err := bench.EmbedGroups(context.Background(), d, self)
				if err != nil {
					d.Stop()
					return nil, nil, err
				}
				return groups, func() { cleanup(); d.Stop() }, nil
			}),
		newSuiteCommand("session", "Time code-interpreter sessions: a cell's round trip, and a session's state in a new sandbox",
			`session starts a tine serve for the run and measures, through the Go client:
the round trip of a cell 1 + 1 in a session (JSON and WebSocket) next to the
exec of /bin/true in the same sandbox (the floor); and getting the state of
a session that imported the 16 modules of bench warm and holds 50 MiB of
data into a new sandbox until its first cell answers: a new sandbox and
session replaying the cells (what a user does without fork), next to the live
fork of a forkable session holding that state into 1, 8 and 32 children
(timed until the first child answers), and the memory-tier fork (snapshot,
fork, until the restored process answers) of a sandbox whose python3, started
by an exec, holds the same state (when criu is available). Then it forks the
session into 8 more children and reads the PSS of every interpreter before
and after (the slope per child), and again once each child has read its
50 MiB. The targets: `+bench.SessionTarget.Text+`; `+bench.LiveForkTarget.Text+`;
`+bench.LiveForkMemoryTarget.Text+`; PSS per untouched child at most 2 MiB.`,
			func(self string) ([]bench.Group, func(), error) {
				d, err := bench.StartDaemon(self, 0, "--max-sandboxes", "80", "--max-memory", "1000t")
				if err != nil {
					return nil, nil, err
				}
				groups, cleanup, err := bench.SessionGroups(d)
				if err != nil {
					d.Stop()
					return nil, nil, err
				}
				return groups, func() { cleanup(); d.Stop() }, nil
			}),
		newWarmSuiteCommand("warm", "Time the warm path: a 16-import Python function at a steady rate, next to the fork floor",
			`warm starts a tine serve for the run, registers a function whose entry imports
16 stdlib modules (json, re, ssl, decimal, datetime, hashlib, urllib.request,
base64, collections, itertools, functools, typing, dataclasses, pathlib, uuid,
random), and sends -n requests at --rate per second, open loop, each timed
from its scheduled start through the Go client, with the daemon's phase
breakdown. In the same run, a python3 with the same imports times
fork()+_exit()+waitpid() (the floor). Then --sparse calls, one every 200 ms
(a rare call, after the kernel's cgroup lock has gone quiet). Targets: p50
at most 4x the floor's, p99 at most 3x the p50 (NOT MEASURED when a request
hit its CPU quota) and at most 2x the floor's p99, the sparse p50 at most
1.3x the steady p50.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.Warm(ctx, d, o)
			}),
		newWarmSuiteCommand("pool", "Time the runtime pool and measure its memory per registered script",
			`pool registers --scripts distinct scripts with the runtime pool and calls each
once, reading the pool's PSS after an eighth of them and after all (the slope
per script); then it sends -n requests at --rate per second, alternating the
16-import warm function and a random script. Targets: pool p50 at most the
warm p50 + 0.5 ms; a slope under 16 KiB per script.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.Pool(ctx, d, o)
			}),
		newWarmSuiteCommand("desktop", "Time desktops: create→ready, action round trips, screenshots, step, memory per desktop",
			`desktop starts a tine serve for the run and measures through the Go client:
create→ready of a desktop with an xterm (p50 of 10); the round trip of a
click, a key and typing one character (-n/10 each, at least 50); PNG and JPEG
q80 screenshots at 1280x800 and at a 1024 long edge of a desktop full of
text, the four interleaved; step with 3, 5 and 8 actions against the same as
sequential calls; and the PSS of 1 to 8 desktops (the slope per desktop). Targets: create→ready
at most 400 ms, action p50 at most 0.5 ms, screenshot PNG at most 8 ms and
JPEG q80 at most 5 ms (libjpeg-turbo when the guest is make build's
bin/tine-guest, image/jpeg otherwise; the report says which), a 1024-edge
screenshot at most 0.8 times the native one's p50 (each format), at most
40 MiB PSS per desktop.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.Desktop(ctx, d, o)
			}),
		newWarmSuiteCommand("osworld", "Time OSWorld steps through a desktop's OSWorld facade against its python3 path and the ACI",
			`osworld starts a tine serve for the run and one 1280x800 desktop made with
osworld (two xterms of text). Interleaved, -n/20 rounds (at least 30): an
OSWorld step as OSWorld's client takes it — POST /execute with a pyautogui
click, then GET /screenshot, a fresh TCP connection each — through the
facade's fast path; every fifth round the same click run by python3 with
tine's pyautogui module; and the ACI step (click + PNG screenshot). With
--osworld-server DIR, every fifth round also takes the step through OSWorld's
own guest server, run from that checkout on the same desktop (its commands
import the desktop's own pyautogui if its python3 has one, else tine's
module; the report says which). Targets: /execute click p50 at most 2 ms,
/screenshot p50 at most 10 ms, the step at least 30x faster than OSWorld's
server's.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.OSWorld(ctx, d, o)
			}),
		newStreamCommand(),
		newCodecCommand(),
		newWarmSuiteCommand("fork", "Time snapshots and forks: pause, fork → usable, fan-out, memory per replica, against fresh sandboxes and replaying",
			`fork starts a tine serve for the run. A golden sandbox builds a 20 MiB
workspace of 400 files (and holds a 50 MiB Python process); the suite times
its fs snapshot (wall, and how long it was frozen), then, interleaved, a fresh
sandbox's create→ready, a fork of the snapshot until it answers with the
workspace's digest recomputed from its files, and a fresh sandbox replaying
the golden's steps; the wall time of forking N = 1, 4, 8, 16, 32 replicas
with every one verified; the PSS per added idle replica; and a desktop's
fork → usable (ACI: a window and a screenshot, and its marker file) against
a fresh desktop's. Then the memory tier of a code sandbox: a golden holding
the workspace and a process with 50 MiB of random state and a nonce; its
memory snapshot (wall, and how long it was paused), fork → usable (the
restored process answers with the golden's nonce and state digest; the
workspace is verified after), fan-out of N = 1 ... 32 with every restored
process answering, and the PSS per added replica; and the memory tier of a desktop
(an xterm with a directory listing): its pause, fork →
usable (the restored guest answers its ACI with the golden's frame hash), and
N=16 with every replica's frame and marker checked (pixel identity). Last,
fleet frame dedup: 16 replicas of a desktop, each round the same key typed
into all, then every screen observed (PNG), one after another and all at
once, with the SDKs' shared frame cache off (each session's own
if_none_match) and on, on a fleet showing one screen and on one where
every screen differs (--fleet-only runs only this); bytes per round. -n/150
rounds (at least 10). The targets: `+fmt.Sprintf("fs fork → usable p50 at most %gx a fresh sandbox's create→ready p50; memory fork → usable p50 at most %g ms, N=16 in %g ms, pause at most %g ms", bench.ForkTargets.FSForkOverCreate, bench.MemoryForkTargets.ForkP50Ms, bench.MemoryForkTargets.FanOut16Ms, bench.MemoryForkTargets.PauseMs)+`
(the issue sets the memory ones for desktops; the code sandbox is held to them too);
fleet dedup: `+fmt.Sprintf("at least %gx fewer bytes per round on identical screens, off/on at least %g where every screen differs", bench.FleetDedupTargets.Identical, bench.FleetDedupTargets.DistinctFloor)+`.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.Fork(ctx, d, o)
			}),
		newWarmSuiteCommand("load", "Find the highest sustained request rate through one function with no failure",
			`load drives the 16-import function with closed loops of 1, 2, 4, ... clients,
3 s each, until the rate stops growing or a request fails, and reports the
highest rate with none failed, next to the host's fork floor rate measured
in the same run (a python3 with the same imports forking children that exit
at once, one per CPU in flight, for 3 s): the ceiling of any design that
forks per request. The targets: at least 1000 requests/s, and at least half
the same-run fork floor rate.`,
			func(ctx context.Context, d *bench.Daemon, o bench.WarmOptions) (*bench.SeriesReport, error) {
				return bench.Load(ctx, d, 3*time.Second)
			}),
		newSuiteCommand("image", "Time runs from an OCI image: first run vs cached, image vs host root, the bytecode layer, the dependency environment",
			`image builds busybox and the host's python3.11 without its compiled files
into an image, serves it from a registry in this process, pulls it into a
fresh state directory (compiling its bytecode layer) and times, in-process,
interleaved within each group: the first run of the image (pull, unpack,
run; the image removed after each) against a cached run; tine run --image
of python3 -c pass against the host-root one-shot; the 16 stdlib imports of
the warm suite with and without the bytecode layer; and a run whose
--requirements environment is reused against one that builds a new one
(a wheel from a local directory). Targets: `+bench.ImageTargets.Cached.Text+`; `+bench.ImageTargets.Bytecode.Text+`.`,
			func(self string) ([]bench.Group, func(), error) {
				b, err := bench.SetUpImage(self)
				if err != nil {
					return nil, nil, err
				}
				return bench.ImageGroups(self, b), b.Close, nil
			}),
		newDensityCommand(),
		newSoakCommand(),
		newBenchAllCommand(),
		newE2BBenchCommand(),
	)
	return cmd
}

// newWarmSuiteCommand makes a warm-path suite's command: it starts a daemon
// (with the 16 imports preloaded in the runtime pool), runs, and prints.
func newWarmSuiteCommand(name, short, long string, run func(context.Context, *bench.Daemon, bench.WarmOptions) (*bench.SeriesReport, error)) *cobra.Command {
	var (
		opts              bench.WarmOptions
		jsonPath, plotDir string
	)
	cmd := &cobra.Command{
		Use:   name + " [-n N] [--rate R] [--json FILE] [--plot DIR]",
		Short: short,
		Long:  long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Requests < 1 || opts.Rate <= 0 || opts.Scripts < 8 || opts.Sparse < 0 {
				return usageError{"-n and --rate must be positive, --scripts at least 8, --sparse not negative"}
			}
			opts.Progress = cmd.ErrOrStderr()
			if _, err := os.Stat(filepath.Join(opts.PythonSDK, "tine", "__init__.py")); err != nil {
				opts.PythonSDK = ""
			} else if abs, err := filepath.Abs(opts.PythonSDK); err == nil {
				opts.PythonSDK = abs
			}
			serve := []string{"--pool-preload", strings.Join(bench.WarmImports, ",")}
			return runSeriesSuite(cmd, name, jsonPath, plotDir, serve, func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return run(ctx, d, opts)
			})
		},
	}
	cmd.Flags().IntVarP(&opts.Requests, "requests", "n", 3000, "measured requests")
	cmd.Flags().Float64Var(&opts.Rate, "rate", 250, "requests per second (open loop)")
	if name == "warm" {
		cmd.Flags().IntVar(&opts.Sparse, "sparse", 50, "sparse calls after the stream, one every 200 ms (0: none)")
	}
	if name == "osworld" {
		cmd.Flags().StringVar(&opts.OSWorldServer, "osworld-server", "", "a checkout of OSWorld (`DIR`): also run its guest server (DIR/desktop_env/server/main.py) on the same desktop as the peer; needs what its main.py imports in the desktop's root (Debian: python3-flask, -lxml, -xlib, -pil, -requests, -numpy, -pyatspi and, for newer checkouts, -pyperclip)")
	}
	if name == "fork" {
		cmd.Flags().BoolVar(&opts.FleetOnly, "fleet-only", false, "run only the fleet frame dedup part (16 forked desktops)")
	}
	cmd.Flags().IntVar(&opts.Scripts, "scripts", 1000, "distinct scripts registered (pool)")
	cmd.Flags().StringVar(&plotDir, "plot", "", "also write a latency CDF chart (SVG) of every series into `DIR`")
	cmd.Flags().StringVar(&opts.PythonSDK, "python-sdk", "sdk/python", "directory of the Python SDK, for the desktop suite's Python round trips (skipped when absent)")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	return cmd
}

// runSeriesSuite starts a daemon for a series suite with the serve flags
// given (besides its socket and data directory), runs the suite until it
// ends or an interrupt cancels it, prints the table, writes the JSON, and
// maps the report to the exit status.
func runSeriesSuite(cmd *cobra.Command, name, jsonPath, plotDir string, serve []string, run func(context.Context, *bench.Daemon) (*bench.SeriesReport, error)) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the tine binary to measure: %w", err)
	}
	d, err := bench.StartDaemon(self, 0, serve...)
	if err != nil {
		return fmt.Errorf("bench %s: %w", name, err)
	}
	defer d.Stop()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, d)
	if err != nil {
		return fmt.Errorf("bench %s: %w", name, err)
	}
	r.WriteTable(cmd.OutOrStdout())
	if jsonPath != "" {
		if err := r.WriteJSON(jsonPath); err != nil {
			return err
		}
	}
	if plotDir != "" {
		files, err := r.WritePlots(plotDir)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", f)
		}
	}
	if code := r.ExitCode(); code != 0 {
		return exitError{code}
	}
	return nil
}

// newDensityCommand makes `tine bench density`.
func newDensityCommand() *cobra.Command {
	var (
		opts              bench.DensityOptions
		jsonPath, plotDir string
	)
	cmd := &cobra.Command{
		Use:   "density [-n COUNT] [--execs N] [--parallel P] [--json FILE] [--plot DIR]",
		Short: "Measure memory per idle sandbox and the exec round trip with 1000 live",
		Long: `density starts a tine serve for the run (no pool; a budget of COUNT+16
sandboxes and 1000 TiB, so that default limits do not stop it) and creates
-n idle live sandboxes, --parallel at a time, stopping at 1, a tenth, a
quarter, a half and all of them. At each it reads the PSS of the daemon and
of every process under it (each sandbox's PID 1 and what it holds), the sum
of the sandboxes' memory cgroups (pages, tmpfs and kernel objects charged
to them), the host's MemTotal-MemAvailable, and the daemon's threads and
descriptors, and times --execs execs of /bin/true to random live
sandboxes. Then it deletes all but one and times the execs at 1 live again.
The cost per sandbox is the least-squares slope of each total against the
live count. Every sandbox is deleted at the end, on error and on Ctrl-C.
Targets: ` + fmt.Sprintf(`at most %.0f KiB per idle sandbox, read on the slope of the
daemon's and the sandbox processes' PSS (the cgroup and host slopes are
printed next to it); the exec p50 with all live at most %.1fx the p50 with 1
live (before and after, pooled).`, bench.DensityTargets.PSSBytes/1024, bench.DensityTargets.ExecRatio),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Count < 2 || opts.Execs < 1 || opts.Parallel < 1 {
				return usageError{fmt.Sprintf("-n must be at least 2 (got %d), --execs and --parallel at least 1 (got %d, %d)", opts.Count, opts.Execs, opts.Parallel)}
			}
			opts.Progress = cmd.ErrOrStderr()
			return runSeriesSuite(cmd, "density", jsonPath, plotDir, opts.DaemonFlags(), func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return bench.Density(ctx, d, opts)
			})
		},
	}
	cmd.Flags().IntVarP(&opts.Count, "count", "n", 1000, "idle sandboxes live at the end")
	cmd.Flags().IntVar(&opts.Execs, "execs", 200, "execs timed at each checkpoint, after 10 discarded")
	cmd.Flags().IntVar(&opts.Parallel, "parallel", 8, "creates (and deletes) in flight at once")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	cmd.Flags().StringVar(&plotDir, "plot", "", "also write the memory chart (SVG, with the fitted slopes) into `DIR`")
	return cmd
}

// newSoakCommand makes `tine bench soak`.
func newSoakCommand() *cobra.Command {
	var (
		opts              bench.SoakOptions
		jsonPath, plotDir string
	)
	cmd := &cobra.Command{
		Use:   "soak [--duration D] [--rate R] [--json FILE] [--plot DIR]",
		Short: "Run a mixed load for 10 minutes: zero errors, flat daemon RSS, descriptors and goroutines",
		Long: `soak starts a tine serve for the run with one sandbox, one warm function
(a Python handler that returns its payload) and one desktop (an xterm), and
for --duration sends --rate operations per second, open loop, taking turns:
an exec of /bin/true, a 64 KiB file put, a 64 KiB file get (checked), a
function call (checked), and a click, a key and a PNG screenshot over the
desktop's ACI. Every --sample it reads the daemon's RSS, open
descriptors (/proc/PID/fd), threads and goroutines (go_goroutines of
/metrics). It prints every error, p50/p90/p99 per kind of operation, the
achieved rate, and the least-squares slopes per minute after --warmup
(cut to a fifth of the duration when it is more than half). Targets: no
error (any error fails the run); ` + fmt.Sprintf(`flat: an RSS slope under %.0f MiB/min, descriptors
and goroutines (beyond one per connection the suite holds open) under %.0f a
minute; an achieved rate of at least %.0f%% of --rate.`,
			bench.SoakTargets.RSSBytesPerMin/(1<<20), bench.SoakTargets.FDsPerMin, bench.SoakTargets.RateShare*100),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Duration <= 0 || opts.Rate <= 0 || opts.SampleEvery <= 0 || opts.Warmup < 0 {
				return usageError{"--duration, --rate and --sample must be positive, --warmup 0 or more"}
			}
			opts.Progress = cmd.ErrOrStderr()
			return runSeriesSuite(cmd, "soak", jsonPath, plotDir, nil, func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return bench.Soak(ctx, d, opts)
			})
		},
	}
	cmd.Flags().DurationVar(&opts.Duration, "duration", 10*time.Minute, "how long the load runs")
	cmd.Flags().Float64Var(&opts.Rate, "rate", 20, "operations per second (open loop)")
	cmd.Flags().DurationVar(&opts.Warmup, "warmup", time.Minute, "left out of the slopes and latencies")
	cmd.Flags().DurationVar(&opts.SampleEvery, "sample", 5*time.Second, "how often the daemon is read")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	cmd.Flags().StringVar(&plotDir, "plot", "", "also write charts (SVG) of the daemon's RSS, descriptors and goroutines over time into `DIR`")
	return cmd
}

// newSuiteCommand makes `tine bench NAME`: flags, run, table, JSON, plots.
// groups builds the suite for the tine binary at self, and what to clean up.
func newSuiteCommand(name, short, long string, groups func(self string) ([]bench.Group, func(), error)) *cobra.Command {
	var (
		rounds, warmup int
		jsonPath       string
		plotDir        string
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   name + " [-n N] [--warmup W] [--json FILE] [--plot DIR]",
		Short: short,
		Long:  long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rounds < 1 {
				return usageError{fmt.Sprintf("-n must be at least 1 (got %d)", rounds)}
			}
			if warmup < 0 {
				return usageError{fmt.Sprintf("--warmup must be 0 or more (got %d)", warmup)}
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the tine binary to measure: %w", err)
			}
			// What users run: the front beside this full program.
			gs, cleanup, err := groups(runcli.Front(self))
			if err != nil {
				return fmt.Errorf("bench %s: %w", name, err)
			}
			defer cleanup()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			opts := bench.Options{Rounds: rounds, Warmup: warmup, Timeout: timeout, Progress: cmd.ErrOrStderr()}
			report, err := bench.RunSuite(ctx, name, gs, opts)
			if err != nil {
				return fmt.Errorf("bench %s: %w", name, err)
			}
			if err := bench.WriteTable(cmd.OutOrStdout(), report); err != nil {
				return err
			}
			if jsonPath != "" {
				if err := bench.WriteJSON(jsonPath, report); err != nil {
					return err
				}
			}
			if plotDir != "" {
				files, err := bench.WritePlots(plotDir, report)
				if err != nil {
					return err
				}
				for _, f := range files {
					fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", f)
				}
			}
			if code := report.ExitCode(); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&rounds, "rounds", "n", 200, "measured rounds; each runs every variant once")
	cmd.Flags().IntVar(&warmup, "warmup", 20, "warm-up rounds run first and discarded")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	cmd.Flags().StringVar(&plotDir, "plot", "", "also write latency CDF charts (SVG) into `DIR`")
	cmd.Flags().DurationVar(&timeout, "timeout", bench.DefaultTimeout, "kill and fail a single run after this long")
	return cmd
}

// noArgs rejects positional arguments as a usage error (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("%s takes no arguments (got %q)", cmd.CommandPath(), args)}
	}
	return nil
}
