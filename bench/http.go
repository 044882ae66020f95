// Package bench generates load against a live HTTP endpoint and records
// what came back: latency from when each request should have been sent (an
// open model, as giltene/wrk2 does, so stalls are not hidden), or back to
// back on a fixed number of connections (a closed model). It speaks
// HTTP/1.1 itself, one goroutine per connection, with each request's bytes
// rendered once and only the response fields it needs parsed, so that it
// measures the endpoint and not itself. It returns plain results and never
// prints.
package bench

import (
	"context"
	"maps"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/ratelab/ratelab/algorithms"
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
	// tokens), instead of consumer-0 …: Consumers of them, each once.
	Identities []string
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
	// ExpectLimits are limits the endpoint enforces on each consumer all at
	// once (5 per 1s and 12 per 10s), each judged by its own guarantee;
	// with ExpectLimit, that one first. No two on one window.
	ExpectLimits []ExpectedLimit
	// ExpectRules, when set, audits the endpoint by its own rules file
	// (parsed rules.ForGateway): each request is judged by the limits it
	// meets, on the counters they keep. Not with ExpectLimit(s).
	ExpectRules *rules.Set
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
	case c.Rate < 0 || c.Rate > MaxRate:
		return field.Errorf("Rate", "must be between 0 (closed model) and %d per second (got %g)", MaxRate, c.Rate)
	case c.Connections < 0 || c.Connections > MaxConnections:
		return field.Errorf("Connections", "must be between 1 and %d (got %d)", MaxConnections, c.Connections)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return field.Errorf("Duration", "must be between 0 and %s (got %s)", MaxDuration, c.Duration)
	case c.Requests < 0:
		return field.Errorf("Requests", "must not be negative (got %d)", c.Requests)
	case c.Duration == 0 && c.Requests == 0:
		return field.Errorf("Duration", "or {Requests} must bound the run")
	case c.Warmup < 0 || c.Warmup > time.Hour:
		return field.Errorf("Warmup", "must be between 0 and 1h (got %s)", c.Warmup)
	case c.Consumers < 0 || c.Consumers > MaxConsumers:
		return field.Errorf("Consumers", "must be between 0 and %d (got %d)", MaxConsumers, c.Consumers)
	case c.ConsumerHeader != "" && !isToken(c.ConsumerHeader):
		return field.Errorf("ConsumerHeader", "%q is not a header name", c.ConsumerHeader)
	case c.Method != "" && !isToken(c.Method):
		return field.Errorf("Method", "%q is not an HTTP method", c.Method)
	case c.Timeout != 0 && (c.Timeout < time.Millisecond || c.Timeout > time.Hour): // 0: the default
		return field.Errorf("Timeout", "must be between 1ms and 1h (got %s)", c.Timeout)
	case c.Interval < 0 || (c.Interval > 0 && c.Interval < 10*time.Millisecond):
		return field.Errorf("Interval", "must be at least 10ms (got %s)", c.Interval)
	case c.ExpectLimit < 0 || (c.ExpectLimit > 0) != (c.ExpectWindow > 0):
		return field.Errorf("ExpectLimit", "needs a positive limit and window (got %d per %s)", c.ExpectLimit, c.ExpectWindow)
	case c.ExpectLimit > 0 && c.Consumers == 0:
		return field.Errorf("ExpectLimit", "audits per consumer: it needs {Consumers}")
	case c.ExpectAlgorithm != "" && c.ExpectLimit == 0:
		return field.Errorf("ExpectAlgorithm", "needs {ExpectLimit}")
	case c.Shards < 0 || c.Shards > 10_000 || c.Shard < 0 || c.Shard >= max(c.Shards, 1): // Shards 0: one, the whole run
		return field.Errorf("Shard", "must be I/N with 0 ≤ I < N ≤ 10000 (got %d/%d)", c.Shard, c.Shards)
	case c.Shards > 1 && c.Connections > 0 && c.Connections < c.Shards:
		return field.Errorf("Connections", "are a total over the shards: at least one each, %d (got %d)", c.Shards, c.Connections)
	case c.Shards > 1 && c.Consumers > 0 && c.Consumers < c.Shards && !c.SharedConsumers:
		return field.Errorf("Consumers", "must be at least the shards, %d, each sending its own (got %d): or share them with {SharedConsumers}",
			c.Shards, c.Consumers)
	case c.SharedConsumers && c.Shards <= 1:
		return field.Errorf("SharedConsumers", "needs {Shard}")
	case !c.StartAt.IsZero() && (time.Until(c.StartAt) < -time.Second || time.Until(c.StartAt) > 24*time.Hour):
		return field.Errorf("StartAt", "must be within the next 24 hours (got %s)", c.StartAt.Format(time.RFC3339))
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
		if err := (algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow}).Validate(); err != nil {
			return field.Errorf("ExpectLimit", ": %v", err)
		}
		if _, err := newExpectation(c.ExpectLimit, c.ExpectWindow, c.ExpectAlgorithm); err != nil {
			return err
		}
	}
	if err := c.validateExpect(); err != nil {
		return err
	}
	if err := c.validateMix(); err != nil {
		return err
	}
	if c.Rate > 0 && c.Duration > 0 && c.Rate*(c.Duration+c.Warmup).Seconds() > 1e12 {
		return field.Errorf("Rate", "× {Duration} is over 10^12 requests")
	}
	return nil
}

func (c *HTTPConfig) defaults() {
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.Connections == 0 {
		c.Connections = 10
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	// This shard's share of the connections, and of the closed model's
	// requests.
	c.Connections = share(c.Connections, c.Shard, c.Shards)
	if c.Rate == 0 {
		c.Requests = int64(share(int(c.Requests), c.Shard, c.Shards))
	}
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
	conns := make([]*conn, cfg.Connections)
	for i := range conns {
		conns[i] = newConn(p, i)
	}
	if !cfg.StartAt.IsZero() {
		if err := wait(ctx, cfg.StartAt); err != nil {
			return Result{}, err
		}
	}
	p.start = time.Now()
	stopProgress := make(chan struct{})
	var wg sync.WaitGroup
	if cfg.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progress(cfg, p, stopProgress)
		}()
	}
	if p.open {
		// Wake the runtime's poller often enough that sends are not late by
		// its millisecond, and rarely enough that the wake-ups cost little
		// beside the requests: once per 8 request intervals, at least every
		// 200 µs (at 20,000/s, every 400 µs), and not at all below 8,000/s.
		if period := max(8*time.Duration(p.every*float64(p.shards)), 200*time.Microsecond); period < time.Millisecond {
			if stop, err := startPacer(period); err == nil {
				defer stop()
			}
		}
	}
	var running sync.WaitGroup
	for _, c := range conns {
		running.Add(1)
		go func() {
			defer running.Done()
			c.run(ctx)
		}()
	}
	running.Wait()
	elapsed := time.Since(p.start) - cfg.Warmup
	if p.end > 0 {
		// No request is sent after the end; those in flight then count, but
		// the run's length is the one asked for (or less, when cancelled).
		elapsed = min(elapsed, cfg.Duration)
	}
	res := newResult(cfg, t, max(elapsed, 0))
	res.Config.Identities = p.req.labels()
	if len(cfg.SourceIPs) > 0 {
		res.Config.Identities = addrNames(cfg.SourceIPs) // the gateway tells them by address
	}
	res.StartedUnixMillis = p.start.Add(cfg.Warmup).UnixMilli()
	res.RunID = runID
	var samples []sample
	var advs []advert
	source := ""
	horizon, warmUntil := time.Duration(-1), time.Duration(0)
	for _, c := range conns {
		warmUntil = max(warmUntil, c.warmUntil)
		res.Bytes += c.bytes
		res.Unsent += c.unsent
		for k, msg := range c.first {
			if msg != "" {
				e := res.ErrorKinds[kindNames[k]]
				if e.First == "" {
					e.First = msg
					res.ErrorKinds[kindNames[k]] = e
				}
			}
		}
		base := uint32(len(advs))
		advs = append(advs, c.advs...)
		for _, s := range c.samples {
			s.advAt += base
			samples = append(samples, s)
		}
		if source == "" {
			source = c.source
		}
		res.responses = append(res.responses, c.responses...)
		if c.cappedAt >= 0 && (horizon < 0 || c.cappedAt < horizon) {
			horizon = c.cappedAt
		}
	}
	if p.audit {
		cov := coverage{from: warmUntil, horizon: horizon, partial: cfg.Shards > 1 && cfg.SharedConsumers}
		switch {
		case cov.partial:
			cov.skipUnder = sharedNote
		case ctx.Err() != nil:
			cov.skipUnder = "the run was interrupted: the requests in flight then were never answered"
		}
		a, m := runAudit(ctx, cfg, p, samples, advs, cov, source)
		res.Audit = &a
		res.AuditSamples = encodeSamplesWith(samples, advs, m)
	}
	close(stopProgress)
	wg.Wait()
	return res, ctx.Err()
}

// progress calls cfg.Progress once a second until stop is closed.
func progress(cfg HTTPConfig, p *plan, stop <-chan struct{}) {
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
		cfg.Progress(pr)
	}
}

// threads is the number of threads Go code may run on at once now: the
// engine's share of the machine (--threads sets it).
func threads() int { return runtime.GOMAXPROCS(0) }
