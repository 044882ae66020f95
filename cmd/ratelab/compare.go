package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/reports"
)

// compareOptions are the flags of ratelab compare; compare.Config holds
// the rest.
type compareOptions struct {
	compare.Config
	algorithms, workloads string
	redis                 redisFlags
	output                outputFlag
	script                scriptFlags
}

// compareNames are the flags that set compare.Config's fields.
var compareNames = flagNames{"Algorithms": "--algorithms", "Workloads": "--workloads", "Connections": "--connections",
	"Keys": "--keys", "Duration": "--duration", "AccuracyClients": "--accuracy-clients", "Batch": "--redis-batch"}

func newCompareCmd(io *ioStreams) *cobra.Command {
	var opts compareOptions
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Measure the rate-limiting algorithms side by side on one Redis",
		Long: `compare runs every algorithm through six workloads on one Redis and prints one table:
how exact each is, how much memory a client costs, how many Redis commands and round trips a
decision takes, its latency and throughput, and a recommendation line per algorithm.

Algorithms (--algorithms, comma-separated; all = the five below, beside which any race limiter
whose window follows the caller's clock can be measured, such as lua-count-denied):
` + limiterHelp(true) + `
Workloads (--workloads, comma-separated, all by default):
  burst       many goroutines at one key at once: over- and under-admission
  boundary    a full limit 1 ms before a window boundary and one at it: most admitted in one window
  hammer      one client at 3x the limit for 3 windows, then a retry every 100 ms: lock-out
  accuracy    Poisson clients near the limit, every decision judged by an exact sliding window
  memory      MEMORY USAGE per client at limits 10, 100, 1,000 and 10,000
  throughput  decisions/s and latency over --keys clients on --connections connections; with
              --redis-batch N, once more with the decisions waiting at one moment sent as one
              pipeline of at most N (as ratelab edge --redis-batch sends them), beside`,
		Example: `  ratelab compare
  ratelab compare --limit 100 --window 1s --redis redis://127.0.0.1:6379
  ratelab compare --cluster-local --workloads burst,throughput
  ratelab compare --algorithms sliding-log,sliding-counter --output json
  ratelab compare --workloads throughput --redis-batch 16`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCompare(cmd.Context(), io, cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.algorithms, "algorithms", "all", "algorithms to measure, comma-separated, or all")
	f.StringVar(&opts.workloads, "workloads", "all", "workloads to run, comma-separated, or all")
	f.Int64Var(&opts.Policy.Limit, "limit", 100, "requests admitted per window")
	f.DurationVar(&opts.Policy.Window, "window", time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Connections, "connections", 50, "connections (goroutines) of the throughput workload")
	f.IntVar(&opts.Keys, "keys", 10_000, "clients the throughput workload spreads over")
	f.DurationVar(&opts.Duration, "duration", 3*time.Second, "length of each throughput measurement")
	f.IntVar(&opts.Batch, "redis-batch", 1, "with more than 1, measure the throughput workload also batched: "+
		"at most this many decisions per Redis round trip")
	f.IntVar(&opts.AccuracyClients, "accuracy-clients", 50, "clients in the accuracy workload's Poisson stream")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the accuracy workload's stream")
	opts.redis.bind(f, true)
	opts.output.bind(cmd)
	opts.script.bind(f)
	complete(cmd, "algorithms", append(algorithms.Names(), "all")...)
	complete(cmd, "workloads", append(compare.Workloads(), "all")...)
	return cmd
}

// compareConfig checks every flag and builds the comparison. Nothing is
// started or sent before it succeeds.
func compareConfig(cmd *cobra.Command, opts compareOptions) (compare.Config, reports.Format, error) {
	cfg := opts.Config
	format, err := opts.output.format()
	if err != nil {
		return cfg, "", err
	}
	// "all" here is every production algorithm, not every race limiter;
	// Validate checks the names.
	cfg.Algorithms = nil
	for _, name := range listOf(opts.algorithms) {
		expand := []string{name}
		if name == "all" {
			expand = algorithms.Algorithms()
		}
		for _, n := range expand {
			if !slices.Contains(cfg.Algorithms, n) {
				cfg.Algorithms = append(cfg.Algorithms, n)
			}
		}
	}
	if cfg.Scripts, err = opts.script.load(cmd.Flags()); err != nil {
		return cfg, "", err
	}
	if opts.workloads != "all" {
		if cfg.Workloads = listOf(opts.workloads); len(cfg.Workloads) == 0 {
			return cfg, "", usagef("--workloads names no workload")
		}
	}
	// Zero is the library's default: here it can only be a mistake.
	for name, v := range map[string]int{"Connections": cfg.Connections, "Keys": cfg.Keys, "AccuracyClients": cfg.AccuracyClients,
		"Batch": cfg.Batch} {
		if v < 1 {
			return cfg, "", usagef("%s must be at least 1 (got %d)", compareNames[name], v)
		}
	}
	if cfg.Duration <= 0 {
		return cfg, "", usagef("--duration must be positive (got %s)", cfg.Duration)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", flagError(err, compareNames, policyNames, scriptNames)
	}
	return cfg, format, nil
}

// listOf splits a comma-separated list of names.
func listOf(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func runCompare(ctx context.Context, io *ioStreams, cmd *cobra.Command, opts compareOptions) error {
	cfg, format, err := compareConfig(cmd, opts)
	if err != nil {
		return err
	}
	target, err := opts.redis.config(io)
	if err != nil {
		return err
	}
	t, err := openTarget(ctx, io, target, "compare")
	if err != nil {
		return err
	}
	defer t.Close()
	cfg.Redis = t.Options
	cfg.Progress = func(name, workload string) { io.status("comparing %s: %s", name, workload) }
	rep, err := compare.Run(ctx, cfg)
	io.clearStatus()
	if err != nil {
		return err
	}
	rep.Redis = t.Info
	return reports.Compare(io.out, rep, format, io.render())
}
