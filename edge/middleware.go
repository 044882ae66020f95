// Package edge is ratelab's production limiter as an HTTP gateway: net/http
// middleware that decides every request by the limits it meets in a rule
// set (a rules file, or the one-rule form of --limit) before it reaches the
// upstream, all of them at once through the limiter core (package
// limiter); the gateway that serves it; and the assembly of the nginx
// engine, which runs edge/openresty's Lua module. Clients over a limit get
// 429 with an honest Retry-After; every response carries the limits' state
// in the IETF draft's RateLimit and RateLimit-Policy fields and the older
// RateLimit-Limit/Remaining/Reset trio.
package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// Config configures the middleware.
type Config struct {
	// Config is the decision's: the Decider, the Redis timeout, the fail
	// mode and the local limiter, the circuit breaker, the deny cache, the
	// metrics and the log. Every answer decided without Redis carries no
	// RateLimit fields: clients and load generators can tell them apart.
	limiter.Config
	// Rules decide every request by the limits it meets in them (the one
	// set they serve), all in one decision. A reload applies from the next
	// request.
	Rules *limiter.Rules
	// KeyBy says where a request's client address comes from (the peer,
	// or X-Forwarded-For from trusted proxies), for the rules'
	// remote_address; and who a request is from for the built-in upstream.
	KeyBy KeyBy
	// Clock is where the Decider takes the time from, for the start-up
	// line. Redis's clock (ratelab edge's default) lets any number of
	// gateways and nginx nodes on hosts whose clocks disagree share one
	// Redis; with the callers' clocks, a host ahead of the others prunes
	// their requests early and over-admits.
	Clock algorithms.Clock
	// Headers selects the header fields; HeadersBoth when empty.
	Headers limiter.Headers
	// Shadow decides and sets headers but never blocks; what would have
	// been blocked is counted.
	Shadow bool
	// Bounds.Length is the longest value of a request attribute the rules
	// read; a request with a longer one is answered 400 and never decided
	// (limiter.DefaultBounds when zero).
	Bounds limiter.Bounds
}

// Middleware limits next. With BreakerFailures set, an open circuit asks
// Redis from a goroutine of its own until it answers: Close the Handler
// when it serves no more, after http.Server.Shutdown, to stop it.
//
//	h := edge.Middleware(cfg, mux)
//	defer h.Close()
//	srv := &http.Server{Handler: h}
func Middleware(cfg Config, next http.Handler) *Handler {
	if cfg.Headers == "" {
		cfg.Headers = limiter.HeadersBoth
	}
	if cfg.Name == "" {
		cfg.Name = "ratelab edge"
	}
	cfg.Bounds = cfg.Bounds.WithDefaults()
	core := limiter.New(cfg.Config)
	cfg.Rules.SetMetrics(core.Metrics())
	return &Handler{cfg: cfg, next: next, core: core}
}

// Handler is the middleware in front of an upstream, built by Middleware:
// it serves HTTP, and owns the limiter core, whose goroutine probes Redis
// while its circuit is open: Close stops it.
type Handler struct {
	cfg  Config
	next http.Handler
	core *limiter.Limiter
}

// Metrics are the middleware's counters.
func (h *Handler) Metrics() *limiter.Metrics { return h.core.Metrics() }

// request is what the rules see of r.
func (h *Handler) request(r *http.Request) rules.Request {
	return rules.Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host,
		RemoteAddress: h.cfg.KeyBy.clientIP(r), Header: r.Header}
}

// plan is the limits req meets in set, as the core decides them.
func (h *Handler) plan(set *rules.Set, req rules.Request) limiter.Plan {
	hits := set.Match(req)
	p := limiter.Plan{Domain: set.Domain, Limits: make([]limiter.Limit, len(hits))}
	for i, hit := range hits {
		l := hit.Limit
		p.Limits[i] = limiter.Limit{ID: l.ID, Unlimited: l.Unlimited, Hidden: l.Shadow,
			Check: algorithms.Check{Key: hit.Key, Algorithm: l.Algorithm, Policy: l.Policy, Cost: l.Cost, Shadow: l.Shadow || h.cfg.Shadow}}
	}
	return p
}

// ServeHTTP decides r by the limits it meets in the rules serving (one
// version decides the whole request, whatever a reload does meanwhile),
// then answers it or hands it to the upstream.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	set := h.cfg.Rules.Current().Set()
	req := h.request(r)
	if a, ok := set.Oversized(req, h.cfg.Bounds.Length); ok {
		h.core.Metrics().Invalid(limiter.InvalidLength)
		problem(w, http.StatusBadRequest, "Bad Request",
			fmt.Sprintf("the %s is longer than the %d bytes the rate limiter reads", a.Words(), h.cfg.Bounds.Length), 0)
		return
	}
	p := h.plan(set, req)
	a := h.core.Decide(r.Context(), p)
	switch a.Outcome {
	case limiter.OutcomeCanceled:
		return // the client went away: nothing to answer
	case limiter.OutcomeInvalid:
		problem(w, http.StatusInternalServerError, "Internal Server Error", "the rate limiter cannot decide: "+a.Err.Error(), 0)
		return
	case limiter.OutcomeErrorOpen, limiter.OutcomeErrorLocalAllowed:
		h.next.ServeHTTP(w, r)
		return
	case limiter.OutcomeErrorClosed:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Service Unavailable", a.CauseText(), 1000)
		return
	case limiter.OutcomeErrorLocalDenied:
		var violated []string
		for _, lim := range p.Limits {
			if lim.Check.Key == a.Local.Key {
				violated = append(violated, lim.ID)
			}
		}
		w.Header().Set("Retry-After", strconv.FormatInt(limiter.CeilSeconds(a.Local.RetryAfter), 10))
		quotaExceeded(w, fmt.Sprintf("rate limit of %d per %dms exceeded: this gateway's own share of the limit, while %s",
			a.Local.Policy.Limit, a.Local.Policy.Window.Milliseconds(), a.CauseText()), a.Local.RetryAfter.Milliseconds(), violated)
		return
	}
	states := a.States(p)
	retry := limiter.SetHeaders(w.Header(), h.cfg.Headers, states)
	if !a.Allowed() {
		tooMany(w, retry, states)
		return
	}
	// The in-flight slots the request took are released once the upstream
	// has answered it in full, or the client went away: ServeHTTP returns
	// then, once, whether it panics or not.
	defer h.core.Release(r.Context(), p, a)
	h.next.ServeHTTP(w, r)
}

// tooMany answers 429, the headers set, naming the limits that refused.
func tooMany(w http.ResponseWriter, retry time.Duration, states []limiter.State) {
	var names, violated []string
	for _, s := range states {
		if !s.Allowed {
			burst := ""
			if s.Policy.Burst > 0 {
				burst = fmt.Sprintf(", burst %d", s.Policy.Burst)
			}
			if s.InFlight {
				names = append(names, fmt.Sprintf("%q (%d in flight)", s.Name, s.Policy.Limit))
			} else {
				names = append(names, fmt.Sprintf("%q (%d per %dms%s)", s.Name, s.Policy.Limit, s.Policy.Window.Milliseconds(), burst))
			}
			violated = append(violated, s.Name)
		}
	}
	w.Header().Set("Retry-After", strconv.FormatInt(limiter.CeilSeconds(retry), 10))
	quotaExceeded(w, "rate limit exceeded: "+strings.Join(names, ", "), retry.Milliseconds(), violated)
}

// QuotaExceeded is the problem type of a 429 (draft-ietf-httpapi-ratelimit-
// headers' quota-exceeded): its violated-policies member names the
// limits, as RateLimit-Policy names them, that refused the request.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// quotaExceeded writes a 429 of the quota-exceeded problem type.
func quotaExceeded(w http.ResponseWriter, detail string, retryMillis int64, violated []string) {
	if violated == nil {
		violated = []string{}
	}
	writeProblem(w, http.StatusTooManyRequests, map[string]any{"type": QuotaExceeded,
		"title": "Request cannot be satisfied as assigned quota has been exceeded", "status": http.StatusTooManyRequests,
		"detail": detail, "retry_after_ms": retryMillis, "violated-policies": violated})
}

// Close stops the goroutine that asks Redis while the circuit is open and
// waits for it: for a probe in flight, at most Config.Timeout. A Handler
// used after Close still decides every request, in Redis, as with no
// circuit breaker. Close always returns nil; a second call does nothing.
func (h *Handler) Close() error {
	h.core.Close()
	return nil
}

// problem writes an RFC 9457 problem+json body of the type about:blank.
func problem(w http.ResponseWriter, status int, title, detail string, retryMillis int64) {
	writeProblem(w, status, map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail, "retry_after_ms": retryMillis})
}

// writeProblem writes body as an RFC 9457 problem+json answer of status.
func writeProblem(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
