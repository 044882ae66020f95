package main

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/rls"
)

// benchRLSOptions are the flags of ratelab bench rls; bench.RLSConfig and
// bench.Thresholds hold the rest.
type benchRLSOptions struct {
	bench.RLSConfig
	loadFlags
	descriptors  []string
	calls        []string
	hitsAddend   int64
	expectLimit  string
	expectConfig string
	mergeDomains bool
}

// benchRLSNames are the flags that set bench.RLSConfig's fields; the
// others are bench http's (benchNames).
var benchRLSNames = flagNames{"Target": "ADDR", "Domain": "--domain", "Descriptors": "--descriptor", "Sets": "--call", "HitsAddend": "--hits-addend",
	"Identities": "--consumers-from", "ExpectConfig": "--expect-config", "ExpectLimits": "--expect-limit",
	"TLS": "--tls", "TLSCAFile": "--tls-ca", "TLSCertFile": "--tls-cert", "TLSKeyFile": "--tls-key", "TLSServerName": "--tls-server-name",
	"Insecure": "--insecure"}

func newBenchRLSCmd(io *ioStreams) *cobra.Command {
	var opts benchRLSOptions
	cmd := &cobra.Command{
		Use:   "rls ADDR",
		Short: "Load-test an Envoy rate limit service (envoy.service.ratelimit.v3) over gRPC",
		Long: `bench rls calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit at ADDR (HOST:PORT,
gRPC, plaintext unless --tls), on the engine of bench http: the open model (--rate, latency timed from each
call's intended send time, as wrk2 does) or the closed one (--rate 0), HDR histograms, the
timeline, JSON, --shard and report merge / report html. Each connection is a gRPC channel of
its own, with one call in flight at a time.

Every call has --domain and the --descriptor values in order, each key=value[,key=value…] one
descriptor (\, is a comma inside a value, \\ a backslash; any other backslash is refused, so
'path=/a\,b' sends the value /a,b); {consumer} in a value stands for the consumer (consumer-0 …
consumer-K-1 over --consumers K, or the lines of --consumers-from, by whose pseudonyms, or with
--show-identities by which, the audit and report merge then name the consumers), {{ for a literal {. --hits-addend sets the call's hits_addend.

--call WEIGHT:DESCRIPTOR[;DESCRIPTOR…], in place of --descriptor and repeatable, mixes kinds of
call: each call sends the descriptors of one --call, picked by weight as bench http's --path
picks routes: --call '1:path=/search,user={consumer}' --call '3:path=/items,user={consumer}' sends
path=/search in a quarter of each consumer's calls. The weight (1 to 1000) comes first; a call's
descriptors are separated by ; (\; is a semicolon inside a value). The pick is fixed by each
call's place in the schedule, so a run of whole rounds (the weights' sum of calls per consumer)
sends exactly the weights, and the audit judges each call by the descriptors it sent.

A call answered OK counts as a 2xx and one OVER_LIMIT as a 429, so that results read, merge
and render as bench http's; a call the service refuses with a gRPC error (InvalidArgument,
Unimplemented …) or that cannot reach it is an error. A run in which no call got an answer
exits 1.

--tls calls over TLS, verifying the service's certificate against the system's roots, or
--tls-ca's, for ADDR's host or --tls-server-name; --tls-cert and --tls-key give a client
certificate, for a service that asks for one (mutual TLS). Each of these implies --tls.
docs/envoy.md says more.`,
		Example: `  ratelab bench rls 127.0.0.1:8081 --domain edge --descriptor 'user={consumer}' --consumers 50 --rate 2000 --duration 30s
  ratelab bench rls 127.0.0.1:8081 --domain edge --descriptor 'api_key={consumer}' --consumers-from keys.txt --rate 200 --expect-limit 10/1s
  ratelab bench rls 127.0.0.1:8081 --domain edge --descriptor generic_key=global --rate 0 --connections 64 --duration 10s -o json > run.json
  ratelab bench rls 127.0.0.1:8081 --domain edge --call '1:path=/search,user={consumer}' --call '3:path=/items,user={consumer};generic_key=global' --consumers 4 --rate 100 --expect-config ./config
  ratelab bench rls rls.internal:8081 --tls-ca ca.pem --tls-cert bench.pem --tls-key bench-key.pem --domain edge --descriptor user=a --duration 10s`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("bench rls takes one ADDR, HOST:PORT (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.consumersSet = cmd.Flags().Changed("consumers")
			return runBenchRLS(cmd.Context(), io, args[0], opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Domain, "domain", "", "the domain of every call (required)")
	f.StringArrayVar(&opts.descriptors, "descriptor", nil, "one descriptor of every call, key=value[,key=value…] (\\, a comma in a value, \\\\ a backslash; {consumer} may stand in a value; repeatable, in order)")
	f.StringArrayVar(&opts.calls, "call", nil, "one kind of call of a mix, WEIGHT:DESCRIPTOR[;DESCRIPTOR…]: its descriptors, sent in WEIGHT "+
		"of every sum-of-the-weights calls (\\; a semicolon in a value; repeatable; in place of --descriptor)")
	f.Int64Var(&opts.hitsAddend, "hits-addend", 0, "the call's hits_addend: what each descriptor takes of its limit (0: unset, which the service reads as 1)")
	f.IntVar(&opts.Consumers, "consumers", 1, "consumers to spread the calls over, named where {consumer} stands")
	f.BoolVar(&opts.TLS, "tls", false, "call over TLS, verifying the service's certificate against the system's roots (or --tls-ca's)")
	f.StringVar(&opts.TLSCAFile, "tls-ca", "", "PEM file of the certificates that sign the service's (implies --tls)")
	f.StringVar(&opts.TLSCertFile, "tls-cert", "", "PEM file of a client certificate, for a service that asks for one: mutual TLS (with --tls-key; implies --tls)")
	f.StringVar(&opts.TLSKeyFile, "tls-key", "", "PEM file of --tls-cert's key")
	f.StringVar(&opts.TLSServerName, "tls-server-name", "", "the name the service's certificate is verified for (default: ADDR's host; implies --tls)")
	f.BoolVar(&opts.Insecure, "insecure", false, "do not verify the service's certificate (for test services; implies --tls)")
	f.StringVar(&opts.expectLimit, "expect-limit", "", "audit each descriptor's counter against LIMIT/WINDOW in hits, such as 100/1m, or LIMIT/WINDOW:ALGORITHM, "+
		"with :burst=N for token-bucket and gcra (10/1s:gcra:burst=6: 6 at once, then 10 a second)")
	f.StringVar(&opts.ExpectAlgorithm, "expect-algorithm", "", "hold the service to this algorithm's guarantee for --expect-limit: "+
		strings.Join(algorithms.Algorithms(), ", ")+" (default: the sliding-window rule, at most LIMIT in any WINDOW)")
	f.StringVar(&opts.expectConfig, "expect-config", "", "audit the service by its own configuration DIR (envoyproxy/ratelimit's files): "+
		"each descriptor held to the limits it meets there (not with --expect-limit)")
	f.BoolVar(&opts.mergeDomains, "merge-domains", false, "read --expect-config as ratelab rls --merge-domains reads it: the files of one domain merged")
	opts.loadFlags.bind(cmd, loadFields{Rate: &opts.Rate, Connections: &opts.Connections, Duration: &opts.Duration, Requests: &opts.Requests,
		Warmup: &opts.Warmup, Timeout: &opts.Timeout, Interval: &opts.Interval, SharedConsumers: &opts.SharedConsumers, RunID: &opts.RunID,
		NoProbes: &opts.NoProbes, ShowIdentities: &opts.ShowIdentities}, loadHelp{Request: "call", Connection: "gRPC channels, each with one call in flight at a time",
		ErrorRate:  "exit 3 when the share of failed calls (errors, and answers neither OK nor OVER_LIMIT) is above this (0 to 1; 0: exit 3 on any)",
		FailOnLeak: "exit 3 unless the audit finds every limit held: a counter over one, one the load never reached or no verdict (unless allowed), a false duration_until_reset, or inconsistent statuses",
		NoProbes:   "skip the audit's probes of duration_until_reset (they wait up to it + 10 s after the run)",
		RunID:      "the run this shard is part of, for report merge (default: a hash of the address, the calls, the load and --start-at)",
		ConsumersFrom: "FILE of identities (API keys, tenants), one a line, sent where {consumer} stands instead of consumer-0 …; " +
			"blank lines and # comments skipped"})
	complete(cmd, "expect-algorithm", algorithms.Algorithms()...)
	return cmd
}

// benchRLSConfig checks every flag; nothing is sent before it succeeds.
func benchRLSConfig(target string, opts benchRLSOptions) (bench.RLSConfig, reports.Format, error) {
	cfg := opts.RLSConfig
	cfg.Target = target
	cfg.TLS = cfg.TLS || cfg.TLSCAFile != "" || cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" || cfg.TLSServerName != "" || cfg.Insecure
	lc, err := opts.loadFlags.config(cfg.Connections, cfg.Timeout)
	if err != nil {
		return cfg, "", err
	}
	cfg.Shard, cfg.Shards, cfg.StartAt = lc.shard, lc.shards, lc.startAt
	for _, v := range opts.descriptors {
		d, err := bench.ParseDescriptor(v)
		if err != nil {
			return cfg, "", flagError(err, benchRLSNames)
		}
		cfg.Descriptors = append(cfg.Descriptors, d)
	}
	for _, v := range opts.calls {
		set, err := bench.ParseDescriptorSet(v)
		if err != nil {
			return cfg, "", flagError(err, benchRLSNames)
		}
		cfg.Sets = append(cfg.Sets, set)
	}
	if opts.hitsAddend < 0 || opts.hitsAddend > 1<<32-1 {
		return cfg, "", usagef("--hits-addend must be between 0 and %d (got %d)", uint32(1<<32-1), opts.hitsAddend)
	}
	cfg.HitsAddend = uint32(opts.hitsAddend)
	if err := rlsExpect(&cfg, opts); err != nil {
		return cfg, "", err
	}
	ids, err := opts.loadFlags.identities(cfg.Consumers)
	if err != nil {
		return cfg, "", err
	}
	if ids != nil {
		cfg.Identities, cfg.Consumers = ids, len(ids)
	}
	if cfg.Consumers < 1 {
		return cfg, "", usagef("--consumers must be at least 1 (got %d)", cfg.Consumers)
	}
	if err := errors.Join(cfg.Validate(), opts.Thresholds.Validate()); err != nil {
		return cfg, "", flagError(err, benchRLSNames, benchNames)
	}
	return cfg, lc.format, nil
}

func runBenchRLS(ctx context.Context, io *ioStreams, target string, opts benchRLSOptions) error {
	cfg, format, err := benchRLSConfig(target, opts)
	if err != nil {
		return err
	}
	if err := opts.untested(cfg.LimitIDs()); err != nil {
		return err
	}
	cfg.Progress = func(p bench.Progress) { io.status("%s", reports.BenchProgress(p, bench.RLSWords())) }
	return opts.loadFlags.run(io, format, func() (bench.Result, error) { return bench.RunRLS(ctx, cfg) })
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
		ls, err := audit.ParseExpectedLimits(opts.expectLimit, opts.ExpectAlgorithm)
		if err != nil {
			return flagError(err, benchRLSNames, benchNames)
		}
		if len(ls) != 1 {
			return usagef("--expect-limit %q: give one LIMIT/WINDOW, which every descriptor is held to (or --expect-config)", opts.expectLimit)
		}
		cfg.ExpectLimit, cfg.ExpectWindow, cfg.ExpectAlgorithm, cfg.ExpectBurst = ls[0].Limit, ls[0].Window, ls[0].Algorithm, ls[0].Burst
	}
	if opts.expectConfig != "" {
		d, _, err := limiter.ReadRules(context.Background(), rls.Options{ConfigDir: opts.expectConfig, MergeDomains: opts.mergeDomains}.RulesConfig())
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
