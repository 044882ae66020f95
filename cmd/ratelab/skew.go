package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/skew"
)

// skewOptions are the flags of ratelab skew; skew.Config holds the rest.
type skewOptions struct {
	skew.Config
	algorithms, clock string
	redis             redisFlags
	output            outputFlag
}

// skewNames are the flags that set skew.Config's fields.
var skewNames = flagNames{"Algorithms": "--algorithms", "Clocks": "--clock", "Skews": "--skews", "Clients": "--clients",
	"Duration": "--duration", "Load": "--load", "Connections": "--connections", "Timeout": "--timeout"}

func newSkewCmd(io *ioStreams) *cobra.Command {
	var opts skewOptions
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
		RunE: func(cmd *cobra.Command, _ []string) error { return runSkew(cmd.Context(), io, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.algorithms, "algorithms", "all", "algorithms to measure, comma-separated, or all: "+strings.Join(algorithms.Algorithms(), ", "))
	f.StringVar(&opts.clock, "clock", "both", "clocks to run each algorithm on: caller, redis or both")
	f.DurationSliceVar(&opts.Skews, "skews", skew.DefaultSkews(), "one clock offset per simulated node, whole milliseconds")
	f.Int64Var(&opts.Policy.Limit, "limit", 5, "requests admitted per window, per client")
	f.DurationVar(&opts.Policy.Window, "window", 2*time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Clients, "clients", 40, "clients per algorithm, clock and skew")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "how long the stream runs")
	f.Float64Var(&opts.Load, "load", 1.2, "each client's mean rate as a multiple of its limit (each draws 0.8 to 1.2 times it)")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the stream: arrivals and the node of each request")
	f.IntVar(&opts.Connections, "connections", 64, "requests in flight at most")
	f.DurationVar(&opts.Timeout, "timeout", time.Second, "bound on one decision")
	opts.redis.bind(f, false)
	opts.output.bind(cmd)
	complete(cmd, "algorithms", append(algorithms.Algorithms(), "all")...)
	complete(cmd, "clock", "both", "caller", "redis")
	return cmd
}

// skewConfig checks every flag and builds the run. Nothing is started or
// sent before it succeeds.
func skewConfig(opts skewOptions) (skew.Config, reports.Format, error) {
	cfg := opts.Config
	format, err := opts.output.format()
	if err != nil {
		return cfg, "", err
	}
	cfg.Algorithms = nil
	for _, w := range strings.Split(opts.algorithms, ",") {
		names := []string{strings.TrimSpace(w)}
		if names[0] == "all" {
			names = algorithms.Algorithms()
		}
		for _, n := range names {
			if n != "" && !slices.Contains(cfg.Algorithms, n) {
				cfg.Algorithms = append(cfg.Algorithms, n)
			}
		}
	}
	cfg.Clocks = []algorithms.Clock{algorithms.ClockCaller, algorithms.ClockRedis}
	if opts.clock != "both" {
		c, err := algorithms.ParseClock(opts.clock)
		if err != nil {
			return cfg, "", usagef("--clock: %w (or both)", err)
		}
		cfg.Clocks = []algorithms.Clock{c}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", flagError(err, skewNames, policyNames)
	}
	return cfg, format, nil
}

func runSkew(ctx context.Context, io *ioStreams, opts skewOptions) error {
	cfg, format, err := skewConfig(opts)
	if err != nil {
		return err
	}
	target, err := opts.redis.config(io)
	if err != nil {
		return err
	}
	t, err := openTarget(ctx, io, target, "skew")
	if err != nil {
		return err
	}
	defer t.Close()
	cfg.Redis = t.Options
	cfg.Progress = func(done, total int) { io.status("skew: %d of %d decisions", done, total) }
	rep, err := skew.Run(ctx, cfg)
	io.clearStatus()
	if err != nil {
		return err
	}
	rep.Redis = t.Info
	return reports.Skew(io.out, rep, format, io.render())
}
