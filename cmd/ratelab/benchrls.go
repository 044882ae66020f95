package main

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/reports"
)

// benchRLSOptions are the flags of ratelab bench rls; bench.RLSConfig and
// bench.Thresholds hold the rest.
type benchRLSOptions struct {
	bench.RLSConfig
	bench.Thresholds
	descriptors  []string
	hitsAddend   int64
	expectLimit  string
	expectConfig string
	threads      int
	shard        string
	startAt      string
	hgrm         string
	output       outputFlag
}

// benchRLSNames are the flags that set bench.RLSConfig's fields; the
// others are bench http's (benchNames).
var benchRLSNames = flagNames{"Target": "ADDR", "Domain": "--domain", "Descriptors": "--descriptor", "HitsAddend": "--hits-addend",
	"ExpectConfig": "--expect-config", "ExpectLimits": "--expect-limit"}

func newBenchRLSCmd(io *ioStreams) *cobra.Command {
	var opts benchRLSOptions
	cmd := &cobra.Command{
		Use:   "rls ADDR",
		Short: "Load-test an Envoy rate limit service (envoy.service.ratelimit.v3) over gRPC",
		Long: `bench rls calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit at ADDR (HOST:PORT,
plaintext gRPC), on the engine of bench http: the open model (--rate, latency timed from each
call's intended send time, as wrk2 does) or the closed one (--rate 0), HDR histograms, the
timeline, JSON, --shard and report merge / report html. Each connection is a gRPC channel of
its own, with one call in flight at a time.

Every call has --domain and the --descriptor values in order, each key=value[,key=value…] one
descriptor; {consumer} in a value stands for the consumer (consumer-0 … consumer-K-1 over
--consumers K), {{ for a literal {. --hits-addend sets the call's hits_addend.

A call answered OK counts as a 2xx and one OVER_LIMIT as a 429, so that results read, merge
and render as bench http's; a call the service refuses with a gRPC error (InvalidArgument,
Unimplemented …) or that cannot reach it is an error. A run in which no call got an answer
exits 1. docs/envoy.md says more.`,
		Example: `  ratelab bench rls 127.0.0.1:8081 --domain edge --descriptor 'user={consumer}' --consumers 50 --rate 2000 --duration 30s
  ratelab bench rls 127.0.0.1:8081 --domain edge --descriptor generic_key=global --rate 0 --connections 64 --duration 10s -o json > run.json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("bench rls takes one ADDR, HOST:PORT (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRLS(cmd.Context(), io, args[0], opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Domain, "domain", "", "the domain of every call (required)")
	f.StringArrayVar(&opts.descriptors, "descriptor", nil, "one descriptor of every call, key=value[,key=value…] ({consumer} may stand in a value; repeatable, in order)")
	f.Int64Var(&opts.hitsAddend, "hits-addend", 0, "the call's hits_addend: what each descriptor takes of its limit (0: unset, which the service reads as 1)")
	f.IntVar(&opts.Consumers, "consumers", 1, "consumers to spread the calls over, named where {consumer} stands")
	f.Float64Var(&opts.Rate, "rate", 100, "calls per second in total (open model); 0 for the closed model")
	f.IntVar(&opts.Connections, "connections", 10, "gRPC channels, each with one call in flight at a time")
	f.IntVar(&opts.threads, "threads", 0, "threads the load generator runs on (GOMAXPROCS), as wrk's -t (0: every core)")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "length of the measured run (0: bounded by --requests)")
	f.Int64Var(&opts.Requests, "requests", 0, "measured calls to send, at most")
	f.DurationVar(&opts.Warmup, "warmup", 0, "load before the measured run, reported apart")
	f.DurationVar(&opts.Timeout, "timeout", 10*time.Second, "bound on one call, connecting included")
	f.DurationVar(&opts.Interval, "interval", time.Second, "length of the timeline's intervals")
	f.StringVar(&opts.hgrm, "hgrm", "", "write the latency distribution to FILE in HdrHistogram's percentile format (ms)")
	f.DurationVar(&opts.MaxP99, "max-p99", 0, "exit 3 when the p99 latency is above this")
	f.Var(optionalFloat{&opts.MaxErrorRate}, "max-error-rate", "exit 3 when the share of failed calls (errors, and answers neither OK nor OVER_LIMIT) is above this (0 to 1; 0: exit 3 on any)")
	f.StringVar(&opts.expectLimit, "expect-limit", "", "audit each descriptor's counter against LIMIT/WINDOW in hits, such as 100/1m, or LIMIT/WINDOW:ALGORITHM")
	f.StringVar(&opts.ExpectAlgorithm, "expect-algorithm", "", "hold the service to this algorithm's guarantee for --expect-limit: "+
		strings.Join(algorithms.Algorithms(), ", ")+" (default: the sliding-window rule, at most LIMIT in any WINDOW)")
	f.StringVar(&opts.expectConfig, "expect-config", "", "audit the service by its own configuration DIR (envoyproxy/ratelimit's files): "+
		"each descriptor held to the limits it meets there (not with --expect-limit)")
	f.BoolVar(&opts.FailOnLeak, "fail-on-leak", false, "exit 3 unless the audit finds every limit held: a counter over it, no verdict, "+
		"a false duration_until_reset, or inconsistent statuses")
	f.BoolVar(&opts.AllowNoVerdict, "allow-no-verdict", false, "with --fail-on-leak, pass an audit that could not judge (a shared limit still fails)")
	f.Var(optionalFloat{&opts.FailOnUnder}, "fail-on-under", "exit 3 when above this share (0 to 1) of the denials judged were ones the rule would have admitted")
	f.BoolVar(&opts.NoProbes, "no-probes", false, "skip the audit's probes of duration_until_reset (they wait up to it + 10 s after the run)")
	f.StringVar(&opts.shard, "shard", "", "I/N: this load machine is shard I (from 0) of N sharing --rate, --connections and --requests")
	f.BoolVar(&opts.SharedConsumers, "shared-consumers", false, "with --shard, every shard sends every consumer (by default shard I sends those ≡ I mod N)")
	f.StringVar(&opts.startAt, "start-at", "", "begin at this wall-clock time, the same on every shard: RFC 3339, or next:D, "+
		"the next multiple of D on the UTC clock at least 15s ahead (next:1m: the next whole minute)")
	f.StringVar(&opts.RunID, "run-id", "", "the run this shard is part of, for report merge (default: a hash of the address, the calls, the load and --start-at)")
	opts.output.bind(cmd)
	complete(cmd, "expect-algorithm", algorithms.Algorithms()...)
	return cmd
}

// benchRLSConfig checks every flag; nothing is sent before it succeeds.
func benchRLSConfig(target string, opts benchRLSOptions) (bench.RLSConfig, reports.Format, error) {
	cfg := opts.RLSConfig
	cfg.Target = target
	format, err := opts.output.format()
	if err != nil {
		return cfg, "", err
	}
	for _, v := range opts.descriptors {
		d, err := bench.ParseDescriptor(v)
		if err != nil {
			return cfg, "", flagError(err, benchRLSNames)
		}
		cfg.Descriptors = append(cfg.Descriptors, d)
	}
	if opts.hitsAddend < 0 || opts.hitsAddend > 1<<32-1 {
		return cfg, "", usagef("--hits-addend must be between 0 and %d (got %d)", uint32(1<<32-1), opts.hitsAddend)
	}
	cfg.HitsAddend = uint32(opts.hitsAddend)
	if err := rlsExpect(&cfg, opts); err != nil {
		return cfg, "", err
	}
	if opts.shard != "" {
		i, n, _ := strings.Cut(opts.shard, "/")
		var errI, errN error
		cfg.Shard, errI = strconv.Atoi(i)
		cfg.Shards, errN = strconv.Atoi(n)
		if errI != nil || errN != nil || cfg.Shards < 1 {
			return cfg, "", usagef("--shard %q: want I/N, such as 0/3", opts.shard)
		}
	}
	if opts.startAt != "" {
		if cfg.StartAt, err = parseStartAt(opts.startAt, time.Now()); err != nil {
			return cfg, "", err
		}
	}
	switch {
	case cfg.Connections < 1:
		return cfg, "", usagef("--connections must be at least 1 (got %d)", cfg.Connections)
	case cfg.Consumers < 1:
		return cfg, "", usagef("--consumers must be at least 1 (got %d)", cfg.Consumers)
	case cfg.Timeout <= 0:
		return cfg, "", usagef("--timeout must be positive (got %s)", cfg.Timeout)
	case opts.threads < 0 || opts.threads > 1024:
		return cfg, "", usagef("--threads must be between 0 (every core) and 1024 (got %d)", opts.threads)
	}
	if err := errors.Join(cfg.Validate(), opts.Thresholds.Validate()); err != nil {
		return cfg, "", flagError(err, benchRLSNames, benchNames)
	}
	return cfg, format, nil
}

func runBenchRLS(ctx context.Context, io *ioStreams, target string, opts benchRLSOptions) error {
	cfg, format, err := benchRLSConfig(target, opts)
	if err != nil {
		return err
	}
	cfg.Progress = func(p bench.Progress) { io.status("%s", reports.BenchProgress(p)) }
	if opts.threads > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(opts.threads))
	}
	res, runErr := bench.RunRLS(ctx, cfg)
	io.clearStatus()
	return finishBench(io, res, runErr, format, opts.hgrm, opts.Thresholds)
}

// rlsExpect reads the flags of what the audit expects into cfg.
func rlsExpect(cfg *bench.RLSConfig, opts benchRLSOptions) error {
	switch {
	case opts.expectLimit != "" && opts.expectConfig != "":
		return usagef("--expect-config and --expect-limit are two audits: give one")
	case opts.expectConfig != "" && opts.ExpectAlgorithm != "":
		return usagef("--expect-algorithm is for --expect-limit: each limit of --expect-config names its own")
	case opts.expectLimit == "" && opts.expectConfig == "" && opts.FailOnLeak:
		return usagef("--fail-on-leak needs --expect-limit or --expect-config")
	case opts.expectLimit == "" && opts.expectConfig == "" && opts.FailOnUnder != nil:
		return usagef("--fail-on-under needs --expect-limit or --expect-config")
	}
	if opts.expectLimit != "" {
		ls, err := bench.ParseExpectedLimits(opts.expectLimit, opts.ExpectAlgorithm)
		if err != nil {
			return flagError(err, benchRLSNames, benchNames)
		}
		if len(ls) != 1 {
			return usagef("--expect-limit %q: give one LIMIT/WINDOW, which every descriptor is held to (or --expect-config)", opts.expectLimit)
		}
		cfg.ExpectLimit, cfg.ExpectWindow, cfg.ExpectAlgorithm = ls[0].Limit, ls[0].Window, ls[0].Algorithm
	}
	if opts.expectConfig != "" {
		d, err := edge.LoadDomains(opts.expectConfig)
		if err != nil {
			return usagef("--expect-config: %w", err)
		}
		set, ok := d.Sets[cfg.Domain]
		if !ok {
			return usagef("--expect-config %s: no file of it has domain %q (it has %s)", opts.expectConfig, cfg.Domain,
				strings.Join(slices.Sorted(maps.Keys(d.Sets)), ", "))
		}
		cfg.ExpectConfig = set
	}
	return nil
}
