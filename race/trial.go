package race

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/roundtrip"
)

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

	if ls, ok := lim.(algorithms.LimitSet); ok {
		if err := judgeLimits(ctx, client, ls.Checks(key), &t, requests, from, to, span, first); err != nil {
			return t, err
		}
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
