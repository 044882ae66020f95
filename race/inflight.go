package race

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/hdr"
)

// inFlight is one in-flight limiter's race: what its trials share.
type inFlight struct {
	cfg    Config
	info   algorithms.SemaphoreInfo
	policy algorithms.SemaphorePolicy
	// control reads and deletes the trials' keys; no goroutine uses it.
	control redis.UniversalClient
	// count reads a key's count as the limiter counts it.
	count func(ctx context.Context, key string) (int64, error)
}

func newInFlight(ctx context.Context, control redis.UniversalClient, cfg Config, name string) (*inFlight, error) {
	info, _ := algorithms.LookupSemaphore(name)
	p := algorithms.SemaphorePolicy{Limit: cfg.Policy.Limit, LeaseTTL: cmp.Or(cfg.LeaseTTL, time.Second)}
	sem, err := algorithms.NewSemaphore(name, control, p)
	if err != nil {
		return nil, err
	}
	if l, ok := sem.(algorithms.Loader); ok {
		if err := l.Load(ctx); err != nil {
			return nil, err
		}
	}
	f := &inFlight{cfg: cfg, info: info, policy: p, control: control}
	if h, ok := sem.(interface {
		Held(context.Context, string) (int64, error)
	}); ok {
		f.count = h.Held
	} else {
		f.count = func(ctx context.Context, key string) (int64, error) {
			n, err := control.Get(ctx, key).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return 0, fmt.Errorf("get %s: %w", key, err)
			}
			return n, nil
		}
	}
	return f, nil
}

// openHolders opens n holders, each with a client of one connection,
// opened and checked.
func (f *inFlight) openHolders(ctx context.Context, n int) ([]*holder, error) {
	hs := make([]*holder, n)
	for i := range hs {
		hs[i] = &holder{}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for _, h := range hs {
		g.Go(func() error { return f.reopen(gctx, h) })
	}
	if err := g.Wait(); err != nil {
		closeHolders(hs)
		return nil, err
	}
	return hs, nil
}

// reopen gives h a new client of one connection, opened and checked, and
// its semaphore on it: a killed holder's next life.
func (f *inFlight) reopen(ctx context.Context, h *holder) error {
	opts := *f.cfg.Redis
	opts.PoolSize = 1
	opts.MinIdleConns = 1
	opts.MaxIdleConns = 0
	opts.PipelinePoolSize = -1
	c := redis.NewUniversalClient(&opts)
	if f.cfg.hook != nil {
		addHook(c, f.cfg.hook)
	}
	if err := fillPool(ctx, c, 1); err != nil {
		c.Close()
		return fmt.Errorf("opening a connection: %w", err)
	}
	sem, err := algorithms.NewSemaphore(f.info.Name, c, f.policy)
	if err != nil {
		c.Close()
		return err
	}
	h.client, h.sem = c, sem
	return nil
}

func closeHolders(hs []*holder) {
	for _, h := range hs {
		if h.client != nil {
			h.client.Close()
		}
	}
}

// trial releases the holders together at key, measures what was held, and
// checks the key once every holder is gone: for the lease, again once
// every lease's TTL has passed.
func (f *inFlight) trial(ctx context.Context, key string, hs []*holder) (InFlightTrial, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.TrialTimeout)
	defer cancel()
	faults := newFaultDealer(f.cfg.Faults)
	var ready, done sync.WaitGroup
	ready.Add(len(hs))
	done.Add(len(hs))
	release := make(chan struct{})
	for _, h := range hs {
		h.reqs, h.latencies, h.errs, h.err = h.reqs[:0], h.latencies[:0], 0, nil
		go func() {
			defer done.Done()
			ready.Done()
			<-release
			h.run(ctx, key, f.cfg.RequestsPerWorker, f.cfg.Hold, faults, f.cfg.together)
		}()
	}
	ready.Wait()
	began := time.Now()
	close(release)
	done.Wait()
	ended := time.Now()
	t := InFlightTrial{ElapsedMicros: ended.Sub(began).Microseconds()}
	if err := ctx.Err(); err != nil {
		return t, fmt.Errorf("the trial did not end: %w", err)
	}

	var latencies []int64
	var firstErr error
	for _, h := range hs {
		latencies = append(latencies, h.latencies...)
		t.Errors += h.errs
		if firstErr == nil {
			firstErr = h.err
		}
		for _, r := range h.reqs {
			t.Requests++
			switch {
			case r.admitted:
				t.Admitted++
			case !r.failed:
				t.Denied++
			}
			switch r.fault {
			case faultKill:
				t.Faults.Killed++
			case faultLose:
				t.Faults.LostReleases++
			case faultRetry:
				t.Faults.RetriedReleases++
			}
		}
	}
	t.LatencyMicros = trialLatency(latencies)
	if t.Requests > 0 && t.Errors >= t.Requests {
		return t, fmt.Errorf("every request failed: %w", firstErr)
	}
	f.measure(&t, hs, ended)

	var err error
	if t.HeldAtEnd, err = f.count(ctx, key); err != nil {
		return t, err
	}
	t.Leaked = t.HeldAtEnd
	if f.info.Expires && t.Leaked != 0 {
		waitFrom := time.Now()
		// Every lease was taken before the goroutines were done: by then
		// plus the TTL, each has expired.
		if t.Leaked, err = f.waitOutLeases(ctx, key, ended.Add(f.policy.LeaseTTL+leaseSlack(f.policy.LeaseTTL))); err != nil {
			return t, err
		}
		t.LeaseWaitMicros = time.Since(waitFrom).Microseconds()
	}
	if err := f.control.Del(ctx, key).Err(); err != nil {
		return t, fmt.Errorf("del %s: %w", key, err)
	}
	return t, nil
}

// leaseSlack is what a lease may differ by between Redis's clock and
// ours: Redis's whole milliseconds, and a thousandth of the TTL for the
// two clocks' rates.
func leaseSlack(ttl time.Duration) time.Duration { return ttl/1000 + time.Millisecond }

// waitOutLeases polls the key's live leases until none count, or until
// deadline, by which every lease taken in the trial has expired, and
// returns the count it saw last: 0, or the leases that outlived their TTL.
func (f *inFlight) waitOutLeases(ctx context.Context, key string, deadline time.Time) (int64, error) {
	step := min(max(f.policy.LeaseTTL/20, time.Millisecond), 50*time.Millisecond)
	for {
		// Past the deadline before the count is read, not after: a count
		// read just before it may still hold a lease about to expire.
		past := !time.Now().Before(deadline)
		n, err := f.count(ctx, key)
		if err != nil || n == 0 || past {
			return n, err
		}
		pause(ctx, min(step, time.Until(deadline)+time.Millisecond))
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("waiting for the leases of %s to expire: %w", key, err)
		}
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runInFlight races the in-flight limiters of cfg into rep.
func runInFlight(ctx context.Context, cfg Config, rep Report) (Report, error) {
	// The trials last their holds and the wait for the leases, beyond the
	// bound of their Redis work.
	cfg.TrialTimeout += cfg.Hold*time.Duration(cfg.RequestsPerWorker+1) + cfg.LeaseTTL
	control, err := openPool(ctx, cfg.Redis, 2, nil)
	if err != nil {
		return rep, err
	}
	defer control.Close()
	rep.Results = []Result{}
	rep.Config.Clock, rep.Config.WindowMillis, rep.Config.WatchRetries = "", 0, 0
	rep.Config.InFlight = &InFlightSettings{HoldMillis: cfg.Hold.Milliseconds(), LeaseTTLMillis: cfg.LeaseTTL.Milliseconds(), Faults: cfg.Faults}
	for _, name := range cfg.Limiters {
		res, err := raceInFlight(ctx, control, cfg, name)
		if err != nil {
			return rep, fmt.Errorf("race: %s: %w", name, err)
		}
		rep.InFlight = append(rep.InFlight, res)
	}
	return rep, nil
}

// raceInFlight runs the trials of one in-flight limiter, and its
// explained trial when asked.
func raceInFlight(ctx context.Context, control redis.UniversalClient, cfg Config, name string) (InFlightResult, error) {
	began := time.Now()
	f, err := newInFlight(ctx, control, cfg, name)
	if err != nil {
		return InFlightResult{}, err
	}
	res := InFlightResult{Limiter: name, Description: f.info.Description, Atomic: f.info.Atomic, Expires: f.info.Expires,
		Limit: cfg.Policy.Limit, Histogram: hdr.New()}
	hs, err := f.openHolders(ctx, cfg.Concurrency)
	if err != nil {
		return res, err
	}
	defer func() { closeHolders(hs) }()
	for trial := range cfg.Trials {
		for _, h := range hs {
			if h.client == nil { // killed in the last trial: it comes back
				if err := f.reopen(ctx, h); err != nil {
					return res, err
				}
			}
		}
		key := algorithms.Key(cfg.Consumer+"-"+name+"-"+strconv.Itoa(trial), name)
		t, err := f.trial(ctx, key, hs)
		if err != nil {
			return res, fmt.Errorf("trial %d: %w", trial+1, err)
		}
		res.add(t)
		for _, h := range hs {
			for _, us := range h.latencies {
				hdr.Record(res.Histogram, us)
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(name, trial+1, cfg.Trials)
		}
	}
	res.ElapsedMillis = time.Since(began).Milliseconds()
	res.LatencyMicros = hdr.PercentilesOf(res.Histogram)
	if slices.Contains(cfg.Explain, name) {
		key := algorithms.Key(cfg.Consumer+"-"+name+"-explain", name)
		ex, err := f.explain(ctx, key)
		if err != nil && ctx.Err() != nil {
			return res, fmt.Errorf("explain: %w", err)
		}
		if err != nil {
			// The race stands without its trace: say why there is none.
			ex = Explanation{Skipped: "the trace could not be taken: " + err.Error(), Node: ex.Node, Key: key}
		}
		res.Explain = &ex
	}
	return res, nil
}

// add counts trial t in r.
func (r *InFlightResult) add(t InFlightTrial) {
	r.TrialResults = append(r.TrialResults, t)
	r.Trials++
	r.Requests += t.Requests
	r.Admitted += t.Admitted
	r.Denied += t.Denied
	r.Errors += t.Errors
	r.MostInFlight = max(r.MostInFlight, t.MostInFlight)
	r.MostHeld = max(r.MostHeld, t.MostHeld)
	if t.Over {
		r.OverTrials++
		r.OverHolders += t.OverHolders
	}
	switch {
	case t.Leaked > 0:
		r.Leaked += t.Leaked
		r.LeakedTrials++
	case t.Leaked < 0:
		r.FreedTwice -= t.Leaked
		r.FreedTwiceTrials++
	}
	r.HeldAtEnd += t.HeldAtEnd
	r.WrongfulDenials += t.WrongfulDenials
	r.OutlivedLeases += t.OutlivedLeases
	r.Faults.add(t.Faults)
}

// explain runs one more trial at key, each goroutine on a traced
// connection of its own, with MONITOR open, and explains it.
func (f *inFlight) explain(ctx context.Context, key string) (Explanation, error) {
	var hs []*holder
	var t InFlightTrial
	ran := false
	ex, tr, err := traceTrial(ctx, f.control, f.cfg, key,
		func(ctx context.Context, clients []*redis.Client, logs []*clientLog) error {
			for i, c := range clients {
				sem, err := algorithms.NewSemaphore(f.info.Name, c, f.policy)
				if err != nil {
					return err
				}
				hs = append(hs, &holder{client: c, sem: sem, log: logs[i]})
			}
			return nil
		},
		func(ctx context.Context) (err error) {
			t, err = f.trial(ctx, key, hs)
			ran = true
			return err
		})
	if ran {
		ex.InFlightTrial = &t
	}
	if err != nil || ex.Skipped != "" {
		return ex, err
	}
	holds := make([][]holdTimes, len(hs))
	for i, h := range hs {
		for _, r := range h.reqs {
			holds[i] = append(holds[i], holdTimes{admitted: r.admitted, replied: r.replied, end: r.end})
		}
	}
	ttl := time.Duration(0)
	if f.info.Expires {
		ttl = f.policy.LeaseTTL
	}
	return analyseHeld(ex, tr, []string{key}, f.policy.Limit, cmp.Or(f.cfg.ExplainLines, DefaultExplainLines), holds, ttl), nil
}
