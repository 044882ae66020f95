package bench

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// The engine's side of the audit's probes: requests sent apart from the
// run's measurements, to the consumers the audit names.
var _ audit.Prober = (*plan)(nil)

// Denials asks each of the first n of this shard's own consumers (never
// another shard's: that would spend its quota), back to back, until a
// request is denied with a Retry-After: at most twice the limit plus two
// requests (at most 1,000) and 10 seconds each. It returns the Denials.
func (p *plan) Denials(ctx context.Context, n int, limit int64) []audit.Sample {
	var picks []audit.Sample
	for j := range min(n, p.ownConsumers()) {
		consumer := p.consumer(int64(j))
		c := newConn(p, 0)
		deadline := time.Now().Add(10 * time.Second)
		for range min(2*limit+2, 1000) {
			s, err := c.ask(ctx, consumer, 0)
			if err != nil || time.Now().After(deadline) {
				break
			}
			if s.Status == http.StatusTooManyRequests && s.RetryAfter > 0 {
				picks = append(picks, s)
				break
			}
		}
		c.hangUp()
	}
	return picks
}

// Retry asks each denied consumer again, all at once: just before its
// advertised Retry-After (less the second it was rounded up by, and timed
// from when the request was sent: the decision may have been made as early
// as that) and just after it (timed from when the response came back), and
// then every 100 ms until admitted (for at most 10 seconds past it); with
// early only, the probe before it. The live line shows the probes until
// they are over.
func (p *plan) Retry(ctx context.Context, denials []audit.Sample, early bool) []audit.Retried {
	runStart := p.start.Add(p.warmup)
	var until time.Time
	for _, s := range denials {
		until = later(until, runStart.Add(s.Done+p.Wait(s)+10*time.Second))
	}
	p.probes.Store(until.UnixNano())
	defer p.probes.Store(0)
	found := make([]audit.Retried, len(denials))
	var wg sync.WaitGroup
	for i, s := range denials {
		wg.Go(func() { found[i] = p.retryOne(ctx, runStart, s, early) })
	}
	wg.Wait()
	return found
}

// retryOne asks the consumer of the denial s again, as Retry says.
func (p *plan) retryOne(ctx context.Context, runStart time.Time, s audit.Sample, early bool) audit.Retried {
	consumer := int(s.Consumer)
	if p.consumers == 0 {
		consumer = -1 // the one anonymous client
	}
	// The decision was made after s was sent, and the slot cannot free
	// before its Retry-After, rounded up to a whole second, less that
	// second: probe just before then, when it is still ahead.
	if before := runStart.Add(s.Sent + s.RetryAfter - time.Second - 100*time.Millisecond); early && time.Until(before) > 0 {
		if wait(ctx, before) != nil {
			return audit.Retried{}
		}
		if status, _ := p.single(ctx, consumer, int(s.Route)); status >= 200 && status < 300 {
			// An honest slot frees after the denial's send plus its
			// Retry-After less the second: only a reply back by then proves
			// the admission early. A later one (a slow reply on a loaded
			// machine) may have been decided once the slot was free; it
			// tells neither way, and spent the slot.
			if time.Now().After(runStart.Add(s.Sent + s.RetryAfter - time.Second)) {
				return audit.Retried{Asked: true, Unsure: true}
			}
			return audit.Retried{Asked: true, Early: true}
		}
	}
	// After the advertised time, counted from when the denial came back,
	// the consumer must be admitted at the first try. When it is not, keep
	// asking every 100 ms to learn how late the truth was.
	advertised := runStart.Add(s.Done + p.Wait(s))
	if wait(ctx, advertised.Add(50*time.Millisecond)) != nil {
		return audit.Retried{}
	}
	// A try that got no answer (refused, reset, timed out) says nothing of
	// the limit: only answers count, and with none the probe found nothing.
	first, answered := true, false
	for t := time.Now(); t.Before(advertised.Add(10 * time.Second)); t = time.Now() {
		status, err := p.single(ctx, consumer, int(s.Route))
		if err == nil && status >= 200 && status < 300 {
			return audit.Retried{Asked: true, Admitted: true, First: first, Late: t.Sub(advertised)}
		}
		if ctx.Err() != nil {
			return audit.Retried{}
		}
		if err == nil {
			first, answered = false, true
		}
		if wait(ctx, t.Add(100*time.Millisecond)) != nil {
			return audit.Retried{}
		}
	}
	return audit.Retried{Asked: answered}
}

// Wait is how long after a denial came back its consumer must be
// admitted: its Retry-After, or for a rate limit service, when every limit
// its call met is whole again (the longest duration_until_reset).
func (p *plan) Wait(s audit.Sample) time.Duration {
	if p.wholeAfter {
		return max(s.RetryAfter, s.Reset)
	}
	return s.RetryAfter
}

// WaitName names what Wait reads: Retry-After, or a rate limit
// service's duration_until_reset.
func (p *plan) WaitName() string {
	if p.wholeAfter {
		return rlsWords.Wait
	}
	return httpWords.Wait
}

// single sends one request for consumer to route on a connection of its
// own, apart from the run's measurements, and returns the response's
// status.
func (p *plan) single(ctx context.Context, consumer, route int) (int, error) {
	c := newConn(p, 0)
	defer c.hangUp()
	s, err := c.ask(ctx, consumer, route)
	return int(s.Status), err
}

// ask sends one request for consumer to route on c, apart from the run's
// measurements, and returns the response as a sample timed from when the
// measured run began.
func (c *conn) ask(ctx context.Context, consumer, route int) (audit.Sample, error) {
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	runStart := c.p.start.Add(c.p.warmup)
	sent := time.Now()
	if _, _, err := c.w.exchange(ctx, sent, consumer, route); err != nil {
		c.hangUp()
		return audit.Sample{}, err
	}
	var rec audit.Record
	s := audit.NewSample(max(consumer, 0), sent.Sub(runStart), time.Since(runStart), 0)
	s.Route = uint16(route)
	c.w.record(&rec, s)
	return rec.Samples[0], nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// wait waits until until, and returns ctx's error when it ended first.
func wait(ctx context.Context, until time.Time) error {
	d := time.Until(until)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
