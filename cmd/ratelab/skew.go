package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/skew"
)

// skewOptions are the flags of ratelab skew.
type skewOptions struct {
	Algorithms  string
	Clock       string
	Skews       []time.Duration
	Limit       int64
	Window      time.Duration
	Clients     int
	Duration    time.Duration
	Load        float64
	Seed        uint64
	Connections int
	Timeout     time.Duration
	Redis       string
	Cluster     bool
	Output      string

	Stdout, Stderr  io.Writer
	Color, Progress bool
}

func newSkewCmd(stdout, stderr io.Writer) *cobra.Command {
	opts := skewOptions{Stdout: stdout, Stderr: stderr}
	cmd := &cobra.Command{
		Use:   "skew",
		Short: "Measure what clock skew between edge nodes costs each algorithm, on the callers' clocks and on Redis's",
		Long: `skew simulates one edge node per --skews offset, all sharing one Redis, and sends a seeded
Poisson stream of --clients clients per row, each at about --load times its --limit, every
request through a node picked at random. It runs every algorithm with each node passing its
own clock to the script (caller) and with the script reading Redis's TIME (redis), at the
offsets scaled by 0, 1/4, 1/2 and 1, and judges every decision on the true time (this
process's clock): admissions beyond the algorithm's own guarantee, counting only requests
whose whole flight lies in the span judged, and denials an exact sliding window would have
admitted. The offsets live inside this process; no host clock is touched.

With no --redis (or REDIS_URL) ratelab starts a private redis-server on a free loopback
port and stops it on exit.`,
		Example: `  ratelab skew
  ratelab skew --skews 0,10ms,-10ms,100ms --algorithms sliding-log,gcra
  ratelab skew --clock redis --redis redis://127.0.0.1:6379 --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
			opts.Progress = isTerminal(stderr)
			return runSkew(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Algorithms, "algorithms", "all", "algorithms to measure, comma-separated, or all: "+strings.Join(algorithms.Algorithms(), ", "))
	f.StringVar(&opts.Clock, "clock", "both", "clocks to run each algorithm on: caller, redis or both")
	f.DurationSliceVar(&opts.Skews, "skews", skew.DefaultSkews(), "one clock offset per simulated node, whole milliseconds")
	f.Int64Var(&opts.Limit, "limit", 5, "requests admitted per window, per client")
	f.DurationVar(&opts.Window, "window", 2*time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Clients, "clients", 40, "clients per algorithm, clock and skew")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "how long the stream runs")
	f.Float64Var(&opts.Load, "load", 1.2, "each client's mean rate as a multiple of its limit (each draws 0.8 to 1.2 times it)")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the stream: arrivals and the node of each request")
	f.IntVar(&opts.Connections, "connections", 64, "requests in flight at most")
	f.DurationVar(&opts.Timeout, "timeout", time.Second, "bound on one decision")
	f.StringVar(&opts.Redis, "redis", "", "Redis URL, or comma-separated URLs of a Cluster (default $REDIS_URL, else a private redis-server)")
	f.BoolVar(&opts.Cluster, "cluster", false, "treat --redis as a seed of a Redis Cluster")
	f.StringVarP(&opts.Output, "output", "o", "table", "output format: table, markdown or json")
	_ = cmd.RegisterFlagCompletionFunc("algorithms", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append(algorithms.Algorithms(), "all"), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("clock", cobra.FixedCompletions([]string{"both", "caller", "redis"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "markdown", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// skewFlagError names the flag that sets a field of skew.Config, in one
// table, and says what is wrong with it.
func skewFlagError(fe *skew.FieldError) error {
	flag := map[string]string{
		"Algorithms": "--algorithms", "Clocks": "--clock", "Skews": "--skews", "Limit": "--limit", "Window": "--window",
		"Clients": "--clients", "Duration": "--duration", "Load": "--load", "Connections": "--connections", "Timeout": "--timeout",
	}[fe.Field]
	if flag == "" {
		return &usageError{fe}
	}
	if strings.HasPrefix(fe.Reason, "must ") || strings.HasPrefix(fe.Reason, "names ") {
		return usagef("%s %s", flag, fe.Reason)
	}
	return usagef("%s: %s", flag, fe.Reason)
}

// skewConfig checks every flag and builds the run. Nothing is sent to
// Redis before it succeeds.
func skewConfig(opts skewOptions) (skew.Config, reports.Format, *redis.UniversalOptions, error) {
	var cfg skew.Config
	format, err := reports.ParseFormat(opts.Output)
	if err != nil {
		return cfg, "", nil, usagef("--output: %w", err)
	}
	var names []string
	for _, w := range strings.Split(opts.Algorithms, ",") {
		switch w = strings.TrimSpace(w); w {
		case "":
		case "all":
			names = append(names, algorithms.Algorithms()...)
		default:
			names = append(names, w)
		}
	}
	var clocks []algorithms.Clock
	switch opts.Clock {
	case "both":
		clocks = []algorithms.Clock{algorithms.ClockCaller, algorithms.ClockRedis}
	default:
		c, err := algorithms.ParseClock(opts.Clock)
		if err != nil {
			return cfg, "", nil, usagef("--clock: %w (or both)", err)
		}
		clocks = []algorithms.Clock{c}
	}
	cfg = skew.Config{
		Algorithms:  dedupe(names),
		Clocks:      clocks,
		Skews:       opts.Skews,
		Policy:      algorithms.Policy{Limit: opts.Limit, Window: opts.Window},
		Clients:     opts.Clients,
		Duration:    opts.Duration,
		Load:        opts.Load,
		Seed:        opts.Seed,
		Connections: opts.Connections,
		Timeout:     opts.Timeout,
	}
	if err := cfg.Validate(); err != nil {
		var fe *skew.FieldError
		if errors.As(err, &fe) {
			return cfg, "", nil, skewFlagError(fe)
		}
		return cfg, "", nil, &usageError{err}
	}
	ropts, err := redisOptions(opts.Redis, opts.Cluster)
	if err != nil {
		return cfg, "", nil, err
	}
	return cfg, format, ropts, nil
}

// dedupe drops repeated names, keeping the first.
func dedupe(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func runSkew(ctx context.Context, opts skewOptions) error {
	cfg, format, ropts, err := skewConfig(opts)
	if err != nil {
		return err
	}
	tgt, err := openTarget(ctx, ropts, opts.Stderr)
	if err != nil {
		return err
	}
	defer tgt.close()
	cfg.Redis = tgt.opts
	if opts.Progress {
		cfg.Progress = func(done, total int) {
			fmt.Fprintf(opts.Stderr, "\r\033[Kskew: %d of %d decisions", done, total)
		}
	}
	rep, err := skew.Run(ctx, cfg)
	if opts.Progress {
		fmt.Fprint(opts.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	rep.Redis = skew.Server{Mode: tgt.info.Mode, Version: tgt.info.Version, Addr: tgt.info.Addr}
	return reports.Skew(opts.Stdout, rep, format, reports.Options{Color: opts.Color})
}
