package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/compare"
	"github.com/ratelab/ratelab/reports"
)

// compareOptions are the flags of ratelab compare.
type compareOptions struct {
	Algorithms      string
	Workloads       string
	Limit           int64
	Window          time.Duration
	Redis           string
	Cluster         bool
	ClusterLocal    bool
	Output          string
	Connections     int
	Keys            int
	Duration        time.Duration
	AccuracyClients int
	Seed            uint64
	Script          scriptOptions

	Stdout, Stderr  io.Writer
	Color, Progress bool
}

func newCompareCmd(stdout, stderr io.Writer) *cobra.Command {
	opts := compareOptions{Stdout: stdout, Stderr: stderr}
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
  throughput  decisions/s and latency over --keys clients on --connections connections`,
		Example: `  ratelab compare
  ratelab compare --limit 100 --window 1s --redis redis://127.0.0.1:6379
  ratelab compare --cluster-local --workloads burst,throughput
  ratelab compare --algorithms sliding-log,sliding-counter --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
			opts.Progress = isTerminal(stderr)
			return runCompare(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Algorithms, "algorithms", "all", "algorithms to measure, comma-separated, or all")
	f.StringVar(&opts.Workloads, "workloads", "all", "workloads to run, comma-separated, or all")
	f.Int64Var(&opts.Limit, "limit", 100, "requests admitted per window")
	f.DurationVar(&opts.Window, "window", time.Second, "window length (whole milliseconds)")
	f.StringVar(&opts.Redis, "redis", "", "Redis URL, or comma-separated URLs of a Cluster (default $REDIS_URL, else a private redis-server)")
	f.BoolVar(&opts.Cluster, "cluster", false, "treat --redis as a seed of a Redis Cluster")
	f.BoolVar(&opts.ClusterLocal, "cluster-local", false, "start a private three-master Redis Cluster and measure on it")
	f.StringVarP(&opts.Output, "output", "o", "table", "output format: table, markdown or json")
	f.IntVar(&opts.Connections, "connections", 50, "connections (goroutines) of the throughput workload")
	f.IntVar(&opts.Keys, "keys", 10_000, "clients the throughput workload spreads over")
	f.DurationVar(&opts.Duration, "duration", 3*time.Second, "length of each throughput measurement")
	f.IntVar(&opts.AccuracyClients, "accuracy-clients", 50, "clients in the accuracy workload's Poisson stream")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the accuracy workload's stream")
	opts.Script.bind(f)
	_ = cmd.RegisterFlagCompletionFunc("algorithms", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append(algorithms.Names(), "all"), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("workloads", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append(compare.Workloads(), "all"), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "markdown", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// compareConfig checks every flag and builds the comparison. Nothing is
// sent to Redis before it succeeds.
func compareConfig(opts compareOptions) (compare.Config, reports.Format, *redis.UniversalOptions, error) {
	var cfg compare.Config
	format, err := reports.ParseFormat(opts.Output)
	if err != nil {
		return cfg, "", nil, usagef("--output: %w", err)
	}
	// "all" here is every production algorithm, not every race limiter.
	var words []string
	for _, w := range strings.Split(opts.Algorithms, ",") {
		if w = strings.TrimSpace(w); w == "all" {
			words = append(words, algorithms.Algorithms()...)
		} else {
			words = append(words, w)
		}
	}
	names, err := algorithms.ParseNames(strings.Join(words, ","))
	if err != nil {
		return cfg, "", nil, usagef("--algorithms: %w", err)
	}
	scripts, err := opts.Script.load()
	if err != nil {
		return cfg, "", nil, err
	}
	var workloads []string
	if opts.Workloads != "all" {
		for _, w := range strings.Split(opts.Workloads, ",") {
			if w = strings.TrimSpace(w); w != "" {
				workloads = append(workloads, w)
			}
		}
		if len(workloads) == 0 {
			return cfg, "", nil, usagef("--workloads names no workload")
		}
	}
	for name, v := range map[string]int{"--connections": opts.Connections, "--keys": opts.Keys, "--accuracy-clients": opts.AccuracyClients} {
		if v < 1 {
			return cfg, "", nil, usagef("%s must be at least 1 (got %d)", name, v)
		}
	}
	if opts.Duration <= 0 {
		return cfg, "", nil, usagef("--duration must be positive (got %s)", opts.Duration)
	}
	cfg = compare.Config{
		Algorithms:      names,
		Scripts:         scripts,
		Workloads:       workloads,
		Policy:          algorithms.Policy{Limit: opts.Limit, Window: opts.Window},
		Connections:     opts.Connections,
		Keys:            opts.Keys,
		Duration:        opts.Duration,
		AccuracyClients: opts.AccuracyClients,
		Seed:            opts.Seed,
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", nil, &usageError{err}
	}
	switch {
	case opts.ClusterLocal && opts.Redis != "":
		return cfg, "", nil, usagef("--cluster-local starts its own cluster: it cannot be combined with --redis")
	case opts.ClusterLocal && opts.Cluster:
		return cfg, "", nil, usagef("--cluster-local starts its own cluster: --cluster names one of yours")
	case opts.ClusterLocal:
		return cfg, format, nil, nil // the flag wins over REDIS_URL
	}
	ropts, err := redisOptions(opts.Redis, opts.Cluster)
	if err != nil {
		return cfg, "", nil, err
	}
	return cfg, format, ropts, nil
}

func runCompare(ctx context.Context, opts compareOptions) error {
	cfg, format, ropts, err := compareConfig(opts)
	if err != nil {
		return err
	}
	tgt, err := openCompareTarget(ctx, ropts, opts.ClusterLocal, opts.Stderr)
	if err != nil {
		return err
	}
	defer tgt.close()
	cfg.Redis = tgt.opts
	if opts.Progress {
		cfg.Progress = func(name, workload string) {
			fmt.Fprintf(opts.Stderr, "\r\033[Kcomparing %s: %s", name, workload)
		}
	}
	rep, err := compare.Run(ctx, cfg)
	if opts.Progress {
		fmt.Fprint(opts.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	rep.Redis = compare.Server{Mode: tgt.info.Mode, Version: tgt.info.Version, Addr: tgt.info.Addr,
		Cluster: tgt.opts.IsClusterMode || len(tgt.opts.Addrs) > 1}
	return reports.Compare(opts.Stdout, rep, format, reports.Options{Color: opts.Color})
}

// openCompareTarget is openTarget, or a private three-master Cluster.
func openCompareTarget(ctx context.Context, ropts *redis.UniversalOptions, clusterLocal bool, stderr io.Writer) (*target, error) {
	if clusterLocal {
		return openLocalCluster(ctx)
	}
	return openTarget(ctx, ropts, stderr)
}
