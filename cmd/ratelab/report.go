package main

import (
	"encoding/json"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/reports"
)

// newReportCmd is ratelab report: work on saved results.
func newReportCmd(io *ioStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "report", Short: "Work on saved results"}
	var output outputFlag
	var tolerance time.Duration
	var failOnLeak bool
	merge := &cobra.Command{
		Use:   "merge FILE...",
		Short: "Merge bench http JSON results from several load machines into one report, with exact percentiles and one audit",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("report merge takes one or more JSON files")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := output.format()
			if err != nil {
				return err
			}
			if tolerance < 0 || tolerance > time.Minute {
				return usagef("--clock-tolerance must be between 0 and 1m (got %s)", tolerance)
			}
			runs := make([]bench.Result, len(args))
			for i, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return usagef("%w", err)
				}
				if err := json.Unmarshal(b, &runs[i]); err != nil {
					return usagef("%s: not a ratelab JSON result: %w", path, err)
				}
			}
			res, err := bench.Merge(runs, tolerance)
			if err != nil {
				return &usageError{err}
			}
			if err := reports.BenchHTTP(io.out, res, format, io.render()); err != nil {
				return err
			}
			return crossed(bench.Thresholds{MaxErrorRate: -1, FailOnLeak: failOnLeak}.Crossed(res))
		},
	}
	output.bind(merge)
	merge.Flags().DurationVar(&tolerance, "clock-tolerance", 5*time.Millisecond,
		"how far the load machines' clocks may disagree: the merged audit widens every response's flight by it")
	merge.Flags().BoolVar(&failOnLeak, "fail-on-leak", false, "exit 3 when the merged audit fails, or there is none")
	cmd.AddCommand(merge)
	return cmd
}
