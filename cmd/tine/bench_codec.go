package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/bench"
)

func newCodecCommand() *cobra.Command {
	var (
		reps     int
		jsonPath string
	)
	cmd := &cobra.Command{
		Use:   "codec [--reps N] [--json FILE]",
		Short: "Measure screenshot codecs: bytes, time and whether tesseract still reads the screen's text, per format × quality × size",
		Long: `codec starts a tine serve for the run and, for each scene (a 1280x800 desktop
with an xterm full of scripted words: the 6x13 terminal font, and a 10x20
one), takes screenshots in each cell of PNG native and @1024, JPEG q80, q50
and q10 at native size and @1024, @768, @512: bytes, the round-trip p50 of
--reps shots, and the share of the scripted words Debian's tesseract reads
in the image as delivered. A cell is safe for text-reading agents when it
reads at least 95% of what the lossless native PNG reads.
Needs tesseract-ocr.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reps < 1 {
				return usageError{"--reps must be at least 1"}
			}
			return runSeriesSuite(cmd, "codec", jsonPath, "", nil, func(ctx context.Context, d *bench.Daemon) (*bench.SeriesReport, error) {
				return bench.Codec(ctx, d, reps)
			})
		},
	}
	cmd.Flags().IntVar(&reps, "reps", 10, "screenshots timed per cell")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the full report, raw datapoints included, to `FILE`")
	return cmd
}
