package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/reports"
	"github.com/ratelab/ratelab/rules"
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
	paths             []string
	values            []string
}

// benchNames are the flags that set bench.HTTPConfig's and
// bench.Thresholds' fields.
var benchNames = flagNames{"Target": "URL", "Rate": "--rate", "Connections": "--connections", "Duration": "--duration",
	"Requests": "--requests", "Warmup": "--warmup", "Consumers": "--consumers", "ConsumerHeader": "--consumer-header",
	"Timeout": "--timeout", "Interval": "--interval", "ExpectLimit": "--expect-limit", "ExpectBurst": "--expect-limit", "ExpectAlgorithm": "--expect-algorithm",
	"ExpectLimits": "--expect-limit", "ExpectRules": "--expect-rules", "Routes": "--path", "ConsumerValues": "--consumer-values",
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

// sourceIPs reads --source-ips into cfg: one address per consumer, whose
// number it sets, or must match when --consumers is given.
func sourceIPs(cfg *bench.HTTPConfig, opts benchOptions) error {
	if opts.sourceIPs == "" {
		return nil
	}
	addrs, err := bench.ParseSourceIPs(opts.sourceIPs)
	if err != nil {
		return flagError(err, benchNames)
	}
	if cfg.Identities != nil && len(cfg.Identities) != len(addrs) {
		return usagef("--source-ips gives %d addresses for the %d identities of --consumers-from: one address per consumer",
			len(addrs), len(cfg.Identities))
	}
	if opts.consumersSet && opts.Consumers != len(addrs) {
		n := fmt.Sprintf("%d addresses", len(addrs))
		if len(addrs) == 1 {
			n = "1 address"
		}
		return usagef("--source-ips gives %s for --consumers %d: one address per consumer (or leave --consumers out)", n, opts.Consumers)
	}
	cfg.Consumers, cfg.SourceIPs = len(addrs), addrs
	if !opts.connectionsSet {
		// A connection reopens whenever it sends for another consumer than
		// its last: a multiple of the addresses (at least the default),
		// keeps each on one, up to maxSourceConnections.
		k := len(addrs)
		cfg.Connections = min(k*((opts.Connections+k-1)/k), max(maxSourceConnections, opts.Connections))
	}
	return nil
}

// expectConfig reads the flags of what the audit expects, and of the mix
// of requests sent, into cfg.
func expectConfig(cfg *bench.HTTPConfig, opts benchOptions) error {
	for _, v := range opts.expectLimits {
		ls, err := bench.ParseExpectedLimits(v, opts.ExpectAlgorithm)
		if err != nil {
			return flagError(err, benchNames)
		}
		cfg.ExpectLimits = append(cfg.ExpectLimits, ls...)
	}
	if len(cfg.ExpectLimits) > 0 {
		cfg.ExpectAlgorithm = "" // given to each limit that names none
	}
	if opts.expectRules != "" {
		if len(opts.expectLimits) > 0 {
			return usagef("--expect-rules and --expect-limit are two audits: give one")
		}
		if opts.ExpectAlgorithm != "" {
			return usagef("--expect-algorithm is for --expect-limit: each limit of --expect-rules names its own")
		}
		src, err := os.ReadFile(opts.expectRules)
		if err != nil {
			return usagef("--expect-rules: %w", err)
		}
		if cfg.ExpectRules, err = rules.Parse(opts.expectRules, src, rules.ForGateway()); err != nil {
			return usagef("--expect-rules: %w", err)
		}
	}
	if len(opts.expectLimits) == 0 && opts.expectRules == "" {
		switch {
		case opts.FailOnLeak:
			return usagef("--fail-on-leak needs --expect-limit or --expect-rules")
		case opts.FailOnUnder != nil:
			return usagef("--fail-on-under needs --expect-limit or --expect-rules")
		}
	}
	for _, p := range opts.paths {
		cfg.Routes = append(cfg.Routes, bench.ParseRoute(p))
	}
	for _, v := range opts.values {
		cv, err := bench.ParseConsumerValues(v)
		if err != nil {
			return flagError(err, benchNames)
		}
		cfg.ConsumerValues = append(cfg.ConsumerValues, cv)
	}
	return nil
}

// maxSourceConnections bounds the connections --source-ips opens by
// default, one per address.
const maxSourceConnections = 1000

// optionalFloat is a float flag that sets *p when given and leaves it nil
// when not, for a threshold that is off unless asked for.
type optionalFloat struct{ p **float64 }

func (o optionalFloat) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatFloat(**o.p, 'g', -1, 64)
}

func (o optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o optionalFloat) Type() string { return "float" }

// crossed is the threshold error (exit 3) of the thresholds a run crossed.
func crossed(errs []*field.Error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Render(func(f string) string { return benchNames[f] })
	}
	return &thresholdError{strings.Join(msgs, "; ")}
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseStartAt reads --start-at: an RFC 3339 time, or next:D, which every
// shard computes alike from now (bench.NextStart).
func parseStartAt(s string, now time.Time) (time.Time, error) {
	const forms = "want an RFC 3339 time, such as 2026-12-02T18:00:00Z, or next:D, the next multiple of D (1s to 1h) " +
		"on the UTC clock at least 15s ahead, such as next:1m"
	every, ok := strings.CutPrefix(s, "next:")
	if !ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return t, usagef("--start-at %q: %s", s, forms)
		}
		return t, nil
	}
	d, err := time.ParseDuration(every)
	if err != nil {
		return time.Time{}, usagef("--start-at %q: D is not a duration; %s", s, forms)
	}
	t, err := bench.NextStart(now, d)
	var fe *field.Error
	if errors.As(err, &fe) {
		return t, usagef("--start-at %q: %s; %s", s, fe.Render(func(string) string { return "D" }), forms)
	}
	return t, err
}

// identityFlags reads what names the consumers: --consumers-from,
// --jwt-secret and --jwt-claim, and the default --consumer-header, which
// is left out when the request names its consumer elsewhere.
func identityFlags(cfg *bench.HTTPConfig, opts benchOptions) error {
	ids, err := opts.loadFlags.identities(cfg.Consumers)
	if err != nil {
		return err
	}
	if ids != nil {
		cfg.Identities, cfg.Consumers = ids, len(ids)
	}
	if file, ok := strings.CutPrefix(opts.jwtSecret, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return usagef("--jwt-secret: %w", err)
		}
		cfg.JWTSecret = []byte(strings.TrimRight(string(b), "\r\n"))
	} else if opts.jwtSecret != "" {
		cfg.JWTSecret = []byte(opts.jwtSecret)
	}
	for _, c := range opts.jwtClaims {
		claim, err := bench.ParseJWTClaim(c)
		if err != nil {
			return usagef("--jwt-claim %w", err)
		}
		cfg.JWTClaims = append(cfg.JWTClaims, claim)
	}
	named := cfg.NamesConsumer()
	if !opts.consumerHeaderSet && named {
		cfg.ConsumerHeader = ""
	}
	switch {
	case cfg.ConsumerHeader == "" && !named && cfg.Identities == nil:
		cfg.Consumers = 0 // one anonymous client
	case cfg.Consumers < 1:
		return usagef("--consumers must be at least 1 (got %d)", cfg.Consumers)
	}
	return nil
}
