package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/reports"
)

// drillOptions are the flags of ratelab drill; drill.Config holds the rest.
type drillOptions struct {
	drill.Config
	engines, faults, modes, limit string
	enginesNamed                  bool // --engine was given, not left to its default
	maxP99                        time.Duration
	failOnLeak                    bool
	output                        outputFlag
}

// drillNames are the flags that set drill.Config's fields.
var drillNames = flagNames{"Engines": "--engine", "Faults": "--faults", "Modes": "--on-redis-error", "Latencies": "--fault-latency",
	"FaultDuration": "--fault-duration", "Steady": "--steady", "After": "--after", "Algorithm": "--algorithm",
	"Consumers": "--consumers", "Load": "--load", "Nodes": "--nodes", "Timeout": "--redis-timeout", "Batch": "--redis-batch",
	"BreakerFailures": "--breaker-failures", "DownAfter": "--down-after", "Limit": "--limit", "Window": "--limit", "Burst": "--limit"}

func newDrillCmd(io *ioStreams) *cobra.Command {
	var opts drillOptions
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Measure what the limiter does when its Redis fails: each fault, each fail mode, each engine",
		Long: `drill starts redis-server (and redis-sentinel for the failover), serves ratelab edge in front of
it, sends consumers near and over their limit through it with the bench http engine, and injects
one fault at a time after a steady period:

  hang          the Redis process stopped (SIGSTOP), then resumed
  restart       Redis killed and started again, empty
  latency       --fault-latency added between the gateway and Redis (toxiproxy, in-process)
  reset         every connection between the gateway and Redis cut (toxiproxy)
  script-flush  SCRIPT FLUSH at the start and every 250ms
  oom           Redis filled past its maxmemory (noeviction)
  failover      a primary and its replica under redis-sentinel, the primary killed

Each runs under each --on-redis-error mode (open, closed, local) on each --engine: go and
openresty (ratelab edge's engines, loaded over HTTP) or rls (ratelab rls, Envoy's rate limit
service, loaded through its gRPC ShouldRateLimit as Envoy calls it; it fails open or closed,
so its local runs are skipped). Every request sent is judged: admitted beyond the algorithm's guarantee, refused although an exact
sliding window would have admitted it, not decided by Redis; when the gateway noticed, when it
recovered, and the latency during the fault. docs/drill.md says how to read it.`,
		Example: `  ratelab drill
  ratelab drill --engine go --faults hang,oom --on-redis-error closed --fail-on-leak
  ratelab drill --faults hang --on-redis-error local --nodes 2 --output json
  ratelab drill --engine rls --on-redis-error open,closed`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.enginesNamed = cmd.Flags().Changed("engine")
			return runDrill(cmd.Context(), io, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.engines, "engine", "go,openresty", "engines, comma-separated: go, openresty, rls (left to the default, openresty is skipped where nginx is missing; named, it is required)")
	f.StringVar(&opts.faults, "faults", "all", "faults, comma-separated, or all: "+strings.Join(drill.Faults(), ", "))
	f.StringVar(&opts.modes, "on-redis-error", "open,closed,local", "fail modes to run each fault under, comma-separated")
	f.DurationSliceVar(&opts.Latencies, "fault-latency", []time.Duration{50 * time.Millisecond, 500 * time.Millisecond}, "latencies of the latency fault")
	f.DurationVar(&opts.FaultDuration, "fault-duration", 5*time.Second, "how long each fault lasts")
	f.DurationVar(&opts.Steady, "steady", 2*time.Second, "load before the fault")
	f.DurationVar(&opts.After, "after", 3*time.Second, "load after the fault")
	f.StringVar(&opts.limit, "limit", "10/1s", "each consumer's limit: requests/window, with :burst=N for --algorithm token-bucket or gcra")
	f.StringVar(&opts.Algorithm, "algorithm", "sliding-log", "the algorithm: "+strings.Join(algorithms.Algorithms(), ", "))
	f.IntVar(&opts.Consumers, "consumers", 20, "consumers")
	f.Float64Var(&opts.Load, "load", 1.5, "each consumer's rate as a multiple of its limit")
	f.IntVar(&opts.Nodes, "nodes", 1, "gateways sharing the limit, each sent the whole load (local limits each to --limit / --nodes)")
	f.DurationVar(&opts.Timeout, "redis-timeout", 200*time.Millisecond, "the gateways' bound on one decision in Redis")
	f.IntVar(&opts.Batch, "redis-batch", drill.DefaultBatch, "most decisions the go engine and the rls service send in one Redis round trip, "+
		"as their own --redis-batch (1: one call per decision)")
	f.IntVar(&opts.BreakerFailures, "breaker-failures", 5, "failures in a row that open a gateway's circuit (0: no circuit breaker)")
	f.DurationVar(&opts.DownAfter, "down-after", time.Second, "how long the sentinel waits before it holds the primary down")
	f.BoolVar(&opts.failOnLeak, "fail-on-leak", false, "exit 3 when any run admitted beyond the algorithm's guarantee")
	f.DurationVar(&opts.maxP99, "max-p99", 0, "exit 3 when any run's p99 latency during the fault is above this")
	opts.output.bind(cmd)
	complete(cmd, "faults", append(drill.Faults(), "all")...)
	complete(cmd, "algorithm", algorithms.Algorithms()...)
	cmd.AddCommand(newDrillInFlightCmd(io))
	return cmd
}

// drillConfig checks every flag; nothing starts before it succeeds.
func drillConfig(opts drillOptions) (drill.Config, reports.Format, error) {
	cfg := opts.Config
	format, err := opts.output.format()
	if err != nil {
		return cfg, "", err
	}
	if cfg.Policy, err = algorithms.ParsePolicy(opts.limit); err != nil {
		return cfg, "", usagef("--limit %w", err)
	}
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	}
	cfg.Engines, cfg.Modes = split(opts.engines), split(opts.modes)
	if opts.faults != "all" {
		cfg.Faults = split(opts.faults)
	}
	switch {
	case len(cfg.Engines) == 0:
		return cfg, "", usagef("--engine names no engine")
	case len(cfg.Modes) == 0:
		return cfg, "", usagef("--on-redis-error names no mode")
	case len(cfg.Faults) == 0 && opts.faults != "all":
		return cfg, "", usagef("--faults names no fault")
	case len(cfg.Latencies) == 0:
		return cfg, "", usagef("--fault-latency names no latency")
	case opts.maxP99 < 0:
		return cfg, "", usagef("--max-p99 must not be negative (got %s)", opts.maxP99)
	case opts.BreakerFailures < 0:
		return cfg, "", usagef("--breaker-failures must not be negative (got %d)", opts.BreakerFailures)
	}
	// Zero is the library's default: here it can only be a mistake.
	for name, v := range map[string]int{"--consumers": cfg.Consumers, "--nodes": cfg.Nodes, "--redis-batch": cfg.Batch} {
		if v < 1 {
			return cfg, "", usagef("%s must be at least 1 (got %d)", name, v)
		}
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = -1 // no circuit breaker
	}
	if !opts.enginesNamed {
		cfg.Engines = nil // both, openresty only where nginx is found
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", flagError(err, drillNames)
	}
	if slices.Contains(cfg.Engines, edge.EngineOpenResty) {
		if _, _, err := edge.FindNginx(); err != nil {
			return cfg, "", usagef("--engine names openresty, which needs nginx with its lua module: %v", err)
		}
	}
	return cfg, format, nil
}

func runDrill(ctx context.Context, io *ioStreams, opts drillOptions) error {
	cfg, format, err := drillConfig(opts)
	if err != nil {
		return err
	}
	cfg.Progress = func(run, runs int, name string) { io.status("drill %d/%d: %s", run, runs, name) }
	rep, err := drill.Run(ctx, cfg)
	io.clearStatus()
	if err != nil {
		return err
	}
	if err := reports.Drill(io.out, rep, format, io.render()); err != nil {
		return err
	}
	var crossed []string
	if leaked := rep.Leaked(); opts.failOnLeak && len(leaked) > 0 {
		crossed = append(crossed, "--fail-on-leak: "+strings.Join(leaked, ", "))
	}
	for _, r := range rep.Results {
		if p99 := time.Duration(r.P99Millis * float64(time.Millisecond)); opts.maxP99 > 0 && p99 > opts.maxP99 {
			crossed = append(crossed, "--max-p99: "+r.Name()+": p99 "+p99.String()+" is above "+opts.maxP99.String())
		}
	}
	if len(crossed) > 0 {
		return &thresholdError{strings.Join(crossed, "; ")}
	}
	return nil
}
