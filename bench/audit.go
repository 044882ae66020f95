package bench

import (
	"context"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one response of a consumer, kept for the audit.
type sample struct {
	consumer   int
	sent, done time.Duration // since the measured run began
	status     int
	retryAfter time.Duration // -1 when absent
	limit      int64         // advertised limit; -1 when absent
	remaining  int64         // advertised remaining; -1 when absent
	reset      time.Duration // advertised time until the quota resets; -1 when absent
}

// maxSamples bounds what the audit keeps.
const maxSamples = 5_000_000

// Audit is what the audit found. It runs when ExpectLimit is set.
type Audit struct {
	Limit        int64 `json:"limit"`
	WindowMillis int64 `json:"window_ms"`
	// WorstConsumer admitted the most requests inside one window's span;
	// WorstWindowAdmitted is how many. Only responses whose whole flight
	// (sent to received) lies inside the span count, so a latency can never
	// make an honest limiter look leaky; and the span is a millisecond short
	// of the window, for limiters that keep time in whole milliseconds.
	WorstConsumer       string `json:"worst_consumer"`
	WorstWindowAdmitted int64  `json:"worst_window_admitted"`
	OverAdmitted        int64  `json:"over_admitted"`
	RetryAfter          struct {
		// Probes is how many denied consumers were asked again around their
		// advertised Retry-After.
		Probes int `json:"probes"`
		// MaxErrorMillis is how long after the advertised time the worst
		// probe was admitted, when it was denied at its first try after it
		// (0 when every probe was admitted at its first try).
		MaxErrorMillis int64 `json:"max_error_ms"`
		// Honest is false when a consumer was still denied after its
		// Retry-After, or admitted a whole second before it.
		Honest bool `json:"honest"`
		// Skipped says why probes could not be made, if so.
		Skipped string `json:"skipped,omitempty"`
	} `json:"retry_after"`
	Headers struct {
		// Checked is the number of responses whose rate-limit headers were read.
		Checked int64 `json:"checked"`
		// Violations counts advertised limits other than the expected one,
		// remaining counts above the limit, remaining counts that fall by
		// more than the admissions in between, and successes right after a
		// response that said 0 remaining (see remainingChecks).
		Violations int64 `json:"violations"`
		// Example describes the first violation.
		Example string `json:"example,omitempty"`
	} `json:"headers"`
}

// readSample pulls the rate-limit headers out of a response.
func readSample(consumer int, sent, done time.Duration, status int, h http.Header) sample {
	s := sample{consumer: consumer, sent: sent, done: done, status: status, retryAfter: -1, limit: -1, remaining: -1, reset: -1}
	if v := h.Get("Retry-After"); v != "" {
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			s.retryAfter = time.Duration(n * float64(time.Second))
		}
	}
	if q, ok := sfParam(h.Get("RateLimit-Policy"), "q"); ok {
		s.limit = q
	} else if n, err := strconv.ParseInt(firstOf(h, "RateLimit-Limit", "X-RateLimit-Limit"), 10, 64); err == nil {
		s.limit = n
	}
	if r, ok := sfParam(h.Get("RateLimit"), "r"); ok {
		s.remaining = r
	} else if n, err := strconv.ParseInt(firstOf(h, "RateLimit-Remaining", "X-RateLimit-Remaining"), 10, 64); err == nil {
		s.remaining = n
	}
	if t, ok := sfParam(h.Get("RateLimit"), "t"); ok {
		s.reset = time.Duration(t) * time.Second
	} else if n, err := strconv.ParseInt(firstOf(h, "RateLimit-Reset", "X-RateLimit-Reset"), 10, 64); err == nil {
		if n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
			n -= time.Now().Unix()
		}
		s.reset = time.Duration(max(n, 0)) * time.Second
	}
	return s
}

func firstOf(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// sfParam reads an integer parameter of the first item of a structured
// field such as `"default";q=100;w=60`.
func sfParam(field, name string) (int64, bool) {
	item, _, _ := strings.Cut(field, ",")
	for _, p := range strings.Split(item, ";")[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && k == name {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// audit judges the samples against limit per window.
func audit(samples []sample, limit int64, window time.Duration, consumers int) Audit {
	a := Audit{Limit: limit, WindowMillis: window.Milliseconds()}
	a.RetryAfter.Honest = true
	per := make([][]sample, consumers)
	for _, s := range samples {
		per[s.consumer] = append(per[s.consumer], s)
		if s.limit >= 0 || s.remaining >= 0 {
			a.Headers.Checked++
			bad := ""
			switch {
			case s.limit >= 0 && s.limit != limit:
				bad = "advertised a limit of " + strconv.FormatInt(s.limit, 10)
			case s.remaining > limit:
				bad = "advertised " + strconv.FormatInt(s.remaining, 10) + " remaining"
			}
			if bad != "" {
				a.Headers.Violations++
				if a.Headers.Example == "" {
					a.Headers.Example = "consumer-" + strconv.Itoa(s.consumer) + " " + bad + " (expected limit " + strconv.FormatInt(limit, 10) + ")"
				}
			}
		}
	}
	for c, ss := range per {
		var ok []sample
		for _, s := range ss {
			if s.status >= 200 && s.status < 300 {
				ok = append(ok, s)
			}
		}
		sort.Slice(ok, func(i, j int) bool { return ok[i].sent < ok[j].sent })
		for i := range ok {
			var n int64
			end := ok[i].sent + window - time.Millisecond
			for j := i; j < len(ok) && ok[j].sent < end; j++ {
				if ok[j].done < end {
					n++
				}
			}
			if n > a.WorstWindowAdmitted {
				a.WorstWindowAdmitted, a.WorstConsumer = n, "consumer-"+strconv.Itoa(c)
			}
		}
	}
	a.OverAdmitted = max(a.WorstWindowAdmitted-limit, 0)
	for _, ss := range per {
		remainingChecks(ss, window, &a)
	}
	return a
}

// remainingChecks judges a consumer's advertised remaining counts with rules
// that hold for any honest limiter, whatever its algorithm:
//
//   - remaining falls by at most one per request admitted in between: for
//     two successes a and b, b sent after a came back, remaining(a) -
//     remaining(b) is at most 1 plus the consumer's other successes whose
//     flights overlap a's and b's;
//   - remaining 0 is followed by a 429: a success b sent after a success a
//     that said 0 remaining breaks it when b came back before any slot could
//     have freed, both for a sliding window (a window after the earliest
//     success that could still be in it) and for a's own advertised reset
//     (less the second it may have been rounded up by).
func remainingChecks(ss []sample, window time.Duration, a *Audit) {
	var ok []sample
	for _, s := range ss {
		if s.status >= 200 && s.status < 300 && s.remaining >= 0 {
			ok = append(ok, s)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].sent < ok[j].sent })
	violate := func(s sample, what string) {
		a.Headers.Violations++
		if a.Headers.Example == "" {
			a.Headers.Example = "consumer-" + strconv.Itoa(s.consumer) + " " + what
		}
	}
	for i := 0; i+1 < len(ok); i++ {
		x := ok[i]
		// y: the first success sent after x came back.
		j := i + 1
		for j < len(ok) && ok[j].sent < x.done {
			j++
		}
		if j == len(ok) {
			continue
		}
		y := ok[j]
		var between int64
		for k, s := range ok {
			if k != i && k != j && s.done > x.sent && s.sent < y.done {
				between++
			}
		}
		if x.remaining-y.remaining > 1+between {
			violate(y, "remaining fell from "+strconv.FormatInt(x.remaining, 10)+" to "+strconv.FormatInt(y.remaining, 10)+
				" with "+strconv.FormatInt(between, 10)+" admissions in between")
		}
		if x.remaining == 0 && x.reset >= 0 {
			earliest := time.Duration(math.MaxInt64)
			for _, s := range ok {
				if s.done > x.sent-window && s.sent <= x.done {
					earliest = min(earliest, s.sent+window-time.Millisecond) // a millisecond for whole-ms clocks
				}
			}
			resetAt := x.sent + x.reset - time.Second
			if y.done < earliest && y.done < resetAt {
				violate(y, "was admitted right after a response that said 0 remaining")
			}
		}
	}
}

// probeRetryAfter asks a few consumers whose last response was a 429 again
// just before their advertised Retry-After (less the second it was rounded
// up by) and just after it, and then every 100 ms until admitted (for at
// most 10 seconds past it).
func probeRetryAfter(ctx context.Context, client *http.Client, cfg HTTPConfig, samples []sample, runStart time.Time, a *Audit) {
	// A denial tells the truth about the consumer's state only if nothing
	// was admitted after it: take, per consumer, the last 429 sent after
	// every one of its successes had come back.
	lastOK := map[int]time.Duration{}
	for _, s := range samples {
		if s.status >= 200 && s.status < 300 {
			lastOK[s.consumer] = max(lastOK[s.consumer], s.done)
		}
	}
	last := map[int]sample{}
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
	if len(picks) == 0 {
		a.RetryAfter.Skipped = "no consumer was denied, with a Retry-After, after its last success"
		return
	}
	picks = picks[:min(len(picks), 3)]
	if picks[0].retryAfter > 70*time.Second {
		a.RetryAfter.Skipped = "Retry-After above 70 s: too long to wait for"
		return
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range picks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			advertised := runStart.Add(s.done + s.retryAfter)
			// The advertised time was rounded up to a whole second: the slot
			// cannot free before a second earlier. Probe just before that,
			// when it is still ahead.
			early := false
			if before := advertised.Add(-time.Second - 100*time.Millisecond); time.Until(before) > 0 {
				if wait(ctx, before) != nil {
					return
				}
				status, _, _, _ := do(ctx, client, cfg, s.consumer)
				early = status >= 200 && status < 300
			}
			// After the advertised time the consumer must be admitted at the
			// first try. When it is not, keep asking every 100 ms to learn
			// how late the truth was.
			var admitted time.Time
			first := true
			if !early {
				if wait(ctx, advertised.Add(50*time.Millisecond)) != nil {
					return
				}
				for t := time.Now(); t.Before(advertised.Add(10 * time.Second)); t = time.Now() {
					status, _, _, err := do(ctx, client, cfg, s.consumer)
					if err == nil && status >= 200 && status < 300 {
						admitted = t
						break
					}
					first = false
					if wait(ctx, t.Add(100*time.Millisecond)) != nil {
						return
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			a.RetryAfter.Probes++
			switch {
			case early:
				a.RetryAfter.Honest = false
			case admitted.IsZero():
				a.RetryAfter.Honest = false
				a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, (10 * time.Second).Milliseconds())
			case first:
				// Admitted at the first try after the advertised time: on time,
				// however late a busy client got round to asking.
			default:
				a.RetryAfter.Honest = false
				late := admitted.Sub(advertised)
				a.RetryAfter.MaxErrorMillis = max(a.RetryAfter.MaxErrorMillis, int64(math.Ceil(float64(late)/float64(time.Millisecond))))
			}
		}()
	}
	wg.Wait()
}

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
