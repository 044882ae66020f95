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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
)

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
	if cfg.InFlight() {
		rep, err := runInFlight(ctx, cfg, Report{Command: "race", Config: Settings{
			Limiters:          slices.Clone(cfg.Limiters),
			Concurrency:       cfg.Concurrency,
			Limit:             cfg.Policy.Limit,
			Trials:            cfg.Trials,
			RequestsPerWorker: cfg.RequestsPerWorker,
		}})
		rep.ElapsedMillis = time.Since(start).Milliseconds()
		return rep, err
	}
	client, err := openPool(ctx, cfg.Redis, cfg.Concurrency, cfg.hook)
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
	opts := []algorithms.Option{algorithms.WithClock(cfg.Clock), algorithms.WithWatchRetries(cfg.WatchRetries),
		algorithms.WithCluster(redisrun.IsCluster(cfg.Redis))}
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
	if ls, ok := lim.(algorithms.LimitSet); ok {
		res.Limits = limitsOf(ls, "")
		rules := make([]string, len(res.Limits))
		for i, l := range res.Limits {
			rules[i] = l.GuaranteeRule
		}
		res.GuaranteeRule = strings.Join(rules, " and ")
	}
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
		addLimits(res.Limits, t)
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
