package edge

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
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
	"github.com/ratelab/ratelab/rules"
)

// RLSConfig configures the rate limit service.
type RLSConfig struct {
	// Domains is the configuration served, reloaded from its directory.
	Domains *DomainsReloader
	// Decider decides every limit of one call in one Redis round trip.
	Decider Decider
	// Timeout bounds one decision in Redis.
	Timeout time.Duration
	// OnError is what a call gets when Redis fails or the circuit is open:
	// FailOpen (OK, no limits) or FailClosed (OVER_LIMIT).
	OnError OnError
	// BreakerFailures is the Redis failures in a row that open the circuit;
	// 0: no circuit breaker.
	BreakerFailures int
	// DenyCache answers a call that meets a limit known to refuse it from
	// memory, without Redis, until that limit admits again (edge's deny
	// cache): OVER_LIMIT, with the duration_until_reset Redis gave.
	DenyCache bool
	// Probe asks Redis whether it answers again while the circuit is open.
	Probe func(ctx context.Context) error
	// ResponseHeaders adds the draft-10 RateLimit and RateLimit-Policy fields
	// to response_headers_to_add (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	// Metrics count decisions, Redis errors and latency; required.
	Metrics *Metrics
	// Log receives lines about Redis failures; none when nil.
	Log io.Writer
	// Now is the service's clock for the reset of a window no request has
	// counted in yet, and the deny cache's; time.Now when nil.
	Now func() time.Time
}

// RLS is Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) on ratelab's limiter: every
// descriptor of one call is looked up as envoyproxy/ratelimit looks it up
// (rules.Set.Lookup), and all their limits are decided together in one
// Decide call.
type RLS struct {
	pb.UnimplementedRateLimitServiceServer
	cfg    RLSConfig
	health *health
	denied denyCache
}

var _ pb.RateLimitServiceServer = (*RLS)(nil)

// NewRLS returns the service; Close stops its background probe.
func NewRLS(cfg RLSConfig) *RLS {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	probe := cfg.Probe
	if probe == nil {
		probe = func(ctx context.Context) error {
			_, err := cfg.Decider.Decide(ctx, []algorithms.Check{probeCheck})
			return err
		}
	}
	return &RLS{cfg: cfg, health: newHealth(cfg.Log, cfg.BreakerFailures, cfg.Timeout, cfg.Metrics, probe)}
}

// Close stops the service's background work.
func (s *RLS) Close() { s.health.close() }

// rlsLimit is one limit a call meets: what the Decider is asked, and what
// the descriptor's status reports.
type rlsLimit struct {
	desc   int
	check  algorithms.Check
	limit  *rules.Limit // nil for the descriptor's own limit override
	proto  *pb.RateLimitResponse_RateLimit
	blocks bool // requests_per_unit 0: decided without Redis
	// over is a call over the limit whatever Redis holds: more hits than
	// the limit, or a limit of 0 (even for hits_addend 0, which asks whether
	// one more would be admitted, as it does of every limit)
	over bool
	name string
}

// badRequest is a malformed call: InvalidArgument, nothing decided.
func badRequest(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

func validRLSRequest(req *pb.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return badRequest("rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return badRequest("rate limit descriptor list must not be empty")
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return badRequest("descriptors[%d]: no entries", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return badRequest("descriptors[%d].entries[%d].key must not be empty", i, j)
			}
		}
		if d.GetIsNegativeHits() {
			return badRequest("descriptors[%d].is_negative_hits is not supported", i)
		}
		if o := d.GetLimit(); o != nil {
			if _, ok := unitWindow[o.GetUnit()]; !ok {
				return badRequest("descriptors[%d].limit.unit: %v is not a unit", i, o.GetUnit())
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
	out.UnitMultiplier = wrapperspb.UInt32(uint32(min(ceilSeconds(l.Policy.Window), math.MaxUint32)))
	return out
}

// hitsAddend is what descriptor i takes, as envoyproxy/ratelimit's
// GetHitsAddends: its own hits_addend when set (0 checks without
// consuming), else the call's, at least 1.
func hitsAddend(req *pb.RateLimitRequest, d *rlpb.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt64))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// ShouldRateLimit decides a call: OVER_LIMIT when any descriptor is.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if err := validRLSRequest(req); err != nil {
		return nil, err
	}
	set := s.cfg.Domains.Current().Sets[req.GetDomain()] // one configuration decides the call
	descs := req.GetDescriptors()
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(descs))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	met := s.limits(req, set, resp)
	// The scripts keep time in whole milliseconds: so does the cache, so that
	// it never holds a denial longer than Redis would.
	now := s.cfg.Now().Truncate(time.Millisecond)
	if decisions, ok := s.cachedDenials(met, now); ok {
		s.cfg.Metrics.denyCacheHit()
		s.cfg.Metrics.decision(OutcomeDenyCache)
		s.statuses(resp, met, decisions)
		return resp, nil
	}
	checks, asked := callChecks(met)
	decisions := make([]algorithms.Decision, len(met))
	if len(checks) > 0 {
		out, err := s.decide(ctx, checks)
		if err != nil {
			return s.failed(ctx, resp, err)
		}
		s.cacheDenials(checks, out, now)
		// A counter shared by several descriptors reports to each what
		// remained after its own hits, as envoyproxy/ratelimit's counter,
		// which adds them one after another.
		later := make([]int64, len(checks))
		for i := len(met) - 1; i >= 0; i-- {
			j := asked[i]
			if j < 0 {
				continue
			}
			decisions[i] = out.Checks[j]
			if out.Allowed && checks[j].Cost > 0 {
				decisions[i].Remaining += later[j]
				later[j] += met[i].check.Cost
			}
		}
	}
	s.statuses(resp, met, decisions)
	s.count(resp)
	return resp, nil
}

// callChecks are what the Decider is asked for the limits met, and for
// each limit the index of its check (-1 for a limit decided without
// Redis). Descriptors of one call that meet one counter (Envoy sends the
// same descriptor twice when two actions build it) share one check, their
// hits added, as envoyproxy/ratelimit adds them to one counter. A call over
// a limit whatever Redis holds consumes nothing: its checks only ask.
func callChecks(met []rlsLimit) ([]algorithms.Check, []int) {
	var checks []algorithms.Check
	asked := make([]int, len(met))
	byKey := map[string]int{}
	overAny := false
	for i, m := range met {
		asked[i] = -1
		if m.over && !m.check.Shadow {
			overAny = true
		}
		if m.blocks {
			continue
		}
		if j, ok := byKey[m.check.Key]; ok {
			checks[j].Cost += m.check.Cost
			asked[i] = j
			continue
		}
		byKey[m.check.Key] = len(checks)
		asked[i] = len(checks)
		checks = append(checks, m.check)
	}
	for j := range checks {
		if checks[j].Cost <= checks[j].Policy.Limit {
			continue
		}
		// Together over the limit: the call is over it, and only asks.
		checks[j].Cost = 0
		for i := range met {
			if asked[i] == j {
				met[i].over = true
			}
		}
		overAny = overAny || !checks[j].Shadow
	}
	if overAny {
		for j := range checks {
			checks[j].Cost = 0
		}
	}
	return checks, asked
}

// limits looks up every descriptor's limits, and sets the statuses of the
// descriptors that meet none, or only an unlimited one. Replaces applies
// across the call's descriptors, as in envoyproxy/ratelimit.
func (s *RLS) limits(req *pb.RateLimitRequest, set *rules.Set, resp *pb.RateLimitResponse) []rlsLimit {
	descs := req.GetDescriptors()
	hits := make([][]rules.Hit, len(descs))
	replacing := map[string]bool{}
	for i, d := range descs {
		if d.GetLimit() != nil || set == nil {
			continue
		}
		entries := make([]rules.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		hits[i] = set.Lookup(entries)
		for _, h := range hits[i] {
			for _, r := range h.Limit.Replaces {
				replacing[r] = true
			}
		}
	}
	var met []rlsLimit
	for i, d := range descs {
		addend := hitsAddend(req, d)
		if o := d.GetLimit(); o != nil {
			met = append(met, overrideLimit(req.GetDomain(), i, d, o, addend))
			continue
		}
		for _, h := range hits[i] {
			l := h.Limit
			switch {
			case l.Name != "" && replacing[l.Name]:
				continue
			case l.Unlimited:
				resp.Statuses[i].LimitRemaining = math.MaxUint32
				continue
			}
			m := rlsLimit{desc: i, limit: l, proto: currentLimit(l), blocks: l.Blocks, name: l.ID,
				check: algorithms.Check{Key: h.Key, Algorithm: l.Algorithm, Policy: l.Policy, Cost: addend, Shadow: l.Shadow}}
			if l.Blocks || addend > l.Policy.Limit {
				m.over, m.check.Cost = true, 0
			}
			met = append(met, m)
		}
	}
	return met
}

// overrideLimit is a descriptor's own limit (its limit field), which
// envoyproxy/ratelimit applies instead of the configuration's: a fixed
// window of the unit, counted per domain and entries.
func overrideLimit(domain string, i int, d *rlpb.RateLimitDescriptor, o *rlpb.RateLimitDescriptor_RateLimitOverride, addend int64) rlsLimit {
	window := unitWindow[o.GetUnit()]
	if mult := o.GetUnitMultiplier(); mult != nil && mult.GetValue() > 1 {
		window *= time.Duration(mult.GetValue())
	}
	h := sha1.New()
	fmt.Fprintf(h, "%d:%s", len(domain), domain)
	for _, e := range d.GetEntries() {
		fmt.Fprintf(h, "%d:%s%d:%s", len(e.GetKey()), e.GetKey(), len(e.GetValue()), e.GetValue())
	}
	sum := hex.EncodeToString(h.Sum(nil)[:16])
	proto := &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit: pb.RateLimitResponse_RateLimit_Unit(o.GetUnit()), UnitMultiplier: o.GetUnitMultiplier()}
	m := rlsLimit{desc: i, proto: proto, blocks: o.GetRequestsPerUnit() == 0, name: "override",
		check: algorithms.Check{Key: algorithms.Key(sum[:16], sum+":override:"+strconv.FormatInt(window.Milliseconds(), 10)),
			Algorithm: "fixed-window", Policy: algorithms.Policy{Limit: int64(o.GetRequestsPerUnit()), Window: window}, Cost: addend}}
	if m.blocks || addend > m.check.Policy.Limit {
		m.over, m.check.Cost = true, 0
	}
	return m
}

// decide asks Redis, unless the circuit is open.
func (s *RLS) decide(ctx context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	if kind, open := s.health.circuitOpen(); open {
		return algorithms.Outcome{}, &circuitError{kind: kind}
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	out, err := s.cfg.Decider.Decide(dctx, checks)
	s.cfg.Metrics.observe(time.Since(start))
	if err == nil && len(out.Checks) != len(checks) {
		err = fmt.Errorf("decide: %d decisions for %d limits", len(out.Checks), len(checks))
	}
	if err != nil {
		if ctx.Err() == nil {
			kind := errorKind(err)
			s.cfg.Metrics.redisError(kind)
			s.health.failedWith(kind, err)
		}
		return out, err
	}
	s.health.answered()
	return out, nil
}

// circuitError is a decision the open circuit kept from Redis.
type circuitError struct{ kind string }

func (e *circuitError) Error() string { return "circuit open: " + e.kind }

// failed answers a call Redis could not decide, by the fail mode.
func (s *RLS) failed(ctx context.Context, resp *pb.RateLimitResponse, err error) (*pb.RateLimitResponse, error) {
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if s.cfg.OnError == FailClosed {
		s.cfg.Metrics.decision(OutcomeErrorClosed)
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		for _, st := range resp.Statuses {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		return resp, nil
	}
	s.cfg.Metrics.decision(OutcomeErrorOpen)
	return resp, nil
}

// statuses fills each descriptor's status from its limits' decisions: the
// limit that denies it, else the one with the least remaining.
func (s *RLS) statuses(resp *pb.RateLimitResponse, met []rlsLimit, decisions []algorithms.Decision) {
	now := s.cfg.Now()
	best := make([]int, len(resp.Statuses))
	for i := range best {
		best[i] = -1
	}
	var states []limitState
	for i, m := range met {
		d := decisions[i]
		over := m.over || (!m.blocks && !d.Allowed)
		remaining := max(d.Remaining, 0)
		if over {
			remaining = 0
		}
		reset := max(d.RetryAfter, d.Reset)
		if reset <= 0 && m.check.Policy.Window > 0 {
			w := m.check.Policy.Window
			reset = w - time.Duration(now.UnixNano()%int64(w))
		}
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: m.proto,
			LimitRemaining: uint32(min(remaining, math.MaxUint32)), DurationUntilReset: durationpb.New(reset.Truncate(time.Second) + ceilRest(reset))}
		if over && !m.check.Shadow {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
		if !m.check.Shadow {
			states = append(states, limitState{Name: m.name, Policy: m.check.Policy, Allowed: !over,
				Remaining: remaining, RetryAfter: d.RetryAfter, Reset: reset})
		}
		j := best[m.desc]
		cur := resp.Statuses[m.desc]
		switch {
		case j < 0,
			st.Code == pb.RateLimitResponse_OVER_LIMIT && cur.Code != pb.RateLimitResponse_OVER_LIMIT,
			st.Code == cur.Code && st.LimitRemaining < cur.LimitRemaining:
			resp.Statuses[m.desc], best[m.desc] = st, i
		}
	}
	if s.cfg.ResponseHeaders && len(states) > 0 {
		h := http.Header{}
		setLimitHeaders(h, HeadersDraft, states)
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

// count records the call's outcome.
func (s *RLS) count(resp *pb.RateLimitResponse) {
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		s.cfg.Metrics.decision(OutcomeDenied)
		return
	}
	s.cfg.Metrics.decision(OutcomeAllowed)
}
