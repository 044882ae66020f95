package audit

import (
	"context"
	"math"
	"net/http"
	"sort"
	"time"
)

// Prober is what the audit asks of the load engine: requests beyond the
// measured run, to the consumers it names. The audit chooses whom to ask
// and judges what came back; the engine sends. bench's plan is one.
type Prober interface {
	// Denials asks each of up to n of the run's own consumers, back to
	// back, until it is denied with a Retry-After, and returns those
	// denials (at most one per consumer).
	Denials(ctx context.Context, n int, limit int64) []Sample
	// Retry asks each denied consumer again around its Retry-After, all at
	// once, and returns what it found, one per denial, in their order: just
	// after it, and, with early, just before it too, where an admission
	// proves it too long.
	Retry(ctx context.Context, denials []Sample, early bool) []Retried
	// Wait is how long after a denial came back its consumer must be
	// admitted; WaitName names what says so (Retry-After, or a rate limit
	// service's duration_until_reset).
	Wait(s Sample) time.Duration
	WaitName() string
}

// Retried is what asking a denied consumer again found.
type Retried struct {
	// Asked is false when ctx ended first: nothing was found.
	Asked bool
	// Early is set when it was admitted, and its reply back, before its
	// Retry-After could have freed a slot; Unsure when it was admitted
	// just before, but its reply came back too late to tell early from on
	// time.
	Early, Unsure bool
	// Admitted is set when it was admitted after its Retry-After (asked
	// again for at most 10 seconds); First when at the first try after it,
	// and Late is how long after the advertised time that was.
	Admitted, First bool
	Late            time.Duration
}

// probeRetryAfter judges the endpoint's Retry-After: it has pr ask a few
// consumers whose last response was a 429 again around their advertised
// Retry-After (or, when no denial in the run can be trusted, first drive a
// few to a denial), and judges what came back. early is Prober.Retry's.
func probeRetryAfter(ctx context.Context, pr Prober, samples []Sample, a *LimitAudit, early bool) {
	picks := trustedDenials(samples)
	if len(picks) == 0 {
		// No denial in the run can be trusted (the limiter refills as it
		// goes): ask a few consumers until they are denied.
		picks = pr.Denials(ctx, 3, a.Limit)
	}
	if len(picks) == 0 {
		if ctx.Err() == nil {
			a.RetryAfter.Skipped = "no consumer was denied with a " + pr.WaitName() + ", in the run or when asked again after it"
		}
		return
	}
	picks = picks[:min(len(picks), 3)]
	const maxWait = 70 * time.Second
	for _, s := range picks {
		if pr.Wait(s) > maxWait {
			a.RetryAfter.Skipped = pr.WaitName() + " above 70 s: too long to wait for"
			return
		}
	}
	honest, unsure := true, 0
	for _, r := range pr.Retry(ctx, picks, early) {
		if r.Unsure {
			unsure++
		}
		if !r.Asked || r.Unsure {
			continue
		}
		a.RetryAfter.Probes++
		switch {
		case r.Early:
			honest = false
			a.RetryAfter.Early++
		case !r.Admitted:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, (10 * time.Second).Milliseconds())
		case r.First:
			// Admitted at the first try after the advertised time: on time,
			// however late a busy client got round to asking.
		default:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, int64(math.Ceil(float64(r.Late)/float64(time.Millisecond))))
		}
	}
	switch {
	case ctx.Err() != nil:
		a.RetryAfter.Skipped = "the probes were interrupted"
	case a.RetryAfter.Probes > 0:
		a.RetryAfter.Honest = &honest
	case unsure > 0:
		a.RetryAfter.Skipped = "every probe was admitted just before its " + pr.WaitName() + ", with a reply too slow to tell early from on time"
	}
}

// trustedDenials are, per consumer, its last 429 with a Retry-After that
// was sent after every one of its successes had come back: a denial tells
// the truth about the consumer's state only if nothing was admitted after
// it. They come in the consumers' order.
func trustedDenials(samples []Sample) []Sample {
	lastOK := map[int32]time.Duration{}
	for _, s := range samples {
		if s.OK() {
			lastOK[s.Consumer] = max(lastOK[s.Consumer], s.Done)
		}
	}
	last := map[int32]Sample{}
	for _, s := range samples {
		if s.Status != http.StatusTooManyRequests || s.RetryAfter <= 0 || s.Sent <= lastOK[s.Consumer] {
			continue
		}
		if prev, ok := last[s.Consumer]; !ok || s.Done > prev.Done {
			last[s.Consumer] = s
		}
	}
	var picks []Sample
	for _, s := range last {
		picks = append(picks, s)
	}
	sort.Slice(picks, func(i, j int) bool { return picks[i].Consumer < picks[j].Consumer })
	return picks
}

// Probe asks pr for one set of Retry-After probes for every limit of a
// judged: a consumer denied must be admitted again once its Retry-After
// has passed, by every limit that could have denied it, and never a
// second or more before it. skip, when set, says why no probe can be made
// (they were turned off, or would spend what other consumers share).
func Probe(ctx context.Context, pr Prober, samples []Sample, a *Audit, cov Coverage, skip string) {
	probeLimits(ctx, pr, samples, a, cov, skip, true)
}

// probeLimits is Probe; early is Prober.Retry's.
func probeLimits(ctx context.Context, pr Prober, samples []Sample, a *Audit, cov Coverage, skip string, early bool) {
	var probed *RetryAfterAudit
	for i := range a.Limits {
		l := &a.Limits[i]
		switch {
		case l.Verdict == NotJudged:
			l.RetryAfter.Skipped = "not judged"
		case cov.partial:
			// Another machine may be asking the same consumer meanwhile.
			l.RetryAfter.Skipped = sharedNote
		case skip != "":
			l.RetryAfter.Skipped = skip
		case ctx.Err() != nil:
			l.RetryAfter.Skipped = "the run was interrupted"
		case probed != nil:
			l.RetryAfter = *probed
		default:
			largest := *l
			for _, o := range a.Limits {
				if o.Verdict != NotJudged && o.Limit > largest.Limit {
					largest.Limit = o.Limit
				}
			}
			probeRetryAfter(ctx, pr, samples, &largest, early)
			l.RetryAfter = largest.RetryAfter
			probed = &l.RetryAfter
		}
	}
}
