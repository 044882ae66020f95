package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	var thresholds bench.Thresholds
	var asOneRun bool
	merge := &cobra.Command{
		Use:   "merge FILE...",
		Short: "Merge bench http JSON results from several load machines into one report, with exact percentiles and one audit",
		Long: `report merge reads the JSON results of bench http runs from several load machines (--shard)
and reports them as one run: counts and throughput summed, histograms merged (exact percentiles),
timelines lined up, and one audit over every response.

It merges only shards of one run: results with the same run id (run_id, which every shard of a
run shares: the same target, load and --start-at, or the same --run-id), each a shard of its own
(--shard I/N). Files of different runs, several written before results carried a run id, and
files that claim the same shard of one run (two runs of one command one after the other, each
the whole run: shard 0 of 1) are refused, exit 2, each named with its run. --as-one-run merges
them anyway, keying consumers by identity: one with an identity of its own (config.identities:
a source address, or an identity of --consumers-from, which runs from the same file name by the
same pseudonym) is one consumer whichever files sent it; those named consumer-N are each file's
own (named by file when two files' clash: "consumer-0 (a.json)"). One run given twice is
refused, --as-one-run or not.

A FILE that holds *, ? or [ and names no file is a pattern report merge expands itself, for
where no shell does (a container's command): /results/shard-*.json.`,
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
			if err := thresholds.Validate(); err != nil {
				return flagError(err, benchNames)
			}
			paths, err := expandPatterns(args)
			if err != nil {
				return err
			}
			runs := make([]bench.Result, len(paths))
			for i, path := range paths {
				b, err := os.ReadFile(path)
				if err != nil {
					return usagef("%w", err)
				}
				if err := json.Unmarshal(b, &runs[i]); err != nil {
					return usagef("%s: not a ratelab JSON result: %w", path, err)
				}
			}
			res, err := bench.MergeWith(runs, bench.MergeOptions{Tolerance: tolerance, AsOneRun: asOneRun, Labels: paths})
			var re *bench.RunsError
			var se *bench.ShardsError
			switch {
			case errors.As(err, &re):
				return usagef("report merge: the files are %s: merge each run's shards alone, or pass --as-one-run to merge them as one run",
					re.Text(paths))
			case errors.As(err, &se) && se.Twice:
				return usagef("report merge: %s: give each run once", se.Text(paths))
			case errors.As(err, &se):
				return usagef("report merge: the files claim the same shard of one run: %s: merge each run alone, or pass --as-one-run to merge them as one run",
					se.Text(paths))
			}
			if err != nil {
				return &usageError{err}
			}
			if len(thresholds.AllowUntested) > 0 {
				var ids []string
				if res.Audit != nil {
					for _, l := range res.Audit.Limits {
						ids = append(ids, l.Label())
					}
				}
				if thresholds.AllowUntested, err = untestedNames(thresholds.AllowUntested, ids); err != nil {
					return err
				}
			}
			if err := reports.BenchHTTP(io.out, res, format, io.render()); err != nil {
				return err
			}
			return crossed(thresholds.Crossed(res))
		},
	}
	output.bind(merge)
	merge.Flags().DurationVar(&tolerance, "clock-tolerance", 5*time.Millisecond,
		"how far the load machines' clocks may disagree: the merged audit widens every response's flight by it")
	merge.Flags().BoolVar(&asOneRun, "as-one-run", false, "merge results of different runs (or of one shard) as one: consumers keyed by identity, each file's consumer-N its own")
	merge.Flags().BoolVar(&thresholds.FailOnLeak, "fail-on-leak", false, "exit 3 when the merged audit does not find every limit held, or there is none")
	merge.Flags().BoolVar(&thresholds.AllowNoVerdict, "allow-no-verdict", false, "with --fail-on-leak, pass every limit the load never reached or the merged audit could not judge (a shared limit still fails)")
	merge.Flags().StringArrayVar(&thresholds.AllowUntested, "allow-untested", nil, "with --fail-on-leak, pass these limits if the load never reached them or the merged audit could not judge them: "+
		"NAME,… as the audit names them (repeatable)")
	merge.Flags().Var(optionalFloat{&thresholds.FailOnUnder}, "fail-on-under", "exit 3 when above this share (0 to 1) of the denials judged were ones the rule would have admitted")
	cmd.AddCommand(merge, newReportHTMLCmd(io))
	return cmd
}

// newReportHTMLCmd is ratelab report html: pictures of saved results.
func newReportHTMLCmd(io *ioStreams) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "html RESULT.json...",
		Short: "Draw saved results (bench http, bench rls, race, compare, skew, drill) as one self-contained HTML page",
		Long: `report html reads JSON results written with --output json and draws them in one page that
needs nothing from the network (inline SVG and CSS, no script): bench http runs overlaid, and
bench rls runs overlaid apart from them, each run in one colour in every chart (throughput,
latency and status classes over time, a bench rls run's answers by code: OK, OVER_LIMIT,
UNKNOWN; the latency percentile spectrum, and each audited run's admissions per consumer in
every window that ended within the run, against the limit: every consumer, or the worst eight),
each audit's paragraphs named by their run when the page holds several, race (admitted per trial against the
limit, latency by percentile and each trial's p99, and each trial explained with --explain as
swimlanes, one goroutine each on Redis's time axis), compare (the trade table, the boundary and hammer timelines,
memory per client by limit), skew (over-admission against the skew) and drill (each run over
time, its fault shaded: admitted, over the guarantee, not decided by Redis, wrongly refused).`,
		Example: `  ratelab bench http http://127.0.0.1:8080/ --rate 500 -o json > a.json
  ratelab report html a.json b.json --out report.html`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("report html takes one or more JSON files")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if out == "" {
				return usagef("--out is required: the HTML file to write")
			}
			page, err := readResults(args)
			if err != nil {
				return err
			}
			return writeFile(out, func(f *os.File) error { return reports.HTML(f, page) })
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "the HTML file to write")
	// Everywhere else -o is --output, the format: -o FILE still works here,
	// with a notice on the error stream.
	_ = cmd.Flags().MarkShorthandDeprecated("out", "use --out FILE (elsewhere -o is --output, the format)")
	return cmd
}

// readResults reads saved results of every kind into a page, each named by
// its file.
func readResults(args []string) (reports.Page, error) {
	var p reports.Page
	paths, err := expandPatterns(args)
	if err != nil {
		return p, err
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return p, usagef("%w", err)
		}
		if err := p.Add(filepath.Base(path), b); err != nil {
			return p, usagef("%s: %w", path, err)
		}
	}
	return p, nil
}

// expandPatterns reads each argument that holds *, ? or [ and names no file
// as the files it matches, in order, as a shell would: a container's
// command has no shell to expand /results/shard-*.json. A pattern that
// matches nothing is refused.
func expandPatterns(args []string) ([]string, error) {
	var paths []string
	for _, arg := range args {
		if _, err := os.Stat(arg); err == nil || !strings.ContainsAny(arg, "*?[") {
			paths = append(paths, arg)
			continue
		}
		matches, err := filepath.Glob(arg)
		if err != nil {
			return nil, usagef("%q: %w", arg, err)
		}
		if len(matches) == 0 {
			return nil, usagef("%s matches no file", arg)
		}
		paths = append(paths, matches...)
	}
	return paths, nil
}
