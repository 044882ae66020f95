// Package race reproduces the check-then-act race of rate limiters: for each
// limiter it runs trials in which many goroutines, each on a connection opened
// before the start, are released at the same instant at one fresh key, and it
// counts what the limiter admitted against the limit. A limiter it is asked
// to explain runs one more trial with MONITOR open on the server, and the
// Explanation says what Redis executed, in order, and which moments made the
// race. It returns plain result structs and never prints.
package race

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/roundtrip"
)

// Config is one race run.
type Config struct {
	// Redis says how to reach the server. Run opens its own pool from it, sized
	// so that every goroutine has a connection opened before the release.
	Redis *redis.UniversalOptions
	// Limiters are registry names, raced in this order.
	Limiters []string
	// Scripts are users' own Lua limiters, raced after Limiters.
	Scripts []algorithms.UserScript
	// Policy is the limit every limiter enforces.
	Policy algorithms.Policy
	// Concurrency is the number of goroutines released together; 1 to MaxConcurrency.
	Concurrency int
	// RequestsPerWorker is the number of decisions each goroutine makes back to back; at least 1.
	RequestsPerWorker int
	// Trials is the number of bursts per limiter, each on a fresh key; at least 1.
	Trials int
	// Clock is where the Lua limiters take the time from.
	Clock algorithms.Clock
	// Now is the caller's clock; time.Now by default. A frozen clock makes
	// every request of a burst arrive at the same instant for the limiters.
	Now func() time.Time
	// WatchRetries bounds the watch limiter's attempts; algorithms.DefaultWatchRetries when 0.
	WatchRetries int
	// Consumer prefixes the consumer part of every key; a random "race-…" by default.
	Consumer string
	// TrialTimeout bounds one trial, including its state check; 30s by default.
	TrialTimeout time.Duration
	// Progress, when set, is called after each trial.
	Progress func(limiter string, trial, trials int)
	// Explain names limiters (of Limiters and Scripts) to explain: after
	// its trials, each runs one more, every goroutine on a connection of its
	// own, with a MONITOR connection open on the server that holds the key,
	// and its Result.Explain tells what Redis executed. At most
	// MaxExplainConcurrency goroutines.
	Explain []string
	// ExplainLines is the most commands an explanation's trace keeps;
	// DefaultExplainLines when 0, at most MaxExplainLines.
	ExplainLines int
}

// Limits on a run, so that every run is bounded.
const (
	MaxConcurrency       = 10_000
	MaxTrials            = 100_000
	MaxRequestsPerWorker = 100_000
	MaxRequests          = 10_000_000 // per trial: concurrency × requests per worker
)

// Validate checks cfg before anything is sent. Errors are *field.Error,
// naming the fields of Config (Limit and Window for the policy's).
func (cfg Config) Validate() error {
	switch {
	case cfg.Concurrency < 1 || cfg.Concurrency > MaxConcurrency:
		return field.Errorf("Concurrency", "must be between 1 and %d (got %d)", MaxConcurrency, cfg.Concurrency)
	case cfg.RequestsPerWorker < 1 || cfg.RequestsPerWorker > MaxRequestsPerWorker:
		return field.Errorf("RequestsPerWorker", "must be between 1 and %d (got %d)", MaxRequestsPerWorker, cfg.RequestsPerWorker)
	case int64(cfg.Concurrency)*int64(cfg.RequestsPerWorker) > MaxRequests:
		return field.Errorf("Concurrency", "× {RequestsPerWorker} must be at most %d (got %d)", MaxRequests, cfg.Concurrency*cfg.RequestsPerWorker)
	case cfg.Trials < 1 || cfg.Trials > MaxTrials:
		return field.Errorf("Trials", "must be between 1 and %d (got %d)", MaxTrials, cfg.Trials)
	case cfg.WatchRetries < 0:
		return field.Errorf("WatchRetries", "must be at least 1, or 0 for the default of %d (got %d)", algorithms.DefaultWatchRetries, cfg.WatchRetries)
	case len(cfg.Limiters) == 0 && len(cfg.Scripts) == 0:
		return field.Errorf("Limiters", "names no limiter")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	for _, name := range cfg.Limiters {
		if _, ok := algorithms.Lookup(name); !ok {
			return field.Errorf("Limiters", ": %v", &algorithms.UnknownError{Name: name})
		}
	}
	for _, s := range cfg.Scripts {
		if err := s.Validate(); err != nil {
			return field.Errorf("Scripts", ": %v", err)
		}
	}
	return cfg.validateExplain()
}

// validateExplain checks Explain and ExplainLines.
func (cfg Config) validateExplain() error {
	if cfg.ExplainLines < 0 || cfg.ExplainLines > MaxExplainLines {
		return field.Errorf("ExplainLines", "must be between 1 and %d, or 0 for the default of %d (got %d)",
			MaxExplainLines, DefaultExplainLines, cfg.ExplainLines)
	}
	if len(cfg.Explain) == 0 {
		return nil
	}
	raced := slices.Clone(cfg.Limiters)
	for _, s := range cfg.Scripts {
		raced = append(raced, s.Name)
	}
	for _, name := range cfg.Explain {
		if !slices.Contains(raced, name) {
			return field.Errorf("Explain", "names %s, which is not raced (raced: %s)", name, strings.Join(raced, ", "))
		}
	}
	if cfg.Concurrency > MaxExplainConcurrency {
		return field.Errorf("Explain", "gives each goroutine a connection of its own: {Concurrency} must be at most %d (got %d)",
			MaxExplainConcurrency, cfg.Concurrency)
	}
	return nil
}

// Settings is the configuration as reports show it; see Config for each field.
type Settings struct {
	Limiters          []string `json:"limiters"`
	Concurrency       int      `json:"concurrency"`
	Limit             int64    `json:"limit"`
	WindowMillis      int64    `json:"window_ms"`
	Trials            int      `json:"trials"`
	RequestsPerWorker int      `json:"requests_per_worker"`
	// Clock is "caller" or "redis"; only the Lua limiters honour "redis".
	Clock        string `json:"clock"`
	WatchRetries int    `json:"watch_retries"`
}

// Report is a whole run.
type Report struct {
	// Command is "race".
	Command string `json:"command"`
	// Redis is the server the run was measured on; the caller fills it.
	Redis redisrun.Info `json:"redis"`
	// Config is what was run.
	Config Settings `json:"config"`
	// Results has one entry per limiter, in the order raced.
	Results []Result `json:"results"`
	// ElapsedMillis is the wall time of the run, connection set-up included.
	ElapsedMillis int64 `json:"elapsed_ms"`
}

// Spread is the release spread in microseconds: in each trial, the last
// goroutine's first send minus the first one's; the median and the largest
// over the trials.
type Spread struct {
	P50 int64 `json:"p50"`
	Max int64 `json:"max"`
}

// Result is one limiter over all its trials.
type Result struct {
	// Limiter is the registry name.
	Limiter string `json:"limiter"`
	// Atomic is whether the limiter checks and updates in one indivisible step.
	Atomic bool `json:"atomic"`
	// Description says what the limiter does.
	Description string `json:"description"`
	// Trials is the number of bursts run.
	Trials int `json:"trials"`
	// Requests is the number of decisions made over all trials.
	Requests int64 `json:"requests"`
	// Admitted is the number of decisions that admitted a request.
	Admitted int64 `json:"admitted"`
	// Guarantee is the rule the limiter was judged by (an algorithms.Guarantee),
	// and GuaranteeRule says it in words for the policy raced.
	Guarantee     string `json:"guarantee"`
	GuaranteeRule string `json:"guarantee_rule"`
	// Clock is the clock that decided the limiter's windows: "caller" or "redis".
	Clock string `json:"clock"`
	// ExpectedAdmitted sums the trials' Expected: the most each trial's
	// span allowed under the limiter's own guarantee.
	ExpectedAdmitted int64 `json:"expected_admitted"`
	// OverAdmitted sums what trials admitted beyond Expected.
	OverAdmitted int64 `json:"over_admitted"`
	// UnderAdmitted sums what trials fell short of their Minimum: policy
	// under-admission, apart from errors and exhausted retries.
	UnderAdmitted int64 `json:"under_admitted"`
	// LeakedTrials counts trials that admitted more than Expected.
	LeakedTrials int `json:"leaked_trials"`
	// WorstTrialAdmitted is the most one trial admitted, and
	// WorstTrialExpected what the guarantee allowed in that trial (the least,
	// among trials that admitted as many).
	WorstTrialAdmitted int64 `json:"worst_trial_admitted"`
	WorstTrialExpected int64 `json:"worst_trial_expected"`
	// MaxTrialExpected is the largest Expected of any trial, and
	// TrialsAboveLimit counts the trials whose guarantee allowed more than the
	// limit (a span across an aligned edge, a refill, a trial longer than a window).
	MaxTrialExpected int64 `json:"max_trial_expected"`
	TrialsAboveLimit int   `json:"trials_above_limit"`
	// Errors counts decisions that failed (Redis errors and timeouts).
	Errors int64 `json:"errors"`
	// RetriesExhausted counts requests the watch limiter denied after running
	// out of attempts: contention, not the policy, so neither is counted as
	// under-admission.
	RetriesExhausted int64 `json:"retries_exhausted"`
	// RoundTrips counts the Redis round trips of all decisions, measured on the client.
	RoundTrips int64 `json:"round_trips"`
	// AbortedTransactions counts EXECs that Redis aborted because a WATCHed key changed.
	AbortedTransactions int64 `json:"aborted_transactions"`
	// StateVerified is true when, after every trial, the key held exactly what
	// was admitted (the admitted members of a log, or the admitted count of a
	// counter); false when any trial's key did not; null when no trial could be
	// checked (the window was shorter than the trial).
	StateVerified *bool `json:"state_verified"`
	// StateMismatches counts the trials whose key did not match.
	StateMismatches int `json:"state_mismatches"`
	// TrialsOutlastingWindow counts trials whose real span reached a window,
	// so that key expiry may have wiped the client's state during them.
	TrialsOutlastingWindow int `json:"trials_outlasting_window"`
	// ReleaseSpreadMicros is the release spread over the trials, in µs.
	ReleaseSpreadMicros Spread `json:"release_spread_us"`
	// LatencyMicros is the per-decision latency, retries included, in µs,
	// from the merged histogram of every decision.
	LatencyMicros hdr.Percentiles `json:"latency_us"`
	// ElapsedMillis is the wall time of all the limiter's trials.
	ElapsedMillis int64 `json:"elapsed_ms"`
	// TrialResults has every trial, in order.
	TrialResults []Trial `json:"trial_results"`
	// Explain is the explained trial, when Config.Explain names the limiter.
	Explain *Explanation `json:"explain,omitempty"`
	// Histogram holds every decision's latency in microseconds.
	Histogram *hdrhistogram.Histogram `json:"-"`
}

// Trial is one burst.
type Trial struct {
	// Admitted counts the decisions that admitted a request.
	Admitted int64 `json:"admitted"`
	// Expected is the most a correct limiter may admit in the trial: Bound,
	// at most the requests.
	Expected int64 `json:"expected"`
	// Bound is what the limiter's guarantee allows one client over the
	// trial: Guarantee.Max over the deciding clock's span from ClockFromMillis
	// to ClockToMillis on a fresh key, plus a limit for each whole window of
	// real time the trial lasted (key expiry, on Redis's clock, may wipe a
	// client's state after a window without writes; a frozen caller clock
	// never frees it otherwise).
	Bound int64 `json:"bound"`
	// Minimum is the least a correct limiter admits: the limit, or the
	// decisions made when there were fewer (failed decisions and exhausted
	// retries were never decided by the policy).
	Minimum int64 `json:"minimum"`
	// ClockFromMillis and ClockToMillis are the clock that decides (the
	// caller's, or Redis's TIME), read before the release and after the last
	// reply, in ms since the epoch: every decision's time lies between them.
	ClockFromMillis int64 `json:"clock_from_ms"`
	ClockToMillis   int64 `json:"clock_to_ms"`
	// SpanMicros is the trial's real span, from the first send to the last reply, in µs.
	SpanMicros int64 `json:"span_us"`
	// OutlastedWindow is set when the real span reached the window (less the
	// millisecond Redis rounds expiry to).
	OutlastedWindow bool `json:"outlasted_window"`
	// Errors counts decisions that failed.
	Errors int64 `json:"errors"`
	// RetriesExhausted counts watch denials after running out of attempts.
	RetriesExhausted int64 `json:"retries_exhausted"`
	// RoundTrips is counted by a hook on the client; ReportedRoundTrips is
	// the sum of the decisions' Attempts. The two agree unless a call failed.
	RoundTrips         int64 `json:"round_trips"`
	ReportedRoundTrips int64 `json:"reported_round_trips"`
	// AbortedTransactions counts EXECs aborted because a WATCHed key changed.
	AbortedTransactions int64 `json:"aborted_transactions"`
	// ReleaseSpreadMicros is the last goroutine's first send minus the first one's, in µs.
	ReleaseSpreadMicros int64 `json:"release_spread_us"`
	// ElapsedMicros is the time from the release until the last decision returned, in µs.
	ElapsedMicros int64 `json:"elapsed_us"`
	// StateVerified is whether the key held exactly what was admitted; null
	// when the trial lasted too long for the key to be trusted.
	StateVerified *bool `json:"state_verified"`
	// State is what the key held: the log's member count or the counter's value.
	State int64 `json:"state"`
	// LatencyMicros is the trial's decision latency, retries included, in
	// µs: exact nearest-rank percentiles of its decisions.
	LatencyMicros TrialLatency `json:"latency_us"`
}

// TrialLatency is one trial's decision latency, in µs.
type TrialLatency struct {
	P50 int64 `json:"p50"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// trialLatency takes the exact nearest-rank percentiles of one trial's
// latencies; it sorts them.
func trialLatency(us []int64) TrialLatency {
	if len(us) == 0 {
		return TrialLatency{}
	}
	slices.Sort(us)
	rank := func(p float64) int64 { return us[max(int(math.Ceil(p*float64(len(us))))-1, 0)] }
	return TrialLatency{P50: rank(0.50), P99: rank(0.99), Max: us[len(us)-1]}
}

// Run races every limiter in cfg and returns the report. It stops at the
// first error, and when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.Redis == nil {
		return Report{}, errors.New("race: no Redis options")
	}
	if cfg.WatchRetries == 0 {
		cfg.WatchRetries = algorithms.DefaultWatchRetries
	}
	if cfg.TrialTimeout <= 0 {
		cfg.TrialTimeout = 30 * time.Second
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "race-" + randid.Hex(4)
	}
	client, err := openPool(ctx, cfg.Redis, cfg.Concurrency)
	if err != nil {
		return Report{}, err
	}
	defer client.Close()

	rep := Report{
		Command: "race",
		Config: Settings{
			Limiters:          slices.Clone(cfg.Limiters),
			Concurrency:       cfg.Concurrency,
			Limit:             cfg.Policy.Limit,
			WindowMillis:      cfg.Policy.Window.Milliseconds(),
			Trials:            cfg.Trials,
			RequestsPerWorker: cfg.RequestsPerWorker,
			Clock:             cfg.Clock.String(),
			WatchRetries:      cfg.WatchRetries,
		},
	}
	opts := []algorithms.Option{algorithms.WithClock(cfg.Clock), algorithms.WithWatchRetries(cfg.WatchRetries)}
	if cfg.Now != nil {
		opts = append(opts, algorithms.WithNow(cfg.Now))
	}
	var entrants []explained
	for _, name := range cfg.Limiters {
		info, _ := algorithms.Lookup(name)
		entrants = append(entrants, explained{info, func(c redis.UniversalClient) (algorithms.Limiter, error) {
			return algorithms.New(name, c, cfg.Policy, opts...)
		}})
	}
	for _, s := range cfg.Scripts {
		rep.Config.Limiters = append(rep.Config.Limiters, s.Name)
		entrants = append(entrants, explained{s.Info(), func(c redis.UniversalClient) (algorithms.Limiter, error) {
			return s.New(c, cfg.Policy, opts...)
		}})
	}
	for _, e := range entrants {
		lim, err := e.build(client)
		if err != nil {
			return rep, fmt.Errorf("race: %s: %w", e.info.Name, err)
		}
		res, err := runLimiter(ctx, client, cfg, e.info, lim)
		if err != nil {
			return rep, fmt.Errorf("race: %s: %w", e.info.Name, err)
		}
		if slices.Contains(cfg.Explain, e.info.Name) {
			key := algorithms.Key(cfg.Consumer+"-"+e.info.Name+"-explain", e.info.Name)
			ex, err := explain(ctx, client, cfg, e, key)
			if err != nil && ctx.Err() != nil {
				return rep, fmt.Errorf("race: %s: explain: %w", e.info.Name, err)
			}
			if err != nil {
				// The race stands without its trace: say why there is none.
				ex = Explanation{Skipped: "the trace could not be taken: " + err.Error(), Node: ex.Node, Key: key}
			}
			res.Explain = &ex
		}
		rep.Results = append(rep.Results, res)
	}
	rep.ElapsedMillis = time.Since(start).Milliseconds()
	return rep, nil
}

// openPool opens a client whose pool holds exactly n connections, all opened
// and checked with a PING before any trial, and counts round trips through a
// hook. With the pool no larger than n, holding n connections at once
// initialises every connection it will ever hand out, so no handshake is sent
// (and counted) during a trial.
func openPool(ctx context.Context, base *redis.UniversalOptions, n int) (redis.UniversalClient, error) {
	// One connection first, so that an unreachable address fails once,
	// quickly, before the pool tries to dial it n times.
	if _, err := redisrun.Ping(ctx, base); err != nil {
		return nil, fmt.Errorf("race: %w", err)
	}
	opts := *base
	opts.PoolSize = n
	opts.MinIdleConns = n
	opts.MaxIdleConns = 0      // keep them all
	opts.PipelinePoolSize = -1 // pipelines use the same pre-opened connections
	client := redis.NewUniversalClient(&opts)
	roundtrip.Attach(client)

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		// Every node has a pool of its own: fill each one.
		err = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			return holdConns(ctx, node, n)
		})
	} else {
		err = holdConns(ctx, client, n)
	}
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("race: opening %d connections: %w", n, err)
	}
	return client, nil
}

// holdConns holds n connections of c's pool at once, so the pool must open
// n, and checks each with a PING.
func holdConns(ctx context.Context, c interface {
	Watch(context.Context, func(*redis.Tx) error, ...string) error
}, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	var hold sync.WaitGroup
	hold.Add(n)
	release := make(chan struct{})
	var opened atomic.Int64
	for range n {
		g.Go(func() error {
			held := false
			// A Tx pins the connection of its first command until fn
			// returns; with no keys it sends no WATCH, only the PING.
			err := c.Watch(gctx, func(tx *redis.Tx) error {
				err := tx.Ping(gctx).Err()
				if err == nil {
					opened.Add(1)
				}
				held = true
				hold.Done()
				select {
				case <-release:
				case <-gctx.Done():
				}
				return err
			})
			if !held {
				hold.Done()
			}
			return err
		})
	}
	waited := make(chan struct{})
	go func() { hold.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-gctx.Done():
	}
	close(release)
	err := g.Wait()
	<-waited
	if err != nil {
		return err
	}
	if got := opened.Load(); got < int64(n) {
		return fmt.Errorf("opened %d of %d", got, n)
	}
	return nil
}

// worker holds one goroutine's measurements over a limiter's trials.
type worker struct {
	// lim is the limiter it decides with: the limiter's own, or, in an
	// explained trial, one on its own connection, whose commands go to log.
	lim algorithms.Limiter
	log *clientLog
	// latencies holds this trial's decision latencies in µs; the trial
	// records them into the limiter's histogram when it ends, so that
	// 10,000 goroutines do not each hold a histogram.
	latencies []int64
	firstSend time.Time
	lastReply time.Time
	admitted  int64
	errs      int64
	exhausted int64
	attempts  int64
	members   []string
	err       error
}

func runLimiter(ctx context.Context, client redis.UniversalClient, cfg Config, info algorithms.Info, lim algorithms.Limiter) (Result, error) {
	name := info.Name
	res := Result{
		Limiter:       name,
		Atomic:        info.Atomic,
		Description:   info.Description,
		Guarantee:     string(info.Guarantee),
		GuaranteeRule: info.Guarantee.Rule(cfg.Policy),
		Clock:         info.Decides(cfg.Clock).String(),
		Histogram:     hdr.New(),
	}
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{lim: lim}
	}
	if l, ok := lim.(algorithms.Loader); ok {
		if err := l.Load(ctx); err != nil {
			return res, err
		}
	}
	began := time.Now()
	res.WorstTrialAdmitted = -1
	verified, checked := true, 0
	var spreads []int64
	for trial := range cfg.Trials {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		key := algorithms.Key(cfg.Consumer+"-"+name+"-"+strconv.Itoa(trial), name)
		t, err := runTrial(ctx, client, lim, info, key, cfg, workers)
		if err != nil {
			return res, fmt.Errorf("trial %d: %w", trial+1, err)
		}
		res.TrialResults = append(res.TrialResults, t)
		res.Trials++
		res.Requests += int64(cfg.Concurrency * cfg.RequestsPerWorker)
		res.Admitted += t.Admitted
		res.ExpectedAdmitted += t.Expected
		if t.Admitted > t.Expected {
			res.OverAdmitted += t.Admitted - t.Expected
			res.LeakedTrials++
		}
		res.UnderAdmitted += max(t.Minimum-t.Admitted, 0)
		if t.Admitted > res.WorstTrialAdmitted || (t.Admitted == res.WorstTrialAdmitted && t.Expected < res.WorstTrialExpected) {
			res.WorstTrialAdmitted, res.WorstTrialExpected = t.Admitted, t.Expected
		}
		res.MaxTrialExpected = max(res.MaxTrialExpected, t.Expected)
		if t.Bound > cfg.Policy.Limit {
			res.TrialsAboveLimit++
		}
		res.Errors += t.Errors
		res.RetriesExhausted += t.RetriesExhausted
		res.RoundTrips += t.RoundTrips
		res.AbortedTransactions += t.AbortedTransactions
		if t.OutlastedWindow {
			res.TrialsOutlastingWindow++
		}
		if t.StateVerified != nil {
			checked++
			if !*t.StateVerified {
				verified = false
				res.StateMismatches++
			}
		}
		spreads = append(spreads, t.ReleaseSpreadMicros)
		for _, w := range workers {
			for _, us := range w.latencies {
				hdr.Record(res.Histogram, us)
			}
			w.latencies = w.latencies[:0]
		}
		if cfg.Progress != nil {
			cfg.Progress(name, trial+1, cfg.Trials)
		}
	}
	res.ElapsedMillis = time.Since(began).Milliseconds()
	if checked > 0 {
		res.StateVerified = &verified
	}
	res.LatencyMicros = hdr.PercentilesOf(res.Histogram)
	slices.Sort(spreads)
	res.ReleaseSpreadMicros = Spread{P50: spreads[(len(spreads)-1)/2], Max: spreads[len(spreads)-1]}
	return res, nil
}

// runTrial releases the workers together at key, each deciding with its
// own limiter, and checks the key afterwards; lim says which keys hold it.
func runTrial(ctx context.Context, client redis.UniversalClient, lim algorithms.Limiter, info algorithms.Info,
	key string, cfg Config, workers []*worker) (Trial, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.TrialTimeout)
	defer cancel()
	tctx, tl := roundtrip.With(ctx)

	var ready, done sync.WaitGroup
	ready.Add(len(workers))
	done.Add(len(workers))
	release := make(chan struct{})
	var cancelled atomic.Bool // set when the trial is called off before the release
	for _, w := range workers {
		w.admitted, w.errs, w.exhausted, w.attempts, w.members, w.err = 0, 0, 0, 0, w.members[:0], nil
		go func() {
			defer done.Done()
			ready.Done()
			<-release
			if cancelled.Load() {
				return
			}
			w.firstSend = time.Now()
			for range cfg.RequestsPerWorker {
				t0 := time.Now()
				from := w.log.mark()
				d, err := w.lim.Allow(tctx, key)
				w.latencies = append(w.latencies, time.Since(t0).Microseconds())
				w.log.decided(from, d.Allowed, err)
				w.attempts += int64(d.Attempts)
				switch {
				case errors.Is(err, algorithms.ErrRetriesExhausted):
					w.exhausted++
				case err != nil:
					w.errs++
					if w.err == nil {
						w.err = err
					}
				case d.Allowed:
					w.admitted++
					if d.Member != "" {
						w.members = append(w.members, d.Member)
					}
				}
			}
			w.lastReply = time.Now()
		}()
	}
	ready.Wait() // every goroutine is running and about to wait on release
	clock := decidingClock(cfg, info, client, key)
	from, err := clock(ctx)
	if err != nil {
		cancelled.Store(true)
		close(release)
		done.Wait()
		return Trial{}, err
	}
	began := time.Now()
	close(release)
	done.Wait()
	elapsed := time.Since(began)
	to, err := clock(ctx)
	if err != nil {
		return Trial{}, err
	}

	requests := int64(len(workers) * cfg.RequestsPerWorker)
	t := Trial{
		ClockFromMillis:     from.UnixMilli(),
		ClockToMillis:       to.UnixMilli(),
		RoundTrips:          tl.Trips(),
		AbortedTransactions: tl.Aborted(),
		ElapsedMicros:       elapsed.Microseconds(),
	}
	first, last := workers[0].firstSend, workers[0].firstSend
	lastReply := workers[0].lastReply
	var members []string
	var firstErr error
	var latencies []int64
	for _, w := range workers {
		latencies = append(latencies, w.latencies...)
		t.Admitted += w.admitted
		t.Errors += w.errs
		t.RetriesExhausted += w.exhausted
		t.ReportedRoundTrips += w.attempts
		members = append(members, w.members...)
		if w.firstSend.Before(first) {
			first = w.firstSend
		}
		if w.firstSend.After(last) {
			last = w.firstSend
		}
		if w.lastReply.After(lastReply) {
			lastReply = w.lastReply
		}
		if firstErr == nil {
			firstErr = w.err
		}
	}
	t.LatencyMicros = trialLatency(latencies)
	t.ReleaseSpreadMicros = last.Sub(first).Microseconds()
	span := lastReply.Sub(first)
	t.SpanMicros = span.Microseconds()
	t.OutlastedWindow = outlasted(span, cfg.Policy)
	t.Bound = bound(info.Guarantee, cfg.Policy, from, to, span)
	t.Expected = min(requests, t.Bound)
	t.Minimum = min(requests-t.Errors-t.RetriesExhausted, cfg.Policy.Limit)
	if t.Errors == requests {
		return t, fmt.Errorf("every decision failed: %w", firstErr)
	}

	// The key can only have expired or been pruned once a window has passed
	// since the first send; check it only before then.
	if info.State != algorithms.StateNone {
		state, err := readState(ctx, client, info.State, key)
		if err != nil {
			return t, err
		}
		if time.Since(first) < cfg.Policy.Window {
			ok := matches(info.State, state, t.Admitted, members)
			t.StateVerified = &ok
		}
		t.State = state.count
	}
	if err := client.Del(ctx, algorithms.KeysOf(lim, key)...).Err(); err != nil {
		return t, fmt.Errorf("del %s: %w", key, err)
	}
	return t, nil
}

// bound is what guarantee g allows one client over a trial whose decisions
// read the deciding clock between from and to, on a fresh key, and that
// lasted span of real time. Redis expires a key on its own clock after a
// window without writes, which wipes the client's state: a request whose
// time was read before the expiry and decided after it, or any request on a
// frozen test clock, then starts afresh. Each wipe needs a window of real
// time, and adds at most a limit to the clock's bound, so a trial may admit
// one more limit per window of real time it lasted.
func bound(g algorithms.Guarantee, p algorithms.Policy, from, to time.Time, span time.Duration) int64 {
	b := g.Max(p, algorithms.Span{From: from, To: to, Fresh: true})
	if outlasted(span, p) {
		b += p.Limit * int64((span+time.Millisecond)/p.Window)
	}
	return b
}

// outlasted reports whether a trial of span could see a key expire: Redis
// keeps expiry in whole milliseconds, so a key can expire a millisecond less
// than a window after its last write, as our clock measures it.
func outlasted(span time.Duration, p algorithms.Policy) bool {
	return span+time.Millisecond >= p.Window
}

// decidingClock reads the clock that decides info's windows for key: the
// caller's clock (Config.Now, or the real one), or Redis's TIME on the
// node that holds the key.
func decidingClock(cfg Config, info algorithms.Info, client redis.UniversalClient, key string) func(context.Context) (time.Time, error) {
	if info.Decides(cfg.Clock) == algorithms.ClockCaller {
		now := cfg.Now
		if now == nil {
			now = time.Now
		}
		return func(context.Context) (time.Time, error) { return now(), nil }
	}
	return func(ctx context.Context) (time.Time, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var c redis.Cmdable = client
		if cc, ok := client.(*redis.ClusterClient); ok {
			node, err := cc.MasterForKey(ctx, key)
			if err != nil {
				return time.Time{}, fmt.Errorf("the node of %s: %w", key, err)
			}
			c = node
		}
		t, err := c.Time(ctx).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("time: %w", err)
		}
		return t, nil
	}
}

type keyState struct {
	count   int64
	members map[string]bool
}

func readState(ctx context.Context, c redis.UniversalClient, kind algorithms.State, key string) (keyState, error) {
	switch kind {
	case algorithms.StateLog:
		ms, err := c.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			return keyState{}, fmt.Errorf("zrange %s: %w", key, err)
		}
		set := make(map[string]bool, len(ms))
		for _, m := range ms {
			set[m] = true
		}
		return keyState{count: int64(len(ms)), members: set}, nil
	default:
		n, err := c.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return keyState{}, fmt.Errorf("get %s: %w", key, err)
		}
		return keyState{count: n}, nil
	}
}

// matches reports whether the key holds exactly what was admitted.
func matches(kind algorithms.State, s keyState, admitted int64, members []string) bool {
	if s.count != admitted {
		return false
	}
	if kind != algorithms.StateLog {
		return true
	}
	for _, m := range members {
		if !s.members[m] {
			return false
		}
	}
	return int64(len(members)) == admitted
}

// Leaked names each limiter that admitted more than its own guarantee
// allowed in some trial, with how many over: "naive over-admitted 1385".
func (r Report) Leaked() []string {
	var leaked []string
	for _, res := range r.Results {
		if res.OverAdmitted > 0 {
			leaked = append(leaked, fmt.Sprintf("%s over-admitted %d", res.Limiter, res.OverAdmitted))
		}
	}
	return leaked
}
