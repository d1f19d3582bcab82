package main

import (
	"context"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/bench"
)

func newE2BBenchCommand() *cobra.Command {
	var (
		o        bench.E2BOptions
		jsonPath string
	)
	cmd := &cobra.Command{
		Use:   "e2b [-n N] [--round-trips N] [--sdk-dir DIR] [--json FILE]",
		Short: "Time the E2B SDK against tine: create → first command, commands.run, next to tine's own client",
		Long: `e2b starts a tine serve --e2b for the run and drives the real e2b npm SDK
(from --sdk-dir's node_modules; make deps installs it into test/e2b) against
it, interleaved with tine's own Go client: -n sequential runs each of the
SDK's Sandbox.create → commands.run('true') answered (time to interactive),
tine's create → exec true, and the E2B create alone over plain HTTP (which
starts envd in the sandbox); then --round-trips of commands.run('true') on a
live sandbox next to the Go client's exec of true and of bash -l -c true, and
of @e2b/code-interpreter's runCode('1 + 1') next to the Go client's session
cell; and
the memory an idle E2B sandbox holds against a plain one. The target:
` + bench.E2BTarget.Text + `. Published figures for hosted services
(0.11–2.7 s) are context, not a same-run comparison.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Runs < 1 || o.RoundTrips < 1 {
				return usageError{"-n and --round-trips must be positive"}
			}
			if abs, err := filepath.Abs(o.SDKDir); err == nil {
				o.SDKDir = abs
			}
			return runSeriesSuite(cmd, "e2b", jsonPath, "", []string{"--e2b", "127.0.0.1:0"}, func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return bench.E2B(ctx, d, o)
			})
		},
	}
	cmd.Flags().IntVarP(&o.Runs, "runs", "n", 100, "sequential create → first command runs per variant")
	cmd.Flags().IntVar(&o.RoundTrips, "round-trips", 300, "commands.run round trips per variant")
	cmd.Flags().StringVar(&o.SDKDir, "sdk-dir", "test/e2b", "directory whose node_modules holds the e2b and @e2b/code-interpreter packages")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	return cmd
}
