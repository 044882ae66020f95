package compare

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/roundtrip"
	"github.com/ratelab/ratelab/race"
)

// open checks on one connection that the server answers, so that an
// unreachable address fails once, quickly, before the pool dials it; then it
// connects a client with n pooled connections, no retries (a retried
// decision could count twice) and the round-trip hook.
func open(ctx context.Context, base *redis.UniversalOptions, n int) (redis.UniversalClient, error) {
	if _, err := redisrun.Ping(ctx, base); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	opts := *base
	opts.PoolSize = n + 4
	opts.MinIdleConns = n
	opts.MaxRetries = -1
	opts.PipelinePoolSize = -1
	c := redis.NewUniversalClient(&opts)
	roundtrip.Attach(c)
	return c, nil
}

// simClock is a caller clock the workload moves. The scripts keep the time
// in their state and use key expiry only to collect state a window after it
// stopped mattering, so a simulated clock running ahead of Redis's is safe.
type simClock struct {
	start  time.Time
	offset atomic.Int64 // ns after start
}

func newSimClock(start time.Time) *simClock { return &simClock{start: start} }

// Now is the simulated time.
func (c *simClock) Now() time.Time { return c.start.Add(time.Duration(c.offset.Load())) }

// Set moves the clock to start+d.
func (c *simClock) Set(d time.Duration) { c.offset.Store(int64(d)) }

// pacer guards a simulated-clock workload: keys expire on Redis's real
// clock, so the workload is only sound while real time does not run ahead of
// the simulated time by a good part of a window.
type pacer struct {
	start  time.Time
	window time.Duration
}

func newPacer(w time.Duration) pacer { return pacer{start: time.Now(), window: w} }

// check fails when real time has run more than half a window ahead of the
// simulated time sim (both since the workload began).
func (p pacer) check(sim time.Duration) error {
	if real := time.Since(p.start); real-sim > p.window/2 {
		return fmt.Errorf("decisions took %s of real time for %s of simulated time, so keys could expire "+
			"before the simulated window ends: use a longer --window or a lower --limit",
			real.Round(time.Millisecond), sim.Round(time.Millisecond))
	}
	return nil
}

// nextBoundary is the first window boundary at least one window after now.
func nextBoundary(w time.Duration) time.Time {
	ms := w.Milliseconds()
	now := time.Now().UnixMilli()
	return time.UnixMilli((now/ms + 2) * ms)
}

// burst releases BurstConcurrency goroutines at one key at the same
// simulated instant, so that no algorithm refills during the burst.
func burst(ctx context.Context, _ redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	clock := newSimClock(nextBoundary(cfg.Policy.Window).Add(cfg.Policy.Window / 2))
	rc := race.Config{
		Now:               clock.Now,
		Redis:             cfg.Redis,
		Policy:            cfg.Policy,
		Concurrency:       cfg.BurstConcurrency,
		RequestsPerWorker: 1,
		Trials:            cfg.BurstTrials,
		Consumer:          cfg.Consumer + "-burst",
	}
	if e.script != nil {
		rc.Scripts = []algorithms.UserScript{*e.script}
	} else {
		rc.Limiters = []string{e.info.Name}
	}
	rep, err := race.Run(ctx, rc)
	if err != nil {
		return err
	}
	r := rep.Results[0]
	if r.Errors > 0 {
		return fmt.Errorf("%s failed in the burst", plural.Count(r.Errors, "decision"))
	}
	// Every request arrived at the same simulated instant: exactly the limit
	// may be admitted, however long the trial took for real.
	var over, under int64
	for _, t := range r.TrialResults {
		if real := time.Duration(t.ElapsedMicros) * time.Microsecond; real > cfg.Policy.Window/2 {
			return fmt.Errorf("a burst trial took %s, so keys could expire during it: use a longer --window", real)
		}
		want := min(int64(cfg.BurstConcurrency), cfg.Policy.Limit)
		over += max(t.Admitted-want, 0)
		under += max(want-t.Admitted, 0)
	}
	res.BurstOverAdmitted, res.BurstUnderAdmitted = &over, &under
	return nil
}

// boundary sends a full limit 1 ms before a window boundary and another at
// it, and finds the most admitted inside one window's span.
func boundary(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	b := nextBoundary(cfg.Policy.Window)
	clock := newSimClock(b.Add(-time.Millisecond))
	lim, err := e.new(client, cfg.Policy, algorithms.WithNow(clock.Now))
	if err != nil {
		return err
	}
	key := algorithms.Key(cfg.Consumer+"-boundary", e.info.Name)
	defer cleanup(client, lim, key)
	var admitted []int64
	pace := newPacer(cfg.Policy.Window)
	for _, at := range []time.Duration{0, time.Millisecond} {
		clock.Set(at)
		for range cfg.Policy.Limit {
			d, err := lim.Allow(ctx, key)
			if err != nil {
				return err
			}
			if d.Allowed {
				admitted = append(admitted, clock.Now().UnixMilli())
			}
			res.BoundaryTimeline = append(res.BoundaryTimeline, Decision{AtMillis: at.Milliseconds(), Allowed: d.Allowed})
			if err := pace.check(at); err != nil {
				return err
			}
		}
	}
	n := maxInWindow(admitted, cfg.Policy.Window.Milliseconds())
	res.BoundaryMaxInWindow = &n
	return nil
}

// hammer has one client send at three times the limit for three windows,
// starting half-way through a window, then retry every 100 ms (or every
// tenth of the window, if that is shorter) until admitted, for at most ten
// windows.
func hammer(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	w := cfg.Policy.Window
	clock := newSimClock(nextBoundary(w).Add(-w / 2))
	pace := newPacer(w)
	lim, err := e.new(client, cfg.Policy, algorithms.WithNow(clock.Now))
	if err != nil {
		return err
	}
	key := algorithms.Key(cfg.Consumer+"-hammer", e.info.Name)
	defer cleanup(client, lim, key)
	n := 9 * cfg.Policy.Limit
	interval := w / time.Duration(3*cfg.Policy.Limit)
	var admitted []int64
	for i := range n {
		at := time.Duration(i) * interval
		clock.Set(at)
		d, err := lim.Allow(ctx, key)
		if err != nil {
			return err
		}
		if d.Allowed {
			admitted = append(admitted, clock.Now().UnixMilli())
		}
		res.HammerTimeline = append(res.HammerTimeline, Decision{AtMillis: at.Milliseconds(), Allowed: d.Allowed})
		if err := pace.check(at); err != nil {
			return err
		}
	}
	stop := 3 * w
	res.HammerLockedOut = true
	every := max(min(100*time.Millisecond, w/10), time.Millisecond)
	for t := stop + every; t <= stop+10*w; t += every {
		clock.Set(t)
		d, err := lim.Allow(ctx, key)
		if err != nil {
			return err
		}
		res.HammerTimeline = append(res.HammerTimeline, Decision{AtMillis: t.Milliseconds(), Allowed: d.Allowed})
		if d.Allowed {
			admitted = append(admitted, clock.Now().UnixMilli())
			rec := (t - stop).Milliseconds()
			res.HammerRecoveryMillis = &rec
			res.HammerLockedOut = false
			break
		}
	}
	m := maxInWindow(admitted, w.Milliseconds())
	res.HammerMaxInWindow = &m
	return nil
}

// maxInWindow is the most times (sorted, in ms) inside any span (t-w, t].
func maxInWindow(times []int64, w int64) int64 {
	best, lo := 0, 0
	for hi := range times {
		for times[hi]-times[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return int64(best)
}

// accuracy sends each client a Poisson stream at 0.8 to 1.2 times the limit
// for AccuracyWindows windows and judges every decision against an exact
// sliding window over what the algorithm admitted.
func accuracy(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	w := cfg.Policy.Window
	span := time.Duration(cfg.AccuracyWindows) * w
	// Bound the stream to about 200,000 decisions.
	clients := cfg.AccuracyClients
	perClient := int64(cfg.AccuracyWindows) * cfg.Policy.Limit
	if int64(clients)*perClient > 200_000 {
		clients = int(max(1, 200_000/perClient))
	}
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0x5eed))
	streams := make([][]time.Duration, clients)
	for c := range streams {
		rate := (0.8 + 0.4*rng.Float64()) * float64(cfg.Policy.Limit) / float64(w) // per ns
		for t := time.Duration(rng.ExpFloat64() / rate); t < span; t += time.Duration(rng.ExpFloat64() / rate) {
			streams[c] = append(streams[c], t)
		}
	}
	var falseAllow, falseDeny, total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan int)
	g.Go(func() error {
		defer close(next)
		for c := range streams {
			select {
			case next <- c:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range min(8, clients) {
		g.Go(func() error {
			for c := range next {
				clock := newSimClock(nextBoundary(w))
				lim, err := e.new(client, cfg.Policy, algorithms.WithNow(clock.Now))
				if err != nil {
					return err
				}
				key := algorithms.Key(cfg.Consumer+"-accuracy-"+strconv.Itoa(c), e.info.Name)
				var window []int64 // what the algorithm admitted, oldest first
				pace := newPacer(w)
				for _, t := range streams[c] {
					if err := pace.check(t); err != nil {
						cleanup(client, lim, key)
						return err
					}
					clock.Set(t)
					now := clock.Now().UnixMilli()
					d, err := lim.Allow(gctx, key)
					if err != nil {
						cleanup(client, lim, key)
						return err
					}
					for len(window) > 0 && window[0] <= now-w.Milliseconds() {
						window = window[1:]
					}
					exact := int64(len(window)) < cfg.Policy.Limit
					switch {
					case d.Allowed && !exact:
						falseAllow.Add(1)
					case !d.Allowed && exact:
						falseDeny.Add(1)
					}
					if d.Allowed {
						window = append(window, now)
					}
					total.Add(1)
				}
				cleanup(client, lim, key)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	n := total.Load()
	fa, fd := float64(falseAllow.Load())/float64(max(n, 1)), float64(falseDeny.Load())/float64(max(n, 1))
	res.FalseAllowRate, res.FalseDenyRate, res.AccuracyDecisions = &fa, &fd, n
	res.AccuracyClients = clients
	return nil
}

// memory fills one client to each of MemoryLimits and reads MEMORY USAGE
// of its keys. On a server without MEMORY USAGE the figures stay null.
func memory(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	out := map[string]int64{}
	for _, limit := range MemoryLimits() {
		p := algorithms.Policy{Limit: limit, Window: cfg.Policy.Window}
		clock := newSimClock(nextBoundary(p.Window))
		lim, err := e.new(client, p, algorithms.WithNow(clock.Now))
		if err != nil {
			return err
		}
		key := algorithms.Key(cfg.Consumer+"-memory-"+strconv.FormatInt(limit, 10), e.info.Name)
		if err := fill(ctx, lim, key, limit); err != nil {
			cleanup(client, lim, key)
			return err
		}
		var bytes int64
		for _, k := range algorithms.KeysOf(lim, key) {
			n, err := client.MemoryUsage(ctx, k, 0).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				cleanup(client, lim, key)
				if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
					return nil // the embedded server has no MEMORY USAGE
				}
				return fmt.Errorf("memory usage %s: %w", k, err)
			}
			bytes += n
		}
		cleanup(client, lim, key)
		out[strconv.FormatInt(limit, 10)] = bytes
	}
	res.BytesPerClient = out
	return nil
}

// fill makes decisions for key from 16 goroutines until limit were admitted
// (or 2 × limit + 100 were made).
func fill(ctx context.Context, lim algorithms.Limiter, key string, limit int64) error {
	var admitted, made atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range 16 {
		g.Go(func() error {
			for admitted.Load() < limit && made.Add(1) <= 2*limit+100 {
				d, err := lim.Allow(gctx, key)
				if err != nil {
					return err
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// entrant is one algorithm under comparison: a registered one, or a user's script.
type entrant struct {
	info   algorithms.Info
	script *algorithms.UserScript
}

func (e entrant) new(c redis.UniversalClient, p algorithms.Policy, opts ...algorithms.Option) (algorithms.Limiter, error) {
	if e.script != nil {
		return e.script.New(c, p, opts...)
	}
	return algorithms.New(e.info.Name, c, p, opts...)
}

// cleanup deletes the clients' keys, one UNLINK per key so that a Cluster
// routes each to its slot.
func cleanup(client redis.UniversalClient, lim algorithms.Limiter, keys ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pipe := client.Pipeline()
	for _, key := range keys {
		for _, k := range algorithms.KeysOf(lim, key) {
			pipe.Unlink(ctx, k)
		}
	}
	_, _ = pipe.Exec(ctx)
}
