// Package edge is ratelab's production limiter: net/http middleware that
// decides every request through one of the algorithms (the sliding-window
// log by default) before it reaches the upstream, and a gateway that serves
// it. Clients over the limit get 429 with an honest Retry-After; every
// response carries the limit state in the IETF draft's RateLimit and
// RateLimit-Policy fields and the older RateLimit-Limit/Remaining/Reset trio.
package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// OnError is what the middleware does when Redis fails.
type OnError string

const (
	// FailOpen lets the request through, counted as a Redis error.
	FailOpen OnError = "open"
	// FailClosed answers 503 with a Retry-After.
	FailClosed OnError = "closed"
	// FailLocal decides with Config.Local, the gateway's share of the limit
	// in memory, so that a fleet of gateways admits at most about the limit
	// between them while Redis fails.
	FailLocal OnError = "local"
)

// Headers selects the rate-limit header fields sent.
type Headers string

const (
	// HeadersDraft sends RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers).
	HeadersDraft Headers = "draft"
	// HeadersLegacy sends RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	HeadersLegacy Headers = "legacy"
	// HeadersBoth sends both.
	HeadersBoth Headers = "both"
)

// Config configures the middleware.
type Config struct {
	// Limiter decides; Algorithm is its registry name, used in keys.
	Limiter   algorithms.Limiter
	Algorithm string
	// Policy is what Limiter enforces, for the headers.
	Policy algorithms.Policy
	// Clock is where Limiter takes the time from (it is built with it), for
	// the start-up log. Redis's clock (ratelab edge's default) lets any
	// number of gateways and nginx nodes on hosts whose clocks disagree share
	// one Redis; with the callers' clocks, a host ahead of the others prunes
	// their requests early and over-admits.
	Clock algorithms.Clock
	// PolicyName names the policy in the draft headers; "default" when empty.
	PolicyName string
	// KeyBy identifies requests.
	KeyBy KeyBy
	// OnError is what to do when Redis fails; FailOpen when empty. Every
	// answer decided without Redis carries no RateLimit fields: clients and
	// load generators can tell them apart.
	OnError OnError
	// Local decides while Redis fails, with FailLocal (see NewLocalLimiter);
	// FailLocal without it fails open.
	Local *LocalLimiter
	// BreakerFailures opens the circuit after this many Redis failures in a
	// row: decisions then skip Redis (at once, in the OnError mode) while it
	// is asked in the background, every 100ms, until it answers. 0: never.
	BreakerFailures int
	// Log receives lines about Redis failing (at most one per kind of
	// failure per 10 s, with a count of the others), the circuit, and
	// Redis answering again; none when nil.
	Log io.Writer
	// Timeout bounds one decision; 200ms when zero.
	Timeout time.Duration
	// Headers selects the header fields; HeadersBoth when empty.
	Headers Headers
	// DenyCache answers a denied consumer from memory until its retry-after
	// has passed. A limiter's retry-after is the earliest a request can be
	// admitted, so the cache never denies what Redis would admit.
	DenyCache bool
	// Shadow decides and sets headers but never blocks; what would have been
	// blocked is counted.
	Shadow bool
	// Rules, when set, decide every request by the limits it meets in them,
	// all in one call of Decider; Limiter, Algorithm, Policy and PolicyName
	// are then unused. A reload of Rules applies from the next request.
	Rules *Rules
	// Decider decides a request's limits at once, with Rules.
	Decider Decider
	// Metrics, when set, counts decisions.
	Metrics *Metrics
	// Now is the clock of the deny cache; time.Now by default.
	Now func() time.Time
}

// Middleware limits next. With BreakerFailures set, an open circuit asks
// Redis from a goroutine of its own until it answers: Close the Handler
// when it serves no more, after http.Server.Shutdown, to stop it.
//
//	h := edge.Middleware(cfg, mux)
//	defer h.Close()
//	srv := &http.Server{Handler: h}
func Middleware(cfg Config, next http.Handler) *Handler {
	if cfg.PolicyName == "" {
		cfg.PolicyName = "default"
	}
	if cfg.OnError == "" {
		cfg.OnError = FailOpen
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	if cfg.Headers == "" {
		cfg.Headers = HeadersBoth
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	l := &Handler{cfg: cfg, next: next}
	probeKey := algorithms.Key("ratelab-probe", cfg.Algorithm)
	probe := func(ctx context.Context) error {
		_, err := cfg.Limiter.Allow(ctx, probeKey)
		return err
	}
	if cfg.Rules != nil {
		cfg.Rules.setMetrics(cfg.Metrics)
		probe = func(ctx context.Context) error {
			_, err := cfg.Decider.Decide(ctx, []algorithms.Check{probeCheck})
			return err
		}
	}
	l.health = newHealth(cfg.Log, cfg.BreakerFailures, cfg.Timeout, cfg.Metrics, probe)
	return l
}

// Handler is the middleware in front of an upstream, built by Middleware:
// it serves HTTP, and owns the goroutine that probes Redis while its
// circuit is open, which Close stops.
type Handler struct {
	cfg    Config
	next   http.Handler
	health *health

	denied denyCache
}

func (l *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l.cfg.Rules != nil {
		l.serveRules(w, r)
		return
	}
	id := l.cfg.KeyBy.Identify(r)
	key := algorithms.Key(id.Key, l.cfg.Algorithm)
	// The scripts keep time in whole milliseconds: so does the cache, so that
	// it never holds a denial longer than Redis would.
	now := l.cfg.Now().Truncate(time.Millisecond)
	if until, ok := l.cachedDenial(key, now); ok && !l.cfg.Shadow {
		l.cfg.Metrics.denyCacheHit()
		l.cfg.Metrics.decision(OutcomeDenyCache)
		l.tooMany(w, until.Sub(now))
		return
	}

	if kind, open := l.health.circuitOpen(); open {
		l.fallback(w, r, kind, l.localFor(key))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.cfg.Timeout)
	start := time.Now()
	d, err := l.cfg.Limiter.Allow(ctx, key)
	cancel()
	l.cfg.Metrics.observe(time.Since(start))

	switch {
	case errors.Is(err, algorithms.ErrRetriesExhausted):
		l.cfg.Metrics.decision(OutcomeContended)
		d.RetryAfter = time.Second
		if !l.cfg.Shadow {
			l.setHeaders(w.Header(), d)
			l.tooMany(w, d.RetryAfter)
			return
		}
	case err != nil && r.Context().Err() != nil:
		return // the client went away: nothing to answer, and not Redis's fault
	case err != nil:
		kind := errorKind(err)
		l.cfg.Metrics.redisError(kind)
		l.health.failedWith(kind, err)
		l.fallback(w, r, kind, l.localFor(key))
		return
	default:
		l.health.answered()
	}
	switch {
	case err != nil: // contended, in shadow mode
	case d.Allowed:
		l.cfg.Metrics.decision(OutcomeAllowed)
	case l.cfg.Shadow:
		l.cfg.Metrics.decision(OutcomeShadowDenied)
	default:
		l.cfg.Metrics.decision(OutcomeDenied)
		if l.cfg.DenyCache && d.RetryAfter > 0 {
			l.cacheDenial(key, now.Add(d.RetryAfter), now)
		}
		l.setHeaders(w.Header(), d)
		l.tooMany(w, d.RetryAfter)
		return
	}
	l.setHeaders(w.Header(), d)
	l.next.ServeHTTP(w, r)
}

// localAnswer is a decision of the local limiter: whether it admitted and,
// when not, after how long it admits again and the limit it applied.
type localAnswer struct {
	allowed bool
	retry   time.Duration
	policy  algorithms.Policy
}

// localFor decides key with the single local limiter; nil without one.
func (l *Handler) localFor(key string) func(context.Context) (localAnswer, error) {
	if l.cfg.Local == nil || l.cfg.Local.Limiter == nil {
		return nil
	}
	return func(ctx context.Context) (localAnswer, error) {
		d, err := l.cfg.Local.Limiter.Allow(ctx, key)
		return localAnswer{allowed: d.Allowed, retry: d.RetryAfter, policy: l.cfg.Local.Policy}, err
	}
}

// fallback answers r without Redis, which failed with kind, as OnError
// says, deciding with local under FailLocal; the answer carries no
// RateLimit fields. Under FailLocal a local decision that fails (it timed
// out on a loaded host, say) is answered 503, as closed: letting it through
// would admit more than the gateway's share.
func (l *Handler) fallback(w http.ResponseWriter, r *http.Request, kind string, local func(context.Context) (localAnswer, error)) {
	cause := causes[kind]
	if l.cfg.OnError == FailLocal && local != nil {
		ctx, cancel := context.WithTimeout(r.Context(), l.cfg.Timeout)
		a, err := local(ctx)
		cancel()
		switch {
		case err != nil:
			cause += ", and the local limiter failed"
		case !a.allowed:
			l.cfg.Metrics.decision(OutcomeErrorLocalDenied)
			w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(a.retry), 10))
			problem(w, http.StatusTooManyRequests, "Too Many Requests",
				fmt.Sprintf("rate limit of %d per %dms exceeded: this gateway's own share of the limit, while %s",
					a.policy.Limit, a.policy.Window.Milliseconds(), cause), a.retry.Milliseconds())
			return
		default:
			l.cfg.Metrics.decision(OutcomeErrorLocalAllowed)
			l.next.ServeHTTP(w, r)
			return
		}
	}
	if l.cfg.OnError == FailClosed || l.cfg.OnError == FailLocal && local != nil {
		l.cfg.Metrics.decision(OutcomeErrorClosed)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Service Unavailable", cause, 1000)
		return
	}
	l.cfg.Metrics.decision(OutcomeErrorOpen)
	l.next.ServeHTTP(w, r)
}

// Close stops the goroutine that asks Redis while the circuit is open and
// waits for it: for a probe in flight, at most Config.Timeout. A Handler
// used after Close still decides every request, in Redis, as with no
// circuit breaker. Close always returns nil; a second call does nothing.
func (l *Handler) Close() error {
	l.health.close()
	return nil
}

// setHeaders writes the limit state of d.
func (l *Handler) setHeaders(h http.Header, d algorithms.Decision) {
	window := ceilSeconds(l.cfg.Policy.Window)
	reset := window // after at most one window every request has left it
	if !d.Allowed && d.RetryAfter > 0 {
		reset = ceilSeconds(d.RetryAfter)
	}
	remaining := max(d.Remaining, 0)
	if l.cfg.Headers != HeadersLegacy {
		h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", l.cfg.PolicyName, l.cfg.Policy.Limit, window))
		h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", l.cfg.PolicyName, remaining, reset))
	}
	if l.cfg.Headers != HeadersDraft {
		h.Set("RateLimit-Limit", strconv.FormatInt(l.cfg.Policy.Limit, 10))
		h.Set("RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}

// tooMany answers 429 with Retry-After in whole seconds, rounded up.
func (l *Handler) tooMany(w http.ResponseWriter, retry time.Duration) {
	h := w.Header()
	if h.Get("RateLimit-Policy") == "" && h.Get("RateLimit-Limit") == "" {
		l.setHeaders(h, algorithms.Decision{Limit: l.cfg.Policy.Limit, RetryAfter: retry})
	}
	h.Set("Retry-After", strconv.FormatInt(ceilSeconds(retry), 10))
	problem(w, http.StatusTooManyRequests, "Too Many Requests",
		fmt.Sprintf("rate limit of %d per %dms exceeded", l.cfg.Policy.Limit, l.cfg.Policy.Window.Milliseconds()), retry.Milliseconds())
}

// problem writes an RFC 9457 problem+json body.
func problem(w http.ResponseWriter, status int, title, detail string, retryMillis int64) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": title, "status": status, "detail": detail, "retry_after_ms": retryMillis,
	})
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// cachedDenial reports whether key is denied until a time after now.
func (l *Handler) cachedDenial(key string, now time.Time) (time.Time, bool) {
	if !l.cfg.DenyCache {
		return time.Time{}, false
	}
	d, ok := l.denied.get(key, now)
	return d.until, ok
}

// cacheDenial remembers that key is denied until then.
func (l *Handler) cacheDenial(key string, until, now time.Time) {
	l.denied.put(key, denial{until: until, reset: until, cost: 1}, now)
}
