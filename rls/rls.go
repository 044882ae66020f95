// Package rls is Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) on ratelab's limiter core:
// ShouldRateLimit over gRPC and envoyproxy/ratelimit's /json over HTTP, on
// envoyproxy/ratelimit's configuration files. It is a front door of package
// limiter: a call is checked against its Bounds, its descriptors are looked
// up in the configuration serving (rules.Set.LookupCall) into a Plan, the
// core decides it, and the Answer becomes the descriptors' statuses.
package rls

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// Config configures the rate limit service.
type Config struct {
	// Config is the decision's: the Decider (every limit of one call in one
	// Redis round trip), the Redis timeout, the fail mode (FailOpen: OK, no
	// limits; FailClosed: OVER_LIMIT), the circuit breaker, the deny cache
	// (a call over a limit Redis refused is answered OVER_LIMIT from memory,
	// with the duration_until_reset Redis gave), the metrics and the log.
	limiter.Config
	// Rules are the configuration served, by domain, reloaded from its
	// directory (Options.RulesConfig).
	Rules *limiter.Rules
	// ResponseHeaders adds the draft-10 RateLimit and RateLimit-Policy fields
	// to response_headers_to_add (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	// Bounds are what one call may carry (limiter.DefaultBounds for those
	// left at zero): a call over them is InvalidArgument, and never reaches
	// Redis.
	Bounds limiter.Bounds
}

// Service is Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) on ratelab's limiter: every
// descriptor of one call is looked up as envoyproxy/ratelimit looks it up,
// and all their limits are decided together by the limiter core.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	cfg  Config
	core *limiter.Limiter
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// New returns the service; Close stops its background probe.
func New(cfg Config) *Service {
	if cfg.Name == "" {
		cfg.Name = "ratelab rls"
	}
	cfg.Bounds = cfg.Bounds.WithDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	core := limiter.New(cfg.Config)
	cfg.Rules.SetMetrics(core.Metrics())
	return &Service{cfg: cfg, core: core}
}

// Close stops the service's background work.
func (s *Service) Close() { s.core.Close() }

// Metrics are the service's counters.
func (s *Service) Metrics() *limiter.Metrics { return s.core.Metrics() }

// badRequest is a malformed call: InvalidArgument, nothing decided.
func badRequest(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// maxWindow is the longest window a descriptor's own limit may have, as
// the rules' longest: a year.
const maxWindow = 365 * 24 * time.Hour

// check refuses a call the service does not decide: malformed, or over the
// bounds. It runs before anything else, and before Redis.
func (s *Service) check(req *pb.RateLimitRequest) *limiter.Refusal {
	b := s.cfg.Bounds
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return limiter.Refuse(limiter.InvalidMalformed, "rate limit domain must not be empty")
	case len(req.GetDomain()) > b.Length:
		return limiter.Refuse(limiter.InvalidLength, "domain: longer than %d bytes (got %d)", b.Length, len(req.GetDomain()))
	case n == 0:
		return limiter.Refuse(limiter.InvalidDescriptors, "rate limit descriptor list must not be empty")
	case n > b.Descriptors:
		return limiter.Refuse(limiter.InvalidDescriptors, "%d descriptors: at most %d in one call", n, b.Descriptors)
	}
	for i, d := range req.GetDescriptors() {
		switch n := len(d.GetEntries()); {
		case n == 0:
			return limiter.Refuse(limiter.InvalidEntries, "descriptors[%d]: no entries", i)
		case n > b.Entries:
			return limiter.Refuse(limiter.InvalidEntries, "descriptors[%d]: %d entries: at most %d in one descriptor", i, n, b.Entries)
		}
		for j, e := range d.GetEntries() {
			switch {
			case e.GetKey() == "":
				return limiter.Refuse(limiter.InvalidLength, "descriptors[%d].entries[%d].key must not be empty", i, j)
			case len(e.GetKey()) > b.Length:
				return limiter.Refuse(limiter.InvalidLength, "descriptors[%d].entries[%d].key: longer than %d bytes (got %d)", i, j, b.Length, len(e.GetKey()))
			case len(e.GetValue()) > b.Length:
				return limiter.Refuse(limiter.InvalidLength, "descriptors[%d].entries[%d].value: longer than %d bytes (got %d)", i, j, b.Length, len(e.GetValue()))
			}
		}
		if d.GetIsNegativeHits() {
			return limiter.Refuse(limiter.InvalidHits, "descriptors[%d].is_negative_hits is not supported", i)
		}
		if o := d.GetLimit(); o != nil {
			if _, err := overridePolicy(o); err != nil {
				return limiter.Refuse(limiter.InvalidOverride, "descriptors[%d].limit: %v", i, err)
			}
		}
	}
	return nil
}

// unitWindow is each unit's window, as envoyproxy/ratelimit's UnitToDivider.
var unitWindow = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second, typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR: time.Hour, typev3.RateLimitUnit_DAY: 24 * time.Hour,
	typev3.RateLimitUnit_MONTH: 30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:  365 * 24 * time.Hour,
}

// overridePolicy is the policy of a descriptor's own limit: requests_per_unit
// per unit × unit_multiplier (which Envoy's API defines and
// envoyproxy/ratelimit ignores). It refuses a unit that is not one, a window
// over a year, and a policy the scripts cannot count exactly (requests ×
// window in ms at 2^53 or more). A Limit of 0 is a limit that refuses
// every request.
func overridePolicy(o *rlpb.RateLimitDescriptor_RateLimitOverride) (algorithms.Policy, error) {
	unit, ok := unitWindow[o.GetUnit()]
	if !ok {
		return algorithms.Policy{}, fmt.Errorf("unit: %v is not a unit", o.GetUnit())
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		mult = int64(m.GetValue())
	}
	if mult > int64(maxWindow/unit) {
		return algorithms.Policy{}, fmt.Errorf("unit_multiplier: %d %ss is longer than a year", mult, o.GetUnit())
	}
	p := algorithms.Policy{Limit: int64(o.GetRequestsPerUnit()), Window: time.Duration(mult) * unit}
	if p.Limit > 0 {
		if err := p.Validate(); err != nil {
			return p, fmt.Errorf("requests_per_unit %d × a window of %d ms is 2^53 or more: no limit counts that exactly", p.Limit, p.Window.Milliseconds())
		}
	}
	return p, nil
}

// protoUnit is a rules unit as the response names it.
var protoUnit = map[string]pb.RateLimitResponse_RateLimit_Unit{
	"second": pb.RateLimitResponse_RateLimit_SECOND, "minute": pb.RateLimitResponse_RateLimit_MINUTE,
	"hour": pb.RateLimitResponse_RateLimit_HOUR, "day": pb.RateLimitResponse_RateLimit_DAY,
	"week": pb.RateLimitResponse_RateLimit_WEEK, "month": pb.RateLimitResponse_RateLimit_MONTH,
	"year": pb.RateLimitResponse_RateLimit_YEAR,
}

// currentLimit is a limit as a status reports it: a window that is not one
// whole unit is a number of seconds (unit_multiplier).
func currentLimit(l *rules.Limit) *pb.RateLimitResponse_RateLimit {
	out := &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: uint32(min(l.Policy.Limit, math.MaxUint32))}
	if u, ok := protoUnit[l.Unit]; ok {
		out.Unit = u
		return out
	}
	out.Unit = pb.RateLimitResponse_RateLimit_SECOND
	out.UnitMultiplier = wrapperspb.UInt32(uint32(min(limiter.CeilSeconds(l.Policy.Window), math.MaxUint32)))
	return out
}

// hitsAddend is what descriptor d adds, as envoyproxy/ratelimit's
// GetHitsAddends: its own hits_addend when set (0 checks without
// consuming), else the call's, at least 1.
func hitsAddend(req *pb.RateLimitRequest, d *rlpb.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt64))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// take is what a request of hits takes of a limit whose requests each cost
// cost, capped at one more than limit (the most the limit holds: its
// Policy.Capacity()): a take over it is over the limit whatever Redis holds
// (and consumes nothing), however far over.
func take(hits, cost, limit int64) int64 {
	if cost == 0 || hits == 0 {
		return 0
	}
	if hits > limit/cost {
		return limit + 1
	}
	return hits * cost
}

// called is a call's plan, with what its statuses need of each limit.
type called struct {
	plan    limiter.Plan
	limits  []*pb.RateLimitResponse_RateLimit // per plan limit, as its status reports it
	unlimit []bool                            // per descriptor: it met an unlimited limit
}

// ShouldRateLimit decides a call: OVER_LIMIT when any descriptor is.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if r := s.check(req); r != nil {
		s.core.Metrics().Invalid(r.Reason)
		return nil, badRequest("%s", r.Err)
	}
	c := s.plan(req, s.cfg.Rules.Current().Sets[req.GetDomain()]) // one configuration decides the call
	a := s.core.Decide(ctx, c.plan)
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		if c.unlimit[i] {
			resp.Statuses[i].LimitRemaining = math.MaxUint32
		}
	}
	switch a.Outcome {
	case limiter.OutcomeCanceled:
		return nil, status.FromContextError(ctx.Err()).Err()
	case limiter.OutcomeInvalid:
		return nil, status.Errorf(codes.Internal, "the rate limiter cannot decide: %v", a.Err)
	case limiter.OutcomeErrorClosed, limiter.OutcomeErrorLocalDenied:
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		for _, st := range resp.Statuses {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		return resp, nil
	case limiter.OutcomeErrorOpen, limiter.OutcomeErrorLocalAllowed:
		return resp, nil
	}
	s.statuses(resp, c, a)
	return resp, nil
}

// plan is the limits the call's descriptors meet in set (none for a domain
// the configuration does not have, not even a descriptor's own limit: as
// envoyproxy/ratelimit, an unknown domain is not limited). Replaces applies
// across the call's descriptors, as in envoyproxy/ratelimit.
func (s *Service) plan(req *pb.RateLimitRequest, set *rules.Set) called {
	descs := req.GetDescriptors()
	c := called{plan: limiter.Plan{Domain: req.GetDomain()}, unlimit: make([]bool, len(descs))}
	if set == nil {
		return c
	}
	entries := make([][]rules.Entry, len(descs))
	for i, d := range descs {
		if d.GetLimit() != nil {
			continue // its own limit: not looked up
		}
		entries[i] = make([]rules.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[i][j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	met := set.LookupCall(entries)
	for i, d := range descs {
		hits := max(hitsAddend(req, d), 0)
		if o := d.GetLimit(); o != nil {
			s.override(&c, req.GetDomain(), i, d, o, hits)
			continue
		}
		for _, h := range met[i] {
			l := h.Limit
			if l.Unlimited {
				c.unlimit[i] = true
				continue
			}
			c.limits = append(c.limits, currentLimit(l))
			c.plan.Limits = append(c.plan.Limits, limiter.Limit{ID: l.ID, Group: i, Blocks: l.Blocks, Hidden: l.Shadow,
				Check: algorithms.Check{Key: h.Key, Algorithm: l.Algorithm, Policy: l.Policy, Cost: take(hits, l.Cost, l.Policy.Capacity()), Shadow: l.Shadow}})
		}
	}
	return c
}

// override adds descriptor i's own limit (its limit field), which
// envoyproxy/ratelimit applies instead of the configuration's: a fixed
// window of the unit, counted per domain, entries and policy (two
// descriptors of one call with the same entries and two overrides are two
// limits, each held on its own counter).
func (s *Service) override(c *called, domain string, i int, d *rlpb.RateLimitDescriptor, o *rlpb.RateLimitDescriptor_RateLimitOverride, hits int64) {
	p, _ := overridePolicy(o) // checked
	h := sha1.New()
	fmt.Fprintf(h, "%d:%s", len(domain), domain)
	for _, e := range d.GetEntries() {
		fmt.Fprintf(h, "%d:%s%d:%s", len(e.GetKey()), e.GetKey(), len(e.GetValue()), e.GetValue())
	}
	sum := hex.EncodeToString(h.Sum(nil)[:16])
	c.limits = append(c.limits, &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit: pb.RateLimitResponse_RateLimit_Unit(o.GetUnit()), UnitMultiplier: o.GetUnitMultiplier()})
	lim := limiter.Limit{ID: limiter.OverrideID, Group: i, Blocks: p.Limit == 0,
		Check: algorithms.Check{Key: algorithms.Key(sum[:16], sum+":override:"+strconv.FormatInt(p.Limit, 10)+"/"+strconv.FormatInt(p.Window.Milliseconds(), 10)),
			Algorithm: "fixed-window", Policy: p, Cost: take(hits, 1, p.Limit)}}
	c.plan.Limits = append(c.plan.Limits, lim)
}

// statuses fills each descriptor's status from its limits' results: the
// limit that refuses it, else of those decided the one with the least
// remaining, else one that was not decided (on a Cluster, after another
// limit refused the call: it says only the limit, with nothing remaining
// known).
func (s *Service) statuses(resp *pb.RateLimitResponse, c called, a limiter.Answer) {
	now := s.cfg.Now()
	rank := make([]int, len(resp.Statuses)) // 0 none yet, 1 not decided, 2 decided OK, 3 OVER_LIMIT
	for i, lim := range c.plan.Limits {
		r := a.Limits[i]
		reset := max(r.RetryAfter, r.Reset)
		if reset <= 0 {
			w := lim.Check.Policy.Window
			reset = w - time.Duration(now.UnixNano()%int64(w))
		}
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: c.limits[i],
			LimitRemaining:     uint32(min(max(r.Remaining, 0), math.MaxUint32)),
			DurationUntilReset: durationpb.New(reset.Truncate(time.Second) + ceilRest(reset))}
		k := 1
		switch {
		case !r.Decided:
			st.LimitRemaining = 0
		case !r.Allowed && !lim.Check.Shadow:
			st.Code, st.LimitRemaining, k = pb.RateLimitResponse_OVER_LIMIT, 0, 3
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		case !r.Allowed:
			st.LimitRemaining, k = 0, 2 // a shadow limit: over, and still OK
		default:
			k = 2
		}
		g, cur := lim.Group, resp.Statuses[lim.Group]
		if k > rank[g] || k == rank[g] && st.LimitRemaining < cur.LimitRemaining {
			resp.Statuses[g], rank[g] = st, k
		}
	}
	if states := a.States(c.plan); s.cfg.ResponseHeaders && len(states) > 0 {
		h := http.Header{}
		limiter.SetHeaders(h, limiter.HeadersDraft, states)
		for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &core.HeaderValue{Key: k, Value: h.Get(k)})
		}
	}
}

// ceilRest is what rounds d up to whole seconds, as envoyproxy/ratelimit
// tells the reset.
func ceilRest(d time.Duration) time.Duration {
	if d%time.Second == 0 {
		return 0
	}
	return time.Second
}
