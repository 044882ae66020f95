// Package drill measures what a rate limiter does when its Redis fails. It
// starts real Redis servers (and redis-sentinel for a failover), serves
// ratelab's limiter in front of them with either engine (edge.Serve), or as
// Envoy's rate limit service (rls.Serve), sends consumers near and over
// their limit through it with the bench engine (or a gRPC client of the
// service),
// injects one fault at a time (a hung or restarted Redis, latency or reset
// connections through an in-process toxiproxy, SCRIPT FLUSH, a full Redis,
// a failover) under each fail mode, and judges every request it sent with
// an oracle: admissions beyond the algorithm's own guarantee, refusals an
// exact sliding window would have admitted, and when the gateway noticed and
// recovered. It returns plain results and never prints.
package drill

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/limiter"
)

// Faults, one at a time.
const (
	// Hang stops the Redis process (SIGSTOP) and resumes it.
	Hang = "hang"
	// Restart kills Redis and starts it again, empty, on the same port.
	Restart = "restart"
	// Latency adds each of Config.Latencies between the gateway and Redis.
	Latency = "latency"
	// Reset cuts every connection between the gateway and Redis.
	Reset = "reset"
	// ScriptFlush runs SCRIPT FLUSH at the fault's start and every 250ms.
	ScriptFlush = "script-flush"
	// OOM fills Redis up to its maxmemory (noeviction).
	OOM = "oom"
	// Failover kills the primary of a primary and its replica under
	// redis-sentinel, which promotes the replica.
	Failover = "failover"
)

// Faults lists every fault, in the order a drill runs them.
func Faults() []string { return []string{Hang, Restart, Latency, Reset, ScriptFlush, OOM, Failover} }

// EngineRLS is ratelab rls, Envoy's rate limit service on ratelab's
// limiter, drilled through its gRPC ShouldRateLimit as Envoy asks it, beside
// edge's two engines (edge.EngineGo, edge.EngineOpenResty).
const EngineRLS = "rls"

// Engines lists the engines a drill can run: edge's two and the rate limit
// service.
func Engines() []string { return []string{edge.EngineGo, edge.EngineOpenResty, EngineRLS} }

// Modes lists the fail modes: edge's OnError values.
func Modes() []string {
	return []string{string(limiter.FailOpen), string(limiter.FailClosed), string(limiter.FailLocal)}
}

// Config is one drill. Run gives zero fields the defaults below.
type Config struct {
	// Engines are edge.EngineGo, edge.EngineOpenResty and EngineRLS; by
	// default the first two, the second only when nginx with the Lua
	// module is found.
	Engines []string
	// Faults are the faults to inject; all by default.
	Faults []string
	// Modes are the fail modes each fault runs under; all by default.
	Modes []string
	// Latencies are the latencies of the latency fault; 50ms and 500ms by default.
	Latencies []time.Duration
	// FaultDuration is how long each fault lasts; 5s by default. A failover
	// takes what the sentinel takes.
	FaultDuration time.Duration
	// Steady is the load before the fault; 2s by default.
	Steady time.Duration
	// After is the load after the fault; 3s by default.
	After time.Duration
	// Algorithm is the limiter's algorithm; sliding-log by default.
	Algorithm string
	// Policy is each consumer's limit; 10 per 1s by default.
	Policy algorithms.Policy
	// Consumers is the number of consumers; 20 by default.
	Consumers int
	// Load is each consumer's rate as a multiple of its limit; 1.5 by default.
	Load float64
	// Nodes is the number of gateways sharing the limit, each sent the whole
	// Load; with local each limits alone to Limit / Nodes. 1 by default.
	Nodes int
	// Timeout bounds one decision in Redis; 200ms by default.
	Timeout time.Duration
	// Batch is the most decisions the go engine and the rls service send to
	// Redis in one round trip (edge.Options.Batch, rls.Options.Batch);
	// DefaultBatch by default, as both default to, and 1 for one call per
	// decision. The openresty engine always sends one.
	Batch int
	// BreakerFailures opens a gateway's circuit after this many failures in
	// a row; 5 by default, negative for no circuit breaker.
	BreakerFailures int
	// DownAfter is how long the sentinel waits before it holds the primary
	// down; 1s by default.
	DownAfter time.Duration
	// Progress, when set, is called before each run with its number, the
	// number of runs and its name.
	Progress func(run, runs int, name string)
}

// Bounds keep every drill bounded.
const (
	MaxConsumers = 10_000
	MaxNodes     = 16
	MaxPhase     = 10 * time.Minute
	// MaxRate bounds the requests per second sent to one gateway.
	MaxRate = 20_000
	// MaxBatch bounds Config.Batch, as edge bounds its own.
	MaxBatch = 1024
	// DefaultBatch is Config.Batch's default: ratelab edge's and ratelab
	// rls's, so that a drill drills the services as they run by default.
	DefaultBatch = 16
)

func (c Config) withDefaults() Config {
	if len(c.Faults) == 0 {
		c.Faults = Faults()
	}
	if len(c.Modes) == 0 {
		c.Modes = Modes()
	}
	if len(c.Latencies) == 0 {
		c.Latencies = []time.Duration{50 * time.Millisecond, 500 * time.Millisecond}
	}
	if c.FaultDuration == 0 {
		c.FaultDuration = 5 * time.Second
	}
	if c.Steady == 0 {
		c.Steady = 2 * time.Second
	}
	if c.After == 0 {
		c.After = 3 * time.Second
	}
	if c.Algorithm == "" {
		c.Algorithm = "sliding-log"
	}
	if c.Policy == (algorithms.Policy{}) {
		c.Policy = algorithms.Policy{Limit: 10, Window: time.Second}
	}
	if c.Consumers == 0 {
		c.Consumers = 20
	}
	if c.Load == 0 {
		c.Load = 1.5
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 200 * time.Millisecond
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = 5
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.DownAfter == 0 {
		c.DownAfter = time.Second
	}
	return c
}

// Validate checks c before anything starts; Run fills zero fields with the
// defaults first, Validate does not. Errors are *field.Error naming the
// fields of Config (Limit and Window for the policy's).
func (c Config) Validate() error {
	for _, e := range c.Engines {
		if !slices.Contains(Engines(), e) {
			return field.Errorf("Engines", ": %q: want go, openresty or rls", e)
		}
	}
	for _, f := range c.Faults {
		if !slices.Contains(Faults(), f) {
			return field.Errorf("Faults", ": %q: want one of %s", f, strings.Join(Faults(), ", "))
		}
	}
	for _, m := range c.Modes {
		if !slices.Contains(Modes(), m) {
			return field.Errorf("Modes", ": %q: want open, closed or local", m)
		}
	}
	for _, l := range c.Latencies {
		if l <= 0 || l > time.Minute || l%time.Millisecond != 0 {
			return field.Errorf("Latencies", ": each must be a whole number of milliseconds from 1ms to 1m (got %s)", l)
		}
	}
	if info, ok := algorithms.Lookup(c.Algorithm); !ok || !info.Algorithm {
		return field.Errorf("Algorithm", "%q: want one of %s", c.Algorithm, strings.Join(algorithms.Algorithms(), ", "))
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if err := algorithms.CheckBurst(c.Algorithm, c.Policy); err != nil {
		return err
	}
	switch {
	case c.FaultDuration < 100*time.Millisecond || c.FaultDuration > MaxPhase:
		return field.Errorf("FaultDuration", "must be between 100ms and %s (got %s)", MaxPhase, c.FaultDuration)
	case c.Steady < 100*time.Millisecond || c.Steady > MaxPhase:
		return field.Errorf("Steady", "must be between 100ms and %s (got %s)", MaxPhase, c.Steady)
	case c.After < 100*time.Millisecond || c.After > MaxPhase:
		return field.Errorf("After", "must be between 100ms and %s (got %s)", MaxPhase, c.After)
	case c.Consumers < 1 || c.Consumers > MaxConsumers:
		return field.Errorf("Consumers", "must be between 1 and %d (got %d)", MaxConsumers, c.Consumers)
	case !(c.Load > 0 && c.Load <= 100):
		return field.Errorf("Load", "must be above 0 and at most 100 (got %g)", c.Load)
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return field.Errorf("Nodes", "must be between 1 and %d (got %d)", MaxNodes, c.Nodes)
	case slices.Contains(c.Modes, string(limiter.FailLocal)) && int64(c.Nodes) > c.Policy.Limit:
		return field.Errorf("Nodes", "must be at most {Limit} with local: each node's share is the limit over the nodes")
	case c.Timeout < time.Millisecond || c.Timeout > time.Minute:
		return field.Errorf("Timeout", "must be between 1ms and 1m (got %s)", c.Timeout)
	case c.Batch < 0 || c.Batch > MaxBatch:
		return field.Errorf("Batch", "must be between 1 and %d (got %d)", MaxBatch, c.Batch)
	case c.DownAfter < 100*time.Millisecond || c.DownAfter > time.Minute:
		return field.Errorf("DownAfter", "must be between 100ms and 1m (got %s)", c.DownAfter)
	case c.rate() > MaxRate:
		return field.Errorf("Consumers", "× {Load} × {Limit} per {Window} is %.0f requests a second per gateway, over %d", c.rate(), MaxRate)
	case c.rate() < 1:
		return field.Errorf("Consumers", "× {Load} × {Limit} per {Window} is under one request a second: nothing to measure")
	}
	return nil
}

// rate is what each gateway is sent, per second.
func (c Config) rate() float64 {
	return float64(c.Consumers) * c.Load * float64(c.Policy.Limit) / c.Policy.Window.Seconds()
}

// Settings is the configuration as reports show it; durations in ms.
type Settings struct {
	Engines         []string `json:"engines"`
	Faults          []string `json:"faults"`
	Modes           []string `json:"on_redis_error"`
	LatenciesMillis []int64  `json:"latencies_ms"`
	FaultMillis     int64    `json:"fault_duration_ms"`
	SteadyMillis    int64    `json:"steady_ms"`
	AfterMillis     int64    `json:"after_ms"`
	Algorithm       string   `json:"algorithm"`
	Limit           int64    `json:"limit"`
	WindowMillis    int64    `json:"window_ms"`
	Consumers       int      `json:"consumers"`
	Load            float64  `json:"load"`
	Nodes           int      `json:"nodes"`
	RatePerSec      float64  `json:"rate_per_sec"`
	TimeoutMillis   int64    `json:"redis_timeout_ms"`
	Batch           int      `json:"redis_batch"`
	BreakerFailures int      `json:"breaker_failures"`
	DownAfterMillis int64    `json:"down_after_ms"`
}

// Report is a whole drill.
type Report struct {
	// Command is "drill".
	Command string `json:"command"`
	// RedisVersion is the version of the redis-server the drill started.
	RedisVersion string   `json:"redis_version"`
	Config       Settings `json:"config"`
	// Guarantee is the algorithm's rule, by which over-admission is judged.
	Guarantee string `json:"guarantee"`
	// Results has one row per engine, fault (and latency) and fail mode.
	Results []Row `json:"results"`
	// Skipped lists what could not run here, and why.
	Skipped []Skip `json:"skipped"`
	// ElapsedMillis is the drill's wall time.
	ElapsedMillis int64 `json:"elapsed_ms"`
}

// Skip is a run the drill left out.
type Skip struct {
	Engine       string `json:"engine"`
	Fault        string `json:"fault"`
	OnRedisError string `json:"on_redis_error"`
	Reason       string `json:"reason"`
}

// Row is one fault under one fail mode on one engine.
type Row struct {
	Fault  string `json:"fault"`
	Engine string `json:"engine"`
	// OnRedisError is the fail mode: open, closed or local.
	OnRedisError string `json:"on_redis_error"`
	// LatencyMillis is the latency fault's added latency; 0 for the others.
	LatencyMillis int64 `json:"latency_ms,omitempty"`
	// Decisions counts the requests sent, answered or not, over the whole
	// run (steady, fault and after).
	Decisions int64 `json:"decisions"`
	// Admitted counts the 2xx answers.
	Admitted int64 `json:"admitted"`
	// OverAdmitted counts admissions beyond the algorithm's guarantee,
	// judged on the requests the drill sent: taken in the order their
	// answers came, one is counted when, with the earlier ones not counted,
	// some span holding their whole flights (send to answer) holds more
	// than the guarantee allows over a span that long. A limiter that kept
	// its guarantee is never counted, whatever the latency.
	OverAdmitted int64 `json:"over_admitted"`
	// WronglyDenied counts refusals (429, 503) of requests that an exact
	// sliding window would have admitted for certain: fewer than the limit
	// of the consumer's admissions and failed requests could lie in the
	// window before. Redis's own 429s are judged only for an exact
	// algorithm (sliding-log); those made without Redis always.
	WronglyDenied int64 `json:"wrongly_denied"`
	// Errors counts the requests Redis did not decide: answers without
	// rate-limit fields (fail-open passes, fail-closed 503s, the local
	// limiter's answers) and transport errors.
	Errors int64 `json:"errors"`
	// TransportErrors counts requests that got no answer at all.
	TransportErrors int64 `json:"transport_errors"`
	// DetectMillis is from the fault's start to the first answer made
	// without Redis; null when there was none.
	DetectMillis *int64 `json:"detect_ms"`
	// RecoverMillis is from the fault's end to the last answer made
	// without Redis before Redis decided a request sent after the end (0
	// when Redis decided first); null when Redis decided none.
	RecoverMillis *int64 `json:"recover_ms"`
	// P50Millis and P99Millis are the latency percentiles of the requests
	// due during the fault, from when each was due.
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
	// FaultMillis is how long the fault lasted.
	FaultMillis int64 `json:"fault_ms"`
	// FailoverMillis is, for a failover, from the kill to the sentinel's
	// promotion of the replica; null otherwise, or when it did not happen.
	FailoverMillis *int64 `json:"failover_ms,omitempty"`
	// Timeline is the run interval by interval, with the fault placed on
	// it: what the pictures draw.
	Timeline *Timeline `json:"timeline,omitempty"`
}

// Timeline is a run cut into intervals by when each answer came, in ms
// since the first request was due.
type Timeline struct {
	IntervalMillis int64 `json:"interval_ms"`
	// FaultFromMillis and FaultToMillis are when the fault began and ended.
	FaultFromMillis int64              `json:"fault_from_ms"`
	FaultToMillis   int64              `json:"fault_to_ms"`
	Intervals       []TimelineInterval `json:"intervals"`
}

// TimelineInterval counts what a Row counts, in one interval.
type TimelineInterval struct {
	StartMillis   int64 `json:"start_ms"`
	Decisions     int64 `json:"decisions"`
	Admitted      int64 `json:"admitted"`
	OverAdmitted  int64 `json:"over_admitted"`
	WronglyDenied int64 `json:"wrongly_denied"`
	Errors        int64 `json:"errors"`
}

// Name names the row: "hang, go, fail closed", "latency 50ms, …".
func (r Row) Name() string {
	f := r.Fault
	if r.Fault == Latency {
		f += " " + (time.Duration(r.LatencyMillis) * time.Millisecond).String()
	}
	return fmt.Sprintf("%s, %s, fail %s", f, r.Engine, r.OnRedisError)
}

// Leaked lists the rows that admitted beyond the guarantee.
func (r Report) Leaked() []string {
	var names []string
	for _, row := range r.Results {
		if row.OverAdmitted > 0 {
			names = append(names, fmt.Sprintf("%s: %d over-admitted", row.Name(), row.OverAdmitted))
		}
	}
	return names
}

// run is one row to run.
type run struct {
	engine, fault, mode string
	latency             time.Duration
}

// plan lists the runs and the skips of c.
func plan(c Config, nginx error) ([]run, []Skip) {
	var runs []run
	var skips []Skip
	for _, e := range c.Engines {
		for _, f := range c.Faults {
			for _, m := range c.Modes {
				skip := func(reason string) { skips = append(skips, Skip{Engine: e, Fault: f, OnRedisError: m, Reason: reason}) }
				switch {
				case e == edge.EngineOpenResty && nginx != nil:
					skip(nginx.Error())
					continue
				case e == edge.EngineOpenResty && m == string(limiter.FailLocal):
					skip("the openresty engine has no local limiter")
					continue
				case e == edge.EngineOpenResty && f == Failover:
					skip("the openresty engine reaches one Redis: no Sentinel")
					continue
				case e == EngineRLS && m == string(limiter.FailLocal):
					skip("the rls service has no local limiter: it fails open or closed")
					continue
				}
				if f == Latency {
					for _, l := range c.Latencies {
						runs = append(runs, run{engine: e, fault: f, mode: m, latency: l})
					}
					continue
				}
				runs = append(runs, run{engine: e, fault: f, mode: m})
			}
		}
	}
	return runs, skips
}

// Run runs the drill: every fault under every fail mode on every engine,
// one at a time.
func Run(ctx context.Context, cfg Config) (Report, error) {
	began := time.Now()
	explicit := len(cfg.Engines) > 0
	cfg = cfg.withDefaults()
	if !explicit {
		cfg.Engines = []string{edge.EngineGo, edge.EngineOpenResty}
	}
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	_, _, nginx := edge.FindNginx()
	if nginx != nil && explicit && slices.Contains(cfg.Engines, edge.EngineOpenResty) {
		return Report{}, fmt.Errorf("drill: the openresty engine: %w", nginx)
	}
	if slices.Contains(cfg.Faults, Failover) {
		if _, err := lookSentinel(); err != nil {
			return Report{}, err
		}
	}
	runs, skips := plan(cfg, nginx)
	rep := Report{Command: "drill", Config: settings(cfg), Skipped: skips, Results: []Row{}}
	info, _ := algorithms.Lookup(cfg.Algorithm)
	rep.Guarantee = info.Guarantee.Rule(cfg.Policy)
	for i, r := range runs {
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(runs), Row{Fault: r.fault, Engine: r.engine, OnRedisError: r.mode, LatencyMillis: r.latency.Milliseconds()}.Name())
		}
		row, version, err := runOne(ctx, cfg, r)
		if err != nil {
			return rep, fmt.Errorf("drill: %s: %w", Row{Fault: r.fault, Engine: r.engine, OnRedisError: r.mode,
				LatencyMillis: r.latency.Milliseconds()}.Name(), err)
		}
		rep.RedisVersion = version
		rep.Results = append(rep.Results, row)
	}
	rep.ElapsedMillis = time.Since(began).Milliseconds()
	return rep, nil
}

// lookSentinel says whether there is a redis-sentinel to fail over with.
func lookSentinel() (string, error) {
	p, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return "", fmt.Errorf("drill: the failover fault needs %w (on Debian: apt-get install redis-sentinel)", redisrun.ErrSentinelNotFound)
	}
	return p, nil
}

func settings(c Config) Settings {
	s := Settings{Engines: slices.Clone(c.Engines), Faults: slices.Clone(c.Faults), Modes: slices.Clone(c.Modes),
		FaultMillis: c.FaultDuration.Milliseconds(), SteadyMillis: c.Steady.Milliseconds(), AfterMillis: c.After.Milliseconds(),
		Algorithm: c.Algorithm, Limit: c.Policy.Limit, WindowMillis: c.Policy.Window.Milliseconds(), Consumers: c.Consumers,
		Load: c.Load, Nodes: c.Nodes, RatePerSec: c.rate(), TimeoutMillis: c.Timeout.Milliseconds(), Batch: c.Batch,
		BreakerFailures: max(c.BreakerFailures, 0), DownAfterMillis: c.DownAfter.Milliseconds()}
	for _, l := range c.Latencies {
		s.LatenciesMillis = append(s.LatenciesMillis, l.Milliseconds())
	}
	return s
}
