package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/bench"
)

func newStreamCommand() *cobra.Command {
	var (
		frames   int
		window   time.Duration
		jsonPath string
	)
	cmd := &cobra.Command{
		Use:   "stream [--frames N] [--cpu-window D] [--json FILE]",
		Short: "Measure the desktop screencast: bytes per frame full vs delta, PNG vs JPEG, and its CPU with XDamage and polling",
		Long: `stream starts a tine serve for the run with one 1280x800 desktop (an xterm)
and streams it over the ACI (docs/aci.md, "Screencast"). While another
session types into the xterm at ~12 characters a second: bytes per frame of
full and delta streams, PNG and JPEG q80, at fps 10 (--frames frames each),
then the messages and bytes of a 3 s still window; the composited delta PNG
stream is compared with a lossless screenshot pixel for pixel. Then the CPU
of the guest and of Xvfb (every thread's run time, /proc/PID/task/*/schedstat)
over --cpu-window, with no stream and with a delta JPEG stream at fps 5, 10
and 30, idle and typing, gated by XDamage and polling (capture and diff every
frame slot, the baseline). Targets: ` + fmt.Sprintf("an idle 30 fps stream at most %g%% of a core (guest + Xvfb); delta bytes per typing frame at most %g of full frames; the composite equals the screenshot.",
			bench.StreamTargets.IdleCPUPct, bench.StreamTargets.DeltaOverFull),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if frames < 10 || window < time.Second {
				return usageError{"--frames must be at least 10 and --cpu-window at least 1s"}
			}
			return runSeriesSuite(cmd, "stream", jsonPath, "", nil, func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return bench.Stream(ctx, d, frames, window)
			})
		},
	}
	cmd.Flags().IntVar(&frames, "frames", 80, "frames measured per typing cell")
	cmd.Flags().DurationVar(&window, "cpu-window", 4*time.Second, "length of each CPU cell")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	return cmd
}
