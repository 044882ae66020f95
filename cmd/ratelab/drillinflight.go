package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/reports"
)

// drillInFlightOptions are the flags of ratelab drill in-flight.
type drillInFlightOptions struct {
	drill.InFlightConfig
	engines      string
	enginesNamed bool
	failOnLeak   bool
	output       outputFlag
}

// drillInFlightNames are the flags that set drill.InFlightConfig's fields.
var drillInFlightNames = flagNames{"Engines": "--engine", "InFlight": "--in-flight", "Lease": "--in-flight-lease",
	"Hold": "--upstream-delay", "Consumers": "--consumers", "Steady": "--steady", "Watch": "--watch"}

func newDrillInFlightCmd(io *ioStreams) *cobra.Command {
	var opts drillInFlightOptions
	cmd := &cobra.Command{
		Use:   "in-flight",
		Short: "Kill a gateway that holds in-flight slots and restart it: leases come back, counters leak",
		Long: `drill in-flight starts redis-server and serves ratelab edge with --in-flight in front of it
(its built-in upstream holding each request for --upstream-delay), keeps --in-flight requests of
each consumer outstanding, then kills the gateway while it holds their slots: its Redis
connections are cut at once, so none of its releases arrive, and it is stopped. A new gateway
starts on the same Redis, and the drill watches, polling Redis, until the dead gateway's slots
come back. Each engine runs the gateway's lease; the go engine's row is followed by a counter
semaphore (INCR when a request comes, DECR when it ends) killed the same way, whose slots stay
counted until someone deletes the key. docs/drill.md says how to read it.`,
		Example: `  ratelab drill in-flight
  ratelab drill in-flight --engine go --in-flight 10 --in-flight-lease 5s --fail-on-leak
  ratelab drill in-flight --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.enginesNamed = cmd.Flags().Changed("engine")
			return runDrillInFlight(cmd.Context(), io, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.engines, "engine", "go,openresty", "engines, comma-separated: go, openresty (left to the default, openresty is skipped where nginx is missing; named, it is required)")
	f.Int64Var(&opts.InFlight, "in-flight", 5, "each consumer's most requests in flight at once; the load keeps this many outstanding per consumer")
	f.DurationVar(&opts.Lease, "in-flight-lease", 2*time.Second, "how long a slot is held when its release never comes")
	f.DurationVar(&opts.Hold, "upstream-delay", 300*time.Millisecond, "how long the built-in upstream holds each request (shorter than the lease)")
	f.IntVar(&opts.Consumers, "consumers", 4, "consumers")
	f.DurationVar(&opts.Steady, "steady", time.Second, "load before the kill")
	f.DurationVar(&opts.Watch, "watch", 0, "how long to watch after the kill (default the lease and 2s)")
	f.BoolVar(&opts.failOnLeak, "fail-on-leak", false, "exit 3 when a gateway's leases still held a slot at the end (the counter leaks by design)")
	opts.output.bind(cmd)
	return cmd
}

// drillInFlightConfig checks every flag; nothing starts before it succeeds.
func drillInFlightConfig(opts drillInFlightOptions) (drill.InFlightConfig, error) {
	cfg := opts.InFlightConfig
	cfg.Engines = strings.FieldsFunc(opts.engines, func(r rune) bool { return r == ',' || r == ' ' })
	switch {
	case len(cfg.Engines) == 0:
		return cfg, usagef("--engine names no engine")
	case cfg.InFlight < 1:
		return cfg, usagef("--in-flight must be at least 1 (got %d)", cfg.InFlight)
	case cfg.Consumers < 1:
		return cfg, usagef("--consumers must be at least 1 (got %d)", cfg.Consumers)
	case cfg.Watch < 0:
		return cfg, usagef("--watch must not be negative (got %s)", cfg.Watch)
	}
	if !opts.enginesNamed {
		cfg.Engines = nil // both, openresty only where nginx is found
	}
	check := cfg
	if check.Watch == 0 {
		check.Watch = check.Lease + 2*time.Second
	}
	if err := check.Validate(); err != nil {
		return cfg, flagError(err, drillInFlightNames)
	}
	if slices.Contains(cfg.Engines, edge.EngineOpenResty) {
		if _, _, err := edge.FindNginx(); err != nil {
			return cfg, usagef("--engine names openresty, which needs nginx with its lua module: %v", err)
		}
	}
	return cfg, nil
}

func runDrillInFlight(ctx context.Context, io *ioStreams, opts drillInFlightOptions) error {
	format, err := opts.output.format()
	if err != nil {
		return err
	}
	cfg, err := drillInFlightConfig(opts)
	if err != nil {
		return err
	}
	cfg.Progress = func(run, runs int, name string) { io.status("drill in-flight %d/%d: %s", run, runs, name) }
	rep, err := drill.RunInFlight(ctx, cfg)
	io.clearStatus()
	if err != nil {
		return err
	}
	if err := reports.DrillInFlight(io.out, rep, format, io.render()); err != nil {
		return err
	}
	if !opts.failOnLeak {
		return nil
	}
	var leaked []string
	for _, r := range rep.Results {
		if r.Kind == drill.KindLease && r.LeakedAtEnd > 0 {
			leaked = append(leaked, fmt.Sprintf("%s: %d slots leaked", r.Name(), r.LeakedAtEnd))
		}
	}
	if len(leaked) > 0 {
		return &thresholdError{"--fail-on-leak: " + strings.Join(leaked, ", ")}
	}
	return nil
}
