package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/reports"
)

// benchOptions are the flags of ratelab bench http; bench.HTTPConfig and
// bench.Thresholds hold the rest.
type benchOptions struct {
	bench.HTTPConfig
	loadFlags
	headers []string
	body    string
	// jwtSecret and jwtClaims name the consumers (with loadFlags'
	// consumersFrom); the Set fields say whether --consumer-header and
	// --connections were given.
	jwtSecret         string
	jwtClaims         []string
	consumerHeaderSet bool
	connectionsSet    bool
	sourceIPs         string
	expectLimits      []string
	expectRules       string
	// inFlightPerConsumer is --in-flight-per-consumer: connections per
	// consumer, each with one request outstanding.
	inFlightPerConsumer int
	paths               []string
	values              []string
}

// benchNames are the flags that set bench.HTTPConfig's and
// bench.Thresholds' fields.
var benchNames = flagNames{"Target": "URL", "Rate": "--rate", "Connections": "--connections", "Duration": "--duration",
	"Requests": "--requests", "Warmup": "--warmup", "Consumers": "--consumers", "ConsumerHeader": "--consumer-header",
	"Timeout": "--timeout", "Interval": "--interval", "ExpectLimit": "--expect-limit", "ExpectBurst": "--expect-limit", "ExpectAlgorithm": "--expect-algorithm",
	"ExpectLimits": "--expect-limit", "ExpectRules": "--expect-rules", "ExpectInFlight": "--expect-in-flight", "Hold": "--hold", "Routes": "--path", "ConsumerValues": "--consumer-values",
	"MaxP99": "--max-p99", "MaxErrorRate": "--max-error-rate", "FailOnLeak": "--fail-on-leak", "AllowNoVerdict": "--allow-no-verdict", "AllowUntested": "--allow-untested",
	"FailOnUnder": "--fail-on-under", "Shard": "--shard",
	"Shards": "--shard", "SharedConsumers": "--shared-consumers", "StartAt": "--start-at", "Header": "--header", "Method": "--method",
	"Body": "--body", "Identities": "--consumers-from", "JWTSecret": "--jwt-secret", "JWTClaims": "--jwt-claim",
	"RunID": "--run-id", "SourceIPs": "--source-ips"}

func newBenchCmd(io *ioStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load-test a live endpoint"}
	var opts benchOptions
	http := &cobra.Command{
		Use:   "http URL",
		Short: "Load-test an HTTP endpoint, with latencies that do not hide stalls, and audit its limit",
		Long: `bench http sends load to URL and reports latency percentiles, throughput and the status mix.

With --rate (the open model) every request has an intended send time on a fixed schedule and
its latency is timed from then, as wrk2 does: a stall of the server delays every request that
was due during it, and the percentiles show it. Send lag (actual minus intended start) is
recorded apart, and requests that could not be sent in time are counted. With --rate 0 (the
closed model) every connection sends back to back, for maximum throughput.

--consumers K sends K identities (consumer-0 … consumer-K-1, or the lines of --consumers-from)
as the gateway's clients send theirs: {consumer} stands for the identity in the URL's path or
query, in any --header's value and in --body; {jwt} for an HS256 token minted per consumer
(--jwt-secret, --jwt-claim sub={consumer}); {{ is a literal {. --consumer-header NAME is short
for -H 'NAME: {consumer}', and its default, X-Consumer-Id, is left out when {consumer} or {jwt}
stands anywhere else.

--expect-limit audits the consumers, named by the identities sent (those of --consumers-from by
pseudonyms, unless --show-identities): admissions against the limit (by --expect-algorithm's
own guarantee), denials the rule would have admitted, Retry-After, and the rate-limit headers. Give --expect-limit several times (or a comma list) for a gateway that
enforces several limits at once, or --expect-rules with the gateway's own rules file: each limit
is judged by its own guarantee, on its own counters, and reported in a table; headers are
held to the policy they name. --path mixes routes by weight, and --consumer-values sends a
header whose value depends on the consumer (a plan tier), so that a rules file's routes and
tiers are exercised.
Each limit is held (the load pushed it to its cap: some denials only it can have made), leaked,
not reached (none were: --allow-untested NAME lets --fail-on-leak pass it), or no verdict when
the audit saw nothing it could judge (most responses neither 2xx nor 429, a consumer with no
2xx) or the gateway seems to share one limit across the identities sent: it says why.
A run in which no request got a response exits 1.
Ctrl-C stops the run and still reports what was measured.

For gateways keyed by client IP, --source-ips sends each consumer from an address of its own
(127.0.0.2-127.0.0.60: one per consumer), and the audit names each consumer by its address.
Every result carries a run id (--run-id, or a hash of the target, the load and --start-at that
every shard of one run shares): report merge merges only one run's shards.`,
		Example: `  ratelab bench http http://127.0.0.1:8080/v1/ping --rate 2000 --duration 60s --consumers 50
  ratelab bench http 'http://127.0.0.1:8080/?apikey={consumer}' --consumers-from keys.txt --rate 200 --expect-limit 10/1s
  ratelab bench http http://127.0.0.1:8080/ -H 'Authorization: Bearer {jwt}' --jwt-secret @secret --jwt-claim sub={consumer} \
    --consumers 20 --rate 400 --expect-limit 10/1s --expect-algorithm gcra --fail-on-leak
  ratelab bench http http://127.0.0.1:8080/ --rate 0 --connections 64 --duration 10s
  ratelab bench http http://127.0.0.1:8080/ --rate 500 --expect-limit 100/1m --expect-algorithm gcra --fail-on-leak
  ratelab bench http http://127.0.0.1:8080/ --rate 100 --consumers 10 --expect-limit 5/1s --expect-limit 12/10s --fail-on-leak
  ratelab bench http http://127.0.0.1:8080/ --rate 200 --consumers 20 --expect-rules rules.yaml --path /search:1 --path /items:9 \
    --consumer-values 'X-Plan: gold:1,free:9' --fail-on-leak
  ratelab bench http http://127.0.0.1:8080/ --rate 500 --max-p99 20ms --max-error-rate 0.01 -o json > run.json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("bench http takes one URL (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.consumersSet, opts.consumerHeaderSet = cmd.Flags().Changed("consumers"), cmd.Flags().Changed("consumer-header")
			opts.connectionsSet = cmd.Flags().Changed("connections")
			return runBench(cmd.Context(), io, args[0], opts)
		},
	}
	f := http.Flags()
	opts.loadFlags.bind(http, loadFields{Rate: &opts.Rate, Connections: &opts.Connections, Duration: &opts.Duration, Requests: &opts.Requests,
		Warmup: &opts.Warmup, Timeout: &opts.Timeout, Interval: &opts.Interval, SharedConsumers: &opts.SharedConsumers, RunID: &opts.RunID,
		NoProbes: &opts.NoProbes, ShowIdentities: &opts.ShowIdentities}, loadHelp{Request: "request", Connection: "keep-alive connections, each with one request in flight at a time",
		ErrorRate:  "exit 3 when the share of failed requests (transport errors, and responses other than 2xx and 429) is above this (0 to 1; 0: exit 3 on any)",
		FailOnLeak: "exit 3 unless the audit finds every limit held: a consumer over one, one the load never reached or no verdict (unless allowed), a limit shared across the identities, a false Retry-After, or wrong headers",
		NoProbes:   "skip the audit's Retry-After probes (they wait up to a Retry-After + 10 s after the run)", RunID: "the run this shard is part of, for report merge (default: a hash of the target, the load and --start-at)",
		ConsumersFrom: "FILE of identities (API keys, tokens), one a line, sent instead of consumer-0 …; blank lines and # comments skipped"})
	f.StringVarP(&opts.Method, "method", "X", "GET", "HTTP method")
	f.StringArrayVarP(&opts.headers, "header", "H", nil, `a header to send, "Name: value" (repeatable; {consumer} and {jwt} may stand in the value)`)
	f.StringVar(&opts.body, "body", "", "request body, or @FILE to read it from a file ({consumer} and {jwt} may stand in it)")
	f.IntVar(&opts.Consumers, "consumers", 1, "identities to spread the requests over")
	f.StringVar(&opts.ConsumerHeader, "consumer-header", "X-Consumer-Id", `header that carries the identity, short for -H 'NAME: {consumer}' ("" for one anonymous client)`)
	f.StringVar(&opts.jwtSecret, "jwt-secret", "", "sign one HS256 token per consumer with this secret (@FILE: read from a file), sent where {jwt} stands")
	f.StringArrayVar(&opts.jwtClaims, "jwt-claim", nil, "a claim of the tokens: NAME=VALUE, a string ({consumer} in it: sub={consumer}), or NAME:=JSON (exp:=4102444800) (repeatable)")
	f.BoolVar(&opts.Insecure, "insecure", false, "do not verify an https target's certificate (for test gateways)")
	f.StringArrayVar(&opts.expectLimits, "expect-limit", nil, "audit the endpoint against LIMIT/WINDOW per consumer, such as 100/1m, "+
		"or LIMIT/WINDOW:ALGORITHM, with :burst=N for token-bucket and gcra (10/1s:gcra:burst=6: 6 at once, then 10 a second; "+
		"nginx's rate=10r/s burst=5) (repeatable, or a comma list: 5/1s,12/10s: every limit at once, each judged by its own guarantee)")
	f.StringVar(&opts.ExpectAlgorithm, "expect-algorithm", "", "hold the endpoint to this algorithm's guarantee for the --expect-limit values that name none: "+
		strings.Join(algorithms.Algorithms(), ", ")+" (default: the sliding-window rule, at most LIMIT in any WINDOW)")
	f.StringVar(&opts.expectRules, "expect-rules", "", "audit the endpoint by the gateway's own rules FILE: each request judged by the limits it meets, "+
		"on the counters they keep (not with --expect-limit)")
	f.Int64Var(&opts.ExpectInFlight, "expect-in-flight", 0, "audit the endpoint's limit of N requests in flight at once per consumer, "+
		"from each request's send and receive times and --hold (with --expect-limit or --expect-rules too, each judged on its own)")
	f.DurationVar(&opts.Hold, "hold", 0, "with --expect-in-flight: the least time the upstream holds each admitted request, its service time")
	f.IntVar(&opts.inFlightPerConsumer, "in-flight-per-consumer", 0, "keep K requests outstanding per consumer: K connections each, "+
		"each for one consumer (default with --expect-in-flight: twice the limit)")
	f.StringArrayVar(&opts.paths, "path", nil, "send to PATH[:WEIGHT] in place of URL's path (a PATH without a query keeps URL's), mixed by weight (repeatable: --path /search:1 --path /items:9)")
	f.StringArrayVar(&opts.values, "consumer-values", nil, `a header whose value depends on the consumer, "NAME: VALUE[:WEIGHT],…" `+
		`(X-Plan: gold:1,free:9: consumer-0 gold, consumer-1 to -9 free, and so on every ten; repeatable)`)
	f.StringVar(&opts.sourceIPs, "source-ips", "", "send each consumer from an address of its own, for gateways that key by client IP: "+
		"FROM-TO or a comma-separated list, one address per consumer (127.0.0.2-127.0.0.60: Linux routes all of 127/8 to lo); "+
		"--connections then defaults to a multiple of the addresses, up to 1000")
	complete(http, "expect-algorithm", algorithms.Algorithms()...)
	cmd.AddCommand(http, newBenchRLSCmd(io))
	return cmd
}

// benchConfig checks every flag; nothing is sent before it succeeds.
func benchConfig(target string, opts benchOptions) (bench.HTTPConfig, reports.Format, error) {
	cfg := opts.HTTPConfig
	cfg.Target = target
	lc, err := opts.loadFlags.config(cfg.Connections, cfg.Timeout)
	if err != nil {
		return cfg, "", err
	}
	cfg.Shard, cfg.Shards, cfg.StartAt = lc.shard, lc.shards, lc.startAt
	cfg.Header = http.Header{}
	for _, h := range opts.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return cfg, "", usagef(`--header %q: want "Name: value"`, h)
		}
		cfg.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	cfg.Body = []byte(opts.body)
	if file, ok := strings.CutPrefix(opts.body, "@"); ok {
		if cfg.Body, err = os.ReadFile(file); err != nil {
			return cfg, "", usagef("--body: %w", err)
		}
	}
	if err := identityFlags(&cfg, opts); err != nil {
		return cfg, "", err
	}
	if err := sourceIPs(&cfg, opts); err != nil {
		return cfg, "", err
	}
	if err := expectConfig(&cfg, opts); err != nil {
		return cfg, "", err
	}
	if err := errors.Join(cfg.Validate(), opts.Thresholds.Validate()); err != nil {
		return cfg, "", flagError(err, benchNames)
	}
	return cfg, lc.format, nil
}

func runBench(ctx context.Context, io *ioStreams, target string, opts benchOptions) error {
	cfg, format, err := benchConfig(target, opts)
	if err != nil {
		return err
	}
	if err := opts.untested(cfg.LimitIDs()); err != nil {
		return err
	}
	cfg.Progress = func(p bench.Progress) { io.status("%s", reports.BenchProgress(p, bench.HTTPWords())) }
	return opts.loadFlags.run(io, format, func() (bench.Result, error) { return bench.RunHTTP(ctx, cfg) })
}
