package bench

import (
	"context"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// prober is what the audit asks of the load engine: requests beyond the
// measured run, to the consumers it names. The audit chooses whom to ask
// and judges what came back; the engine sends.
type prober interface {
	// denials asks up to n of the run's own consumers, back to back, until
	// one is denied with a Retry-After, and returns those denials (at most
	// one per consumer).
	denials(ctx context.Context, n int, limit int64) []sample
	// retry asks each denied consumer again around its Retry-After, all at
	// once, and returns what it found, one per denial, in their order.
	retry(ctx context.Context, denials []sample) []retried
	// waitFor is how long after a denial came back its consumer must be
	// admitted; waitName names what says so (Retry-After, or a rate limit
	// service's duration_until_reset).
	waitFor(s sample) time.Duration
	waitName() string
}

// retried is what asking a denied consumer again found.
type retried struct {
	// asked is false when ctx ended first: nothing was found.
	asked bool
	// early is set when it was admitted, and its reply back, before its
	// Retry-After could have freed a slot; unsure when it was admitted
	// just before, but its reply came back too late to tell early from on
	// time.
	early, unsure bool
	// admitted is set when it was admitted after its Retry-After (asked
	// again for at most 10 seconds); first when at the first try after it,
	// and late is how long after the advertised time that was.
	admitted, first bool
	late            time.Duration
}

// probeRetryAfter judges the endpoint's Retry-After: it has pr ask a few
// consumers whose last response was a 429 again around their advertised
// Retry-After (or, when no denial in the run can be trusted, first drive a
// few to a denial), and judges what came back.
func probeRetryAfter(ctx context.Context, pr prober, samples []sample, a *audit.LimitAudit) {
	picks := trustedDenials(samples)
	if len(picks) == 0 {
		// No denial in the run can be trusted (the limiter refills as it
		// goes): ask a few consumers until they are denied.
		picks = pr.denials(ctx, 3, a.Limit)
	}
	if len(picks) == 0 {
		if ctx.Err() == nil {
			a.RetryAfter.Skipped = "no consumer was denied with a " + pr.waitName() + ", in the run or when asked again after it"
		}
		return
	}
	picks = picks[:min(len(picks), 3)]
	const maxWait = 70 * time.Second
	for _, s := range picks {
		if pr.waitFor(s) > maxWait {
			a.RetryAfter.Skipped = pr.waitName() + " above 70 s: too long to wait for"
			return
		}
	}
	honest, unsure := true, 0
	for _, r := range pr.retry(ctx, picks) {
		if r.unsure {
			unsure++
		}
		if !r.asked || r.unsure {
			continue
		}
		a.RetryAfter.Probes++
		switch {
		case r.early:
			honest = false
			a.RetryAfter.Early++
		case !r.admitted:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, (10 * time.Second).Milliseconds())
		case r.first:
			// Admitted at the first try after the advertised time: on time,
			// however late a busy client got round to asking.
		default:
			honest = false
			a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, int64(math.Ceil(float64(r.late)/float64(time.Millisecond))))
		}
	}
	switch {
	case ctx.Err() != nil:
		a.RetryAfter.Skipped = "the probes were interrupted"
	case a.RetryAfter.Probes > 0:
		a.RetryAfter.Honest = &honest
	case unsure > 0:
		a.RetryAfter.Skipped = "every probe was admitted just before its " + pr.waitName() + ", with a reply too slow to tell early from on time"
	}
}

// trustedDenials are, per consumer, its last 429 with a Retry-After that
// was sent after every one of its successes had come back: a denial tells
// the truth about the consumer's state only if nothing was admitted after
// it. They come in the consumers' order.
func trustedDenials(samples []sample) []sample {
	lastOK := map[int32]time.Duration{}
	for _, s := range samples {
		if s.ok() {
			lastOK[s.consumer] = max(lastOK[s.consumer], s.done)
		}
	}
	last := map[int32]sample{}
	for _, s := range samples {
		if s.status != http.StatusTooManyRequests || s.retryAfter <= 0 || s.sent <= lastOK[s.consumer] {
			continue
		}
		if prev, ok := last[s.consumer]; !ok || s.done > prev.done {
			last[s.consumer] = s
		}
	}
	var picks []sample
	for _, s := range last {
		picks = append(picks, s)
	}
	sort.Slice(picks, func(i, j int) bool { return picks[i].consumer < picks[j].consumer })
	return picks
}
