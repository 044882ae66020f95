// Package bench generates load against a live HTTP endpoint and records
// what came back: latency from when each request should have been sent (an
// open model, as giltene/wrk2 does, so stalls are not hidden), or back to
// back on a fixed number of connections (a closed model). It speaks
// HTTP/1.1 itself, one goroutine per connection, with each request's bytes
// rendered once and only the response fields it needs parsed, so that it
// measures the endpoint and not itself; bench rls calls a rate limit
// service over gRPC on the same engine. When a run is audited, it keeps
// each request as a sample for package audit, which judges them, and
// sends the probes the audit asks for. It returns plain results and never
// prints.
package bench

import (
	"context"
	"maps"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/rules"
)

// HTTPConfig is one load run.
type HTTPConfig struct {
	// Target is the URL requested: http:// or https://.
	Target string
	// Method is the HTTP method; GET by default.
	Method string
	// Header is sent with every request.
	Header http.Header
	// Body is sent with every request.
	Body []byte
	// Rate is the requests per second of the open model, in total, split
	// evenly over the connections; 0 runs the closed model.
	Rate float64
	// Connections is the number of connections, each with one request in
	// flight at a time; 10 by default.
	Connections int
	// Duration bounds the run (after Warmup); Requests bounds it by count.
	// At least one is set.
	Duration time.Duration
	Requests int64
	// Warmup runs before the measured part; its responses are counted apart.
	Warmup time.Duration
	// Consumers spreads requests over this many identities, sent where
	// {consumer} stands in Target (its path or query, escaped), in a
	// Header's value or in Body, and in ConsumerHeader (a shorthand for a
	// header of {consumer}): consumer-0 … consumer-K-1, or Identities; none
	// when 0. {{ writes a literal {.
	Consumers      int
	ConsumerHeader string
	// SourceIPs, when set, sends each consumer's connections from an
	// address of its own, consumer i's from SourceIPs[i] (one per
	// consumer), for gateways that key by client address; the audit then
	// names each consumer by its address. ConsumerHeader may then be empty.
	SourceIPs []netip.Addr
	// Identities, when set, are the consumers' identities (API keys,
	// tokens), instead of consumer-0 …: Consumers of them, each once. The
	// result names each by a pseudonym (pseudonyms.go) unless
	// ShowIdentities.
	Identities     []string
	ShowIdentities bool
	// JWTSecret, when set, signs one token per consumer with HS256, of
	// JWTClaims, sent where {jwt} stands (Target, Header, Body); at most
	// MaxJWTConsumers consumers.
	JWTSecret []byte
	JWTClaims []JWTClaim
	// Timeout bounds one request, connecting included: 1ms to 1h; 10s
	// when 0.
	Timeout time.Duration
	// Insecure skips the verification of an https target's certificate.
	Insecure bool
	// Interval is the length of the timeline's intervals; 1s by default.
	Interval time.Duration
	// Shard and Shards make this run the Shard-th (from 0) of Shards load
	// machines sharing one schedule: Rate, Connections and Requests are
	// totals over the shards, and this one sends its share. Each shard sends
	// the consumers with index ≡ Shard (mod Shards), or all of them with
	// SharedConsumers. 0 ≤ Shard < Shards; 0 of 0 (or 1), the default, is
	// the whole run.
	Shard, Shards   int
	SharedConsumers bool
	// StartAt, when set, is the wall-clock time the run begins at (every
	// shard of a run gets the same); the run waits for it.
	StartAt time.Time
	// RunID names the run every shard of it is part of, for report merge;
	// when empty, a hash of the settings every shard is given alike (see
	// Result.RunID).
	RunID string
	// ExpectLimit and ExpectWindow, when set, audit the endpoint: no
	// consumer may get more than ExpectLimit successes in any ExpectWindow.
	ExpectLimit  int64
	ExpectWindow time.Duration
	// ExpectAlgorithm, when set, holds the endpoint to that algorithm's
	// guarantee (algorithms.Algorithms()) for ExpectLimit per ExpectWindow,
	// instead of the sliding-window rule.
	ExpectAlgorithm string
	// ExpectBurst, when set, is ExpectLimit's burst: the most admitted at
	// one instant, for ExpectAlgorithm token-bucket or gcra.
	ExpectBurst int64
	// ExpectLimits are limits the endpoint enforces on each consumer all at
	// once (5 per 1s and 12 per 10s), each judged by its own guarantee;
	// with ExpectLimit, that one first. No two on one window.
	ExpectLimits []audit.ExpectedLimit
	// ExpectRules, when set, audits the endpoint by its own rules file
	// (parsed rules.ForGateway): each request is judged by the limits it
	// meets, on the counters they keep. Not with ExpectLimit(s).
	ExpectRules *rules.Set
	// ExpectInFlight, when set, audits the endpoint's limit of requests in
	// flight at once per consumer (audit.JudgeInFlight), each admitted
	// request held at least Hold in the upstream. It may go with the
	// limits of ExpectLimit(s) or ExpectRules, each judged on its own.
	ExpectInFlight int64
	Hold           time.Duration
	// Routes, when set, mixes paths by weight in place of Target's path
	// and query; ConsumerValues sends headers whose value depends on the
	// consumer (a plan tier).
	Routes         []Route
	ConsumerValues []ConsumerValues
	// KeepResponses keeps every measured request, answered or failed, with
	// its rate-limit fields read, for Result.Responses (up to 5,000,000).
	KeepResponses bool
	// NoProbes skips the audit's Retry-After probes (they can take up to a
	// Retry-After plus 10 seconds after the run).
	NoProbes bool
	// Progress, when set, is called about once a second during the run and
	// the probes.
	Progress func(Progress)
}

// Progress is the state of a run, for a live line.
type Progress struct {
	// Phase is "warm-up", "run" or "probes".
	Phase   string
	Elapsed time.Duration
	// Done counts the responses and errors so far, warm-up included.
	Done int64
	// RatePerSec is the completions per second over the last whole interval.
	RatePerSec float64
	// P99Micros is the p99 latency over the last whole interval, in µs.
	P99Micros int64
	// LimitedShare is the share of 429s over the last whole interval.
	LimitedShare float64
	// ProbesLeft is, in the probes phase, how long they may still take.
	ProbesLeft time.Duration
}

// Limits keep every run bounded.
const (
	MaxDuration    = 24 * time.Hour
	MaxRate        = 10_000_000
	MaxConnections = 100_000
	MaxConsumers   = 10_000_000
)

// Validate checks cfg before anything is sent. Errors are *field.Error
// naming the fields of HTTPConfig.
func (c HTTPConfig) Validate() error {
	if err := c.validateRequest(); err != nil {
		return err
	}
	u, _, err := parseTarget(c.Target)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return field.Errorf("Target", "%q: want an http:// or https:// URL", c.Target)
	case !validPort(u.Port()):
		return field.Errorf("Target", "%q: the port %q is not between 1 and 65535", c.Target, u.Port())
	case c.load().validate() != nil:
		return c.load().validate()
	case c.ConsumerHeader != "" && !isToken(c.ConsumerHeader):
		return field.Errorf("ConsumerHeader", "%q is not a header name", c.ConsumerHeader)
	case c.Method != "" && !isToken(c.Method):
		return field.Errorf("Method", "%q is not an HTTP method", c.Method)
	case c.ExpectLimit < 0 || (c.ExpectLimit > 0) != (c.ExpectWindow > 0):
		return field.Errorf("ExpectLimit", "needs a positive limit and window (got %d per %s)", c.ExpectLimit, c.ExpectWindow)
	case c.ExpectLimit > 0 && c.Consumers == 0:
		return field.Errorf("ExpectLimit", "audits per consumer: it needs {Consumers}")
	case c.ExpectAlgorithm != "" && c.ExpectLimit == 0:
		return field.Errorf("ExpectAlgorithm", "needs {ExpectLimit}")
	case c.ExpectInFlight < 0:
		return field.Errorf("ExpectInFlight", "must be at least 1 (got %d)", c.ExpectInFlight)
	case c.ExpectInFlight > 0 && c.Consumers == 0:
		return field.Errorf("ExpectInFlight", "audits per consumer: it needs {Consumers}")
	case c.ExpectInFlight > 0 && (c.Hold <= 0 || c.Hold > time.Hour):
		return field.Errorf("Hold", "must be between 1ns and 1h with {ExpectInFlight}: the upstream's least service time (got %s)", c.Hold)
	case c.Hold != 0 && c.ExpectInFlight == 0:
		return field.Errorf("Hold", "needs {ExpectInFlight}")
	case c.ExpectInFlight > 0 && c.Shards > 1:
		return field.Errorf("Shard", "is not for {ExpectInFlight}: the in-flight audit needs every request of a consumer on one machine")
	case c.RunID != "" && !runIDPattern.MatchString(c.RunID):
		return field.Errorf("RunID", "%q: want up to 64 letters, digits and . _ : -, beginning with a letter or digit", c.RunID)
	}
	if err := c.validateSourceIPs(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Header)) {
		if !isToken(name) {
			return field.Errorf("Header", "%q is not a header name", name)
		}
		for _, v := range c.Header[name] {
			if !isFieldValue(v) {
				return field.Errorf("Header", "%s: %q holds a line break or another control character", name, v)
			}
		}
	}
	if c.ExpectLimit > 0 {
		if err := c.expectPolicy().Validate(); err != nil {
			return field.Errorf("ExpectLimit", ": %v", err)
		}
		if _, err := audit.ExpectationOf(c.expectPolicy(), c.ExpectAlgorithm); err != nil {
			return err
		}
	}
	if err := c.validateExpect(); err != nil {
		return err
	}
	if err := c.validateMix(); err != nil {
		return err
	}
	return nil
}

func (c *HTTPConfig) defaults() {
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	l := c.load().withDefaults()
	c.Connections, c.Timeout, c.Interval, c.Shards, c.Requests = l.Connections, l.Timeout, l.Interval, l.Shards, l.Requests
}

// load is the run's load, as the engine reads it.
func (c HTTPConfig) load() load {
	return load{Rate: c.Rate, Connections: c.Connections, Duration: c.Duration, Requests: c.Requests, Warmup: c.Warmup,
		Consumers: c.Consumers, Timeout: c.Timeout, Interval: c.Interval, Shard: c.Shard, Shards: c.Shards,
		SharedConsumers: c.SharedConsumers, StartAt: c.StartAt, KeepResponses: c.KeepResponses, Progress: c.Progress}
}

// share is shard's part of total split over shards as evenly as it goes.
func share(total, shard, shards int) int {
	n := total / shards
	if shard < total%shards {
		n++
	}
	return n
}

// RunHTTP runs the load and returns what it measured. Cancelling ctx stops
// the run early; what was measured so far is returned with ctx's error.
func RunHTTP(ctx context.Context, cfg HTTPConfig) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	runID := cfg.runID() // before the defaults make cfg this shard's share
	cfg.defaults()
	t := newTally(cfg.Interval)
	t.timeline.end = cfg.Duration
	p, err := newPlan(cfg, t)
	if err != nil {
		return Result{}, err
	}
	ps := hidden(cfg.Identities, cfg.ShowIdentities)
	if ps != nil {
		p.pseudonyms = ps.names
	}
	d, stopProgress, err := drive(ctx, p, cfg.load())
	if err != nil {
		return Result{}, err
	}
	defer stopProgress()
	res := cfg.result(t, d.elapsed)
	res.Config.Identities = p.req.labels()
	switch {
	case len(cfg.SourceIPs) > 0:
		res.Config.Identities = addrNames(cfg.SourceIPs) // the gateway tells them by address
	case ps != nil:
		res.Config.Identities, res.Config.Pseudonyms = ps.names, ps.scheme()
	}
	res.StartedUnixMillis = p.start.Add(cfg.Warmup).UnixMilli()
	res.RunID, res.Instance = runID, newInstance()
	d.fill(&res)
	if p.audit {
		cov := d.coverage(ctx, cfg.load())
		if cfg.ExpectInFlight > 0 {
			name := p.consumerName
			a := audit.JudgeInFlight(d.rec.Samples, cfg.ExpectInFlight, cfg.Hold, cfg.Consumers, cov, name)
			res.InFlightAudit = &a
			if h := cfg.inFlightHint(); h != "" {
				res.AuditHints = append(res.AuditHints, h)
			}
		}
		if cfg.rateAuditing() {
			a, m, hints := runAudit(ctx, cfg, p, d.rec, cov, d.source)
			res.Audit, res.AuditHints = &a, append(res.AuditHints, hints...)
			res.AuditSamples = audit.Encode(d.rec, m)
			ps.hideKeys(res.AuditSamples)
		}
	}
	return res, ctx.Err()
}

// result is what the tally measured of a run of cfg (with its defaults),
// elapsed long.
func (c HTTPConfig) result(t *tally, elapsed time.Duration) Result {
	res := newResult(c.load(), t, elapsed)
	res.Command, res.Target = "bench_http", c.Target
	res.Config.Method, res.Config.ConsumerHeader, res.Config.Identities = c.Method, c.ConsumerHeader, c.Identities
	res.Config.IdentityIn, res.Config.SourceIPs = c.identityIn(), addrsText(c.SourceIPs)
	return res
}

// progress calls report once a second until stop is closed.
func progress(report func(Progress), p *plan, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		elapsed := time.Since(p.start)
		s := p.tally.snapshot(elapsed - p.warmup)
		pr := Progress{Phase: "run", Elapsed: elapsed, Done: s.done + s.warm}
		if elapsed < p.warmup {
			pr.Phase = "warm-up"
		}
		if s.lastValid {
			var n int64
			for _, c := range s.last {
				n += c
			}
			pr.RatePerSec = float64(n) / s.interval.Seconds()
			pr.P99Micros = s.lastP99
			if n > 0 {
				pr.LimitedShare = float64(s.last[class429]) / float64(n)
			}
		}
		if d := p.probesUntil(); !d.IsZero() {
			pr.Phase, pr.ProbesLeft = "probes", max(time.Until(d), 0)
		}
		report(pr)
	}
}

// threads is the number of threads Go code may run on at once now: the
// engine's share of the machine (--threads sets it).
func threads() int { return runtime.GOMAXPROCS(0) }

// validPort reports whether port, a URL's (empty for the scheme's), is
// one a connection can be made to.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
