package bench

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
)

// load is what every transport's run shares: its schedule (open or
// closed), its bounds, its consumers and its shards. HTTPConfig and
// RLSConfig each have these fields, under these names, and hand them to
// the engine through load.
type load struct {
	Rate            float64
	Connections     int
	Duration        time.Duration
	Requests        int64
	Warmup          time.Duration
	Consumers       int
	Timeout         time.Duration
	Interval        time.Duration
	Shard, Shards   int
	SharedConsumers bool
	StartAt         time.Time
	KeepResponses   bool
	Progress        func(Progress)
}

// validate checks the load; errors name the fields, which both configs
// share.
func (l load) validate() error {
	switch {
	case l.Rate < 0 || l.Rate > MaxRate:
		return field.Errorf("Rate", "must be between 0 (closed model) and %d per second (got %g)", MaxRate, l.Rate)
	case l.Connections < 0 || l.Connections > MaxConnections:
		return field.Errorf("Connections", "must be between 1 and %d (got %d)", MaxConnections, l.Connections)
	case l.Duration < 0 || l.Duration > MaxDuration:
		return field.Errorf("Duration", "must be between 0 and %s (got %s)", MaxDuration, l.Duration)
	case l.Requests < 0:
		return field.Errorf("Requests", "must not be negative (got %d)", l.Requests)
	case l.Duration == 0 && l.Requests == 0:
		return field.Errorf("Duration", "or {Requests} must bound the run")
	case l.Warmup < 0 || l.Warmup > time.Hour:
		return field.Errorf("Warmup", "must be between 0 and 1h (got %s)", l.Warmup)
	case l.Consumers < 0 || l.Consumers > MaxConsumers:
		return field.Errorf("Consumers", "must be between 0 and %d (got %d)", MaxConsumers, l.Consumers)
	case l.Timeout != 0 && (l.Timeout < time.Millisecond || l.Timeout > time.Hour): // 0: the default
		return field.Errorf("Timeout", "must be between 1ms and 1h (got %s)", l.Timeout)
	case l.Interval < 0 || (l.Interval > 0 && l.Interval < 10*time.Millisecond):
		return field.Errorf("Interval", "must be at least 10ms (got %s)", l.Interval)
	case l.Shards < 0 || l.Shards > 10_000 || l.Shard < 0 || l.Shard >= max(l.Shards, 1): // Shards 0: one, the whole run
		return field.Errorf("Shard", "must be I/N with 0 ≤ I < N ≤ 10000 (got %d/%d)", l.Shard, l.Shards)
	case l.Shards > 1 && l.Connections > 0 && l.Connections < l.Shards:
		return field.Errorf("Connections", "are a total over the shards: at least one each, %d (got %d)", l.Shards, l.Connections)
	case l.Shards > 1 && l.Consumers > 0 && l.Consumers < l.Shards && !l.SharedConsumers:
		return field.Errorf("Consumers", "must be at least the shards, %d, each sending its own (got %d): or share them with {SharedConsumers}",
			l.Shards, l.Consumers)
	case l.SharedConsumers && l.Shards <= 1:
		return field.Errorf("SharedConsumers", "needs {Shard}")
	case !l.StartAt.IsZero() && (time.Until(l.StartAt) < -time.Second || time.Until(l.StartAt) > 24*time.Hour):
		return field.Errorf("StartAt", "must be within the next 24 hours (got %s)", l.StartAt.Format(time.RFC3339))
	case l.Rate > 0 && l.Duration > 0 && l.Rate*(l.Duration+l.Warmup).Seconds() > 1e12:
		return field.Errorf("Rate", "× {Duration} is over 10^12 requests")
	}
	return nil
}

// withDefaults is the load with its defaults, made this shard's share of
// the connections and of the closed model's requests.
func (l load) withDefaults() load {
	if l.Connections == 0 {
		l.Connections = 10
	}
	if l.Timeout == 0 {
		l.Timeout = 10 * time.Second
	}
	if l.Interval == 0 {
		l.Interval = time.Second
	}
	if l.Shards == 0 {
		l.Shards = 1
	}
	l.Connections = share(l.Connections, l.Shard, l.Shards)
	if l.Rate == 0 {
		l.Requests = int64(share(int(l.Requests), l.Shard, l.Shards))
	}
	return l
}

// newSchedule is the plan of a load (with its defaults), without a
// transport: the caller sets wire, and what its transport reads.
func newSchedule(l load, t *tally, auditing bool) *plan {
	p := &plan{
		warmup:          l.Warmup,
		timeout:         l.Timeout,
		shard:           int64(l.Shard),
		shards:          int64(l.Shards),
		sharedConsumers: l.SharedConsumers,
		slack:           min(l.Timeout/100, 10*time.Millisecond),
		conns:           l.Connections,
		open:            l.Rate > 0,
		requests:        l.Requests,
		consumers:       l.Consumers,
		audit:           auditing,
		keepResponses:   l.KeepResponses,
		tally:           t,
	}
	if l.Duration > 0 {
		p.end = l.Warmup + l.Duration
	}
	if p.open {
		p.every = float64(time.Second) / l.Rate
		p.firstMeasured = int64(math.Ceil(float64(l.Warmup) / p.every))
	}
	p.sampleCap = max(audit.MaxSamples/l.Connections, 1)
	return p
}

// route is the route of this shard's j-th request, of consumer: 0 unless
// a mix of routes (bench http) or of kinds of call (bench rls's sets) is
// sent.
func (p *plan) route(j int64, consumer int) int {
	if p.req == nil {
		return scheduled(p.sets, j, consumer, p.ownConsumers())
	}
	return p.req.route(j, consumer, p.ownConsumers())
}

// drove is what the connections of a run measured, beside the tally.
type drove struct {
	// elapsed is the measured run's length.
	elapsed time.Duration
	// rec holds every connection's samples, for the audit.
	rec audit.Record
	// source is the address the first connection was opened from.
	source    string
	bytes     int64
	unsent    int64
	first     [numKinds]string
	responses []Response
	// horizon is when the first connection stopped keeping samples; -1
	// when none did. warmUntil is when the last warm-up response ended.
	horizon, warmUntil time.Duration
}

// drive runs the load of plan p (l with its defaults) on its connections,
// from l.StartAt or now, and gathers what they measured. It returns when
// every connection is done (ctx's end stops them early), with the live
// line still running, for the probes: the caller calls stop when they are
// over.
func drive(ctx context.Context, p *plan, l load) (d drove, stop func(), err error) {
	conns := make([]*conn, l.Connections)
	for i := range conns {
		conns[i] = newConn(p, i)
	}
	if !l.StartAt.IsZero() {
		if err := wait(ctx, l.StartAt); err != nil {
			return drove{}, func() {}, err
		}
	}
	p.start = time.Now()
	stop = func() {}
	if l.Progress != nil {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { progress(l.Progress, p, done) })
		stop = func() {
			close(done)
			wg.Wait()
		}
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
		running.Go(func() { c.run(ctx) })
	}
	running.Wait()
	d = drove{elapsed: time.Since(p.start) - l.Warmup, horizon: -1}
	if p.end > 0 {
		// No request is sent after the end; those in flight then count, but
		// the run's length is the one asked for (or less, when cancelled).
		d.elapsed = min(d.elapsed, l.Duration)
	}
	d.elapsed = max(d.elapsed, 0)
	for _, c := range conns {
		d.warmUntil = max(d.warmUntil, c.warmUntil)
		d.bytes += c.bytes
		d.unsent += c.unsent
		for k, msg := range c.first {
			if msg != "" && d.first[k] == "" {
				d.first[k] = msg
			}
		}
		d.rec.Append(c.rec)
		if d.source == "" {
			d.source = c.w.source()
		}
		d.responses = append(d.responses, c.responses...)
		if c.cappedAt >= 0 && (d.horizon < 0 || c.cappedAt < d.horizon) {
			d.horizon = c.cappedAt
		}
	}
	return d, stop, nil
}

// fill puts what the connections measured into res: bytes, unsent
// requests, each error kind's first message, the responses kept.
func (d drove) fill(res *Result) {
	res.Bytes += d.bytes
	res.Unsent += d.unsent
	for k, msg := range d.first {
		if msg == "" {
			continue
		}
		if e := res.ErrorKinds[kindNames[k]]; e.First == "" {
			e.First = msg
			res.ErrorKinds[kindNames[k]] = e
		}
	}
	res.responses = append(res.responses, d.responses...)
}
