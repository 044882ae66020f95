package bench

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
)

// sample is one request of a consumer, kept for the audit: a response, or
// a transport error (status 0).
type sample struct {
	consumer int32
	status   int16  // 0 for a transport error
	route    uint16 // the route of a mix (Routes) it was sent to
	// otherMayDeny, on a denial projected on one limit, says that another
	// limit the request met may have denied it: it would not surely have
	// admitted it, or what it counted is not known.
	otherMayDeny bool
	// judgement is what the audit made of a denial, projected on one
	// limit (see denialJudgement).
	judgement denialJudgement
	// adverts are the policies its response spoke of: advs[advAt:advAt+advN]
	// of the slice kept beside the samples; then come the violated
	// policies its 429's problem body named (violatedPolicies).
	advN       uint8
	violated   uint8
	advAt      uint32
	sent, done time.Duration // since the measured run began
	retryAfter time.Duration // -1 when absent
	limit      int64         // advertised limit; -1 when absent
	remaining  int64         // advertised remaining; -1 when absent
	reset      time.Duration // advertised time until the quota resets; -1 when absent
}

func (s sample) ok() bool { return s.status >= 200 && s.status < 300 }

// denied says the limit turned the request away (429).
func (s sample) denied() bool { return s.status == http.StatusTooManyRequests }

// answered says the request got a response.
func (s sample) answered() bool { return s.status != 0 }

// maxSamples bounds what the audit keeps.
const maxSamples = 5_000_000

// maxWorstConsumers bounds LimitAudit.WorstConsumers.
const maxWorstConsumers = 10

// sharedNote says why a shard of shared consumers cannot judge alone what
// needs all of a consumer's responses.
const sharedNote = "other load machines send the same consumers (--shared-consumers): report merge judges this over all of them"

// newSample reads the rate-limit fields of a response.
func newSample(consumer int, sent, done time.Duration, status int, f *limitFields) sample {
	s := sample{consumer: int32(consumer), sent: sent, done: done, status: int16(status), retryAfter: -1, limit: -1, remaining: -1, reset: -1}
	if f.retryAfter != "" {
		if n, err := strconv.ParseFloat(f.retryAfter, 64); err == nil && n >= 0 && n < 1e9 {
			s.retryAfter = time.Duration(n * float64(time.Second))
		} else if t, err := http.ParseTime(f.retryAfter); err == nil {
			s.retryAfter = max(time.Until(t), 0)
		}
	}
	if q, ok := sfParam(f.policy, "q"); ok {
		s.limit = q
	} else if n, err := strconv.ParseInt(cmp.Or(f.limit, f.xLimit), 10, 64); err == nil {
		s.limit = n
	}
	if r, ok := sfParam(f.rateLimit, "r"); ok {
		s.remaining = r
	} else if n, err := strconv.ParseInt(cmp.Or(f.remaining, f.xRemaining), 10, 64); err == nil {
		s.remaining = n
	}
	if t, ok := sfParam(f.rateLimit, "t"); ok {
		s.reset = resetIn(t)
	} else if n, err := strconv.ParseInt(cmp.Or(f.reset, f.xReset), 10, 64); err == nil {
		if n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
			n -= time.Now().Unix()
		}
		s.reset = resetIn(max(n, 0))
	}
	return s
}

// expectation is what the audit holds an endpoint to.
type expectation struct {
	policy algorithms.Policy
	// algorithm is the registry name of the algorithm the endpoint claims;
	// empty for the sliding-window rule.
	algorithm string
	guarantee algorithms.Guarantee
	// id names the limit in reasons and reports: 5/1s, or a rules limit's
	// ID; names are the names a response's headers may give it (a rules
	// limit's ID and name); descriptor is the rule it is on, in words.
	id         string
	names      []string
	descriptor string
	// quota is the limit as the gateway advertises it (before cost), and
	// burst its burst in the same units (0 when it has none); cost is what
	// one request takes (1 but in rules); shadow and unlimited as in
	// rules.Limit.
	quota             int64
	burst             int64
	cost              int64
	shadow, unlimited bool
	// refusedMaySpend says a request refused may still have spent this
	// limit (another limit refused it): the checks of remaining count
	// every request, not only those admitted. refusedAtZero says a request
	// this limit alone refused must have been told 0 remaining of it (a
	// rate limit service's OVER_LIMIT status).
	refusedMaySpend, refusedAtZero bool
	// unmet says why no request met the limit, when what was sent shows
	// it (sentValues.unmetHint).
	unmet string
	// noPolicies says the responses speak of descriptors, not of policies
	// (a rate limit service's statuses): a limit none of them names is not
	// one the gateway left out.
	noPolicies bool
}

// newExpectation makes the expectation of limit per window under
// algorithm ("" for the sliding-window rule).
func newExpectation(limit int64, window time.Duration, algorithm string) (expectation, error) {
	return expectationOf(algorithms.Policy{Limit: limit, Window: window}, algorithm)
}

// expectationOf makes the expectation of policy p under algorithm (""
// for the sliding-window rule, which has no burst).
func expectationOf(p algorithms.Policy, algorithm string) (expectation, error) {
	e := expectation{policy: p, algorithm: algorithm, guarantee: algorithms.SlidingWindow, quota: p.Limit, burst: p.Burst, cost: 1}
	if algorithm != "" {
		info, ok := algorithms.Lookup(algorithm)
		if !ok || !info.Algorithm {
			return e, field.Errorf("ExpectAlgorithm", "%q: want one of %s", algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
		e.guarantee = info.Guarantee
	}
	if err := algorithms.CheckBurst(algorithm, p); err != nil {
		return e, field.Errorf("ExpectBurst", "%d: a burst is for token-bucket and gcra, not %s", p.Burst, cmp.Or(algorithm, "the sliding-window rule"))
	}
	return e, nil
}

// coverage is what the samples hold of the run.
type coverage struct {
	// from is when they begin to hold every request that can count
	// against a limit (0, or after the warm-up's last response).
	from time.Duration
	// horizon, when not negative, is when samples started to be dropped:
	// checks that need every request up to some time judge only what
	// ended before it.
	horizon time.Duration
	// partial says the samples are one machine's share of consumers that
	// others send too: every admission the run saw is real, so the
	// admission count stays sound, but the checks that need every request
	// of a consumer (remaining, under-admission) are not made.
	partial bool
	// skipUnder, when set, says why under-admission cannot be judged (the
	// samples are partial, or the run was interrupted and the requests in
	// flight then were never answered).
	skipUnder string
}

// audit judges the samples against each expectation, on each consumer's
// own counter (named by name), and makes the verdict of them all.
func auditAll(samples []sample, exps []expectation, consumers int, cov coverage, name func(int32) string) audit.Audit {
	return auditLimits(samples, nil, exps, everyConsumer(samples, len(exps), consumers, name), cov)
}

// overall is the verdict of several limits: the worst of theirs, with the
// reasons of each limit that has it, named when there are several.
func overall(limits []audit.LimitAudit) (audit.Verdict, []string) {
	v := audit.Held
	judged := 0
	for _, l := range limits {
		if l.Verdict == audit.NotJudged {
			continue
		}
		judged++
		if rank(l.Verdict) < rank(v) {
			v = l.Verdict
		}
	}
	reasons := []string{}
	if judged == 0 && len(limits) > 0 {
		v = audit.NoVerdict
		reasons = append(reasons, "no limit the audit could judge: each is shadow, unlimited or of cost 0")
	}
	for _, l := range limits {
		if l.Verdict != v {
			continue
		}
		for _, r := range l.Reasons {
			if len(limits) > 1 {
				r = l.Label() + ": " + r
			}
			reasons = append(reasons, r)
		}
	}
	return v, reasons
}

// rank orders the verdicts, the strongest first: a leak, then what could
// not be judged, then what was not tested, and held last.
func rank(v audit.Verdict) int {
	switch v {
	case audit.Leaked:
		return 0
	case audit.NoVerdict:
		return 1
	case audit.NotReached:
		return 2
	}
	return 3
}

func consumerName(c int32) string { return "consumer-" + strconv.Itoa(int(c)) }
