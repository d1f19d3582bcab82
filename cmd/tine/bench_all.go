package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/bench"
)

// allReport is what tine bench all --json writes: each suite's own report
// as it wrote it, the summary and the comparison.
type allReport struct {
	Suites      []allSuite                    `json:"suites"`
	Targets     []bench.SummaryRow            `json:"targets"`
	Comparisons []bench.Comparison            `json:"comparisons"`
	Published   []bench.Published             `json:"published"`
	Figures     map[string]map[string]float64 `json:"figures"`
}

type allSuite struct {
	bench.SuiteRun
	// Settled: the host's CPUs were quiet before it started; Settle is that
	// reading and how long the wait took.
	Settled  bool            `json:"settled"`
	Settle   bench.HostState `json:"settle"`
	WaitedMs float64         `json:"waited_ms"`
	Exit     int             `json:"exit"`
	// Skipped says what the host lacks for a suite that was not run.
	Skipped string          `json:"skipped,omitempty"`
	Report  json.RawMessage `json:"report,omitempty"`
}

func newBenchAllCommand() *cobra.Command {
	var (
		only          []string
		quick         bool
		settleMax     time.Duration
		jsonPath      string
		plotDir       string
		osworldServer string
	)
	names := make([]string, len(bench.AllSuites))
	for i, s := range bench.AllSuites {
		names[i] = s.Name
	}
	cmd := &cobra.Command{
		Use:   "all [--suites a,b] [--quick] [--json FILE] [--plot DIR]",
		Short: "Run every suite in sequence, waiting for the host to settle between them, and summarise",
		Long: `all runs the suites (` + strings.Join(names, ", ") + `) one after another,
each as its own tine bench command with the arguments docs/benchmarks.md
publishes (--quick: small sizes, to check that they work, not to publish).
Before each, it waits (at most --settle) until the host's CPUs are quiet:
busy at most half the cores over a second. The suites judge their start the
same way, not by the 1-minute load average, which still carries the previous
suite's own load. At the end it prints every target of every suite, and each
headline figure of docs/benchmarks.md next to this run's (flagged when
outside 2x either way). --json writes every suite's full report, the
summary and the comparison; --plot DIR writes each suite's charts into
DIR/SUITE. A suite whose needs this host lacks (e2b's npm packages in
test/e2b, containerd for oci, tesseract for codec) is not run and reads
NOT MEASURED with what is missing; run it from the checkout's top.

Exit status: 1 when a suite failed or missed a target, else 2 when a figure
was NOT MEASURED, else 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var suites []bench.SuiteRun
			for _, s := range bench.AllSuites {
				if len(only) == 0 || slices.Contains(only, s.Name) {
					suites = append(suites, s)
				}
			}
			for _, n := range only {
				if !slices.Contains(names, n) {
					return usageError{fmt.Sprintf("--suites: no suite %q (the suites: %s)", n, strings.Join(names, ", "))}
				}
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the tine binary to measure: %w", err)
			}
			tmp, err := os.MkdirTemp("", "tine-bench-all-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			g := bench.NewGuard(runtime.NumCPU())
			out := allReport{Published: bench.PublishedFigures, Figures: map[string]map[string]float64{}}
			exits := map[string]int{}
			for _, s := range suites {
				if ctx.Err() != nil {
					break
				}
				args := s.Args
				if quick {
					args = s.Quick
				}
				run := allSuite{SuiteRun: bench.SuiteRun{Name: s.Name, Args: args}}
				if s.Name == "osworld" && osworldServer != "" {
					run.Args = append(slices.Clone(args), "--osworld-server", osworldServer)
				}
				if s.Missing != nil {
					if why := s.Missing(); why != "" {
						fmt.Fprintf(cmd.OutOrStdout(), "\n$ tine bench %s: not run: %s\n", s.Name, why)
						run.Skipped = why
						out.Targets = append(out.Targets, bench.SummaryRow{Suite: s.Name, Target: "(not run)", Outcome: bench.NotMeasured, Why: why})
						out.Suites = append(out.Suites, run)
						continue
					}
				}
				t0 := time.Now()
				run.Settle, run.Settled = bench.Settle(ctx, g, settleMax)
				run.WaitedMs = float64(time.Since(t0)) / 1e6
				if !run.Settled {
					fmt.Fprintf(cmd.ErrOrStderr(), "bench all: the host did not settle in %s (CPUs busy %.2f of %d); running %s anyway\n",
						settleMax, run.Settle.BusyCores, g.Cores, s.Name)
				}
				report := filepath.Join(tmp, s.Name+".json")
				argv := append([]string{"bench", s.Name}, run.Args...)
				argv = append(argv, "--json", report)
				if plotDir != "" && !s.NoPlot {
					argv = append(argv, "--plot", filepath.Join(plotDir, s.Name))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\n$ tine %s\n", strings.Join(argv, " "))
				c := exec.CommandContext(ctx, self, argv...)
				c.Stdout, c.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
				err := c.Run()
				var ee *exec.ExitError
				switch {
				case err == nil:
				case errors.As(err, &ee):
					run.Exit = ee.ExitCode()
				default:
					return fmt.Errorf("bench all: run %s: %w", s.Name, err)
				}
				exits[s.Name] = run.Exit
				if b, err := os.ReadFile(report); err == nil {
					run.Report = b
					rows, figs, err := bench.SuiteFigures(s.Name, b)
					if err != nil {
						return err
					}
					out.Targets = append(out.Targets, rows...)
					out.Figures[s.Name] = figs
				}
				out.Suites = append(out.Suites, run)
			}
			out.Comparisons = bench.Compare(out.Figures)
			if err := bench.WriteSummary(cmd.OutOrStdout(), out.Targets, out.Comparisons, exits); err != nil {
				return err
			}
			if jsonPath != "" {
				b, _ := json.MarshalIndent(out, "", "  ")
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("write %s: %w", jsonPath, err)
				}
			}
			if code := allExitCode(out, exits); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&only, "suites", nil, "run only these suites (comma-separated), in the usual order")
	cmd.Flags().BoolVar(&quick, "quick", false, "small sizes: checks that every suite works; not figures to publish")
	cmd.Flags().DurationVar(&settleMax, "settle", 2*time.Minute, "longest wait for a quiet host before each suite")
	cmd.Flags().StringVar(&jsonPath, "json", "", "write every suite's report, the summary and the comparison to `FILE`")
	cmd.Flags().StringVar(&plotDir, "plot", "", "write each suite's charts into `DIR`/SUITE")
	cmd.Flags().StringVar(&osworldServer, "osworld-server", "", "passed to the osworld suite: a checkout of OSWorld (`DIR`) whose guest server is the peer")
	return cmd
}

// allExitCode: 1 when a suite failed or missed a target, else 2 when a
// figure was not measured, else 0.
func allExitCode(r allReport, exits map[string]int) int {
	code := 0
	for _, e := range exits {
		if e == 1 || e > 2 {
			return 1
		}
		if e == 2 {
			code = 2
		}
	}
	for _, t := range r.Targets {
		switch t.Outcome {
		case bench.Missed:
			return 1
		case bench.NotMeasured:
			code = 2
		}
	}
	return code
}
