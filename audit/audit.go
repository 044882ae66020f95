// Package audit is the admission audit: the judge of what a rate limiter
// admitted against what it promised. It is a function of the samples (what
// each consumer sent, what was answered, when; the load engine records
// them, in package bench) and of the expectations (--expect-limit's
// limits, a gateway's rules file, a rate limit service's configuration):
// it meets each sample with the limits it met and their counters, tells
// which limit justifies each denial, and judges each limit on its own
// (held only when the load pushed it to its cap, leaked, not reached),
// with its under-admission, its rate-limit headers and its Retry-After,
// for which it asks the engine for probes (Prober). The same judge serves
// bench http, bench rls and report merge, which re-judges several runs'
// samples as one (Merge). It returns plain data and never prints.
package audit

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// Verdict is what an audit concluded about a limit, or about all of them.
type Verdict string

// The verdicts, from the strongest: an over-admission is a fact whatever
// else the audit found, so Leaked beats the others; NoVerdict and
// NotReached are never Held.
const (
	// Leaked: a consumer was admitted beyond the rule.
	Leaked Verdict = "leaked"
	// NoVerdict: the audit saw nothing it could judge, or saw that the
	// gateway does not keep each identity's limit apart; Reasons says which.
	NoVerdict Verdict = "no verdict"
	// NotReached: the load never pushed the limit to its cap, so nothing
	// showed that the gateway enforces it: no denial was the limit's own
	// (LimitAudit.DenialsAttributed). Reasons says how far the load got.
	NotReached Verdict = "not reached"
	// Held: the load pushed the limit to its cap (some of its denials were
	// its own), and no consumer got beyond the rule.
	Held Verdict = "held"
	// NotJudged: a limit the audit reports and never judges (shadow,
	// unlimited, cost 0); it never makes the verdict of the run.
	NotJudged Verdict = "not judged"
)

// Audit is what the audit found. It runs when ExpectLimit is set.
type Audit struct {
	// Verdict is the worst of the limits' verdicts (leaked, no verdict,
	// not reached, held), and Reasons say why in words (when there are
	// several limits, each names its limit); none when it held. It is held
	// only when every limit judged held.
	Verdict Verdict  `json:"verdict"`
	Reasons []string `json:"reasons"`
	// Samples is the number of requests the audit judged: responses and
	// transport errors.
	Samples int64 `json:"samples"`
	// CappedFromMillis, when not null, is when the audit stopped keeping
	// requests (it keeps at most 5,000,000), since the measured run began:
	// what came after was not judged.
	CappedFromMillis *int64 `json:"capped_from_ms"`
	// CompleteFromMillis is from when the samples hold every request of
	// the run that could count against a limit, since the measured run
	// began: 0, or when the last warm-up response came back; for a merge,
	// the latest such time of its runs, plus the clock tolerance. Only
	// denials whose whole lookback lies after it are judged for
	// under-admission.
	CompleteFromMillis int64 `json:"complete_from_ms"`
	// Limits holds what the audit found for each limit: each of
	// --expect-limit's, or each of the rules file's (--expect-rules), in
	// order.
	Limits []LimitAudit `json:"limits"`
}

// LimitAudit is what the audit found for one limit.
type LimitAudit struct {
	// ID names the limit: LIMIT/WINDOW (5/1s, 100/1m:gcra) for
	// --expect-limit, the limit's ID for --expect-rules; Descriptor is the
	// rule it is on (header:X-Consumer-Id > path=/search), empty for
	// --expect-limit. Shadow and Unlimited are the rules' own (NotJudged).
	ID         string `json:"id"`
	Descriptor string `json:"descriptor,omitempty"`
	Shadow     bool   `json:"shadow,omitempty"`
	Unlimited  bool   `json:"unlimited,omitempty"`
	// Requests counts the requests that met the limit, and Admitted their
	// 2xx: each counts against every limit it met.
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	// Cost is what one request takes of a rules limit (1 but in rules; 0
	// checks without consuming).
	Cost int64 `json:"cost"`
	// Limit per WindowMillis is the limit in whole requests (a rules
	// limit's requests per unit over its cost).
	Limit        int64 `json:"limit"`
	WindowMillis int64 `json:"window_ms"`
	// Burst is, for token-bucket and gcra, the most the limit admits at
	// one instant, in its own units as the rules or --expect-limit give it
	// (over Cost in whole requests); omitted when it is the limit.
	Burst int64 `json:"burst,omitempty"`
	// Quota is the limit in units per WindowMillis, when a request takes
	// several (Cost above 1): a token bucket, GCRA or sliding counter
	// admits by units, which Limit, rounded down, does not tell.
	Quota int64 `json:"quota,omitempty"`
	// Algorithm is the algorithm the endpoint was held to (--expect-algorithm);
	// empty for the sliding-window rule of --expect-limit alone. Rule says
	// in words what its guarantee allows.
	Algorithm string `json:"algorithm"`
	Rule      string `json:"rule"`
	// Verdict is this limit's, and Reasons say why (none when it held).
	Verdict Verdict  `json:"verdict"`
	Reasons []string `json:"reasons"`
	// Consumers counts the consumers (counters) that got a response.
	Consumers int `json:"consumers"`
	// MostInWindow is how far the load got: the most 2xx one counter got
	// whose whole flights lie in one span of FullSpanMillis (less a
	// millisecond), against FullAt, how many fill the limit's window: a
	// window and the limit, but for a bucket whose burst is not its limit,
	// its lookback (the time the burst takes to refill) and the burst.
	MostInWindow   int64 `json:"most_in_window"`
	FullAt         int64 `json:"full_at"`
	FullSpanMillis int64 `json:"full_span_ms"`
	// WorstConsumer had the span of time in which it was admitted the most
	// beyond what the rule allows: WorstWindowAdmitted successes in
	// WorstSpanMillis, where WorstSpanAllowed were allowed; OverAdmitted is
	// the difference when positive. Only responses whose whole flight (sent
	// to received) lies inside the span count, so a latency can never make
	// an honest limiter look leaky. Under the sliding-window rule the span
	// is a window less a millisecond, for limiters that keep whole
	// milliseconds.
	WorstConsumer       string `json:"worst_consumer"`
	WorstWindowAdmitted int64  `json:"worst_window_admitted"`
	WorstSpanMillis     int64  `json:"worst_span_ms"`
	WorstSpanAllowed    int64  `json:"worst_span_allowed"`
	OverAdmitted        int64  `json:"over_admitted"`
	// Denials counts the 429s of the requests that met the limit.
	//
	// A denial is justified by a limit whose own window was full on its
	// own counter: at least as many 2xx as the guarantee allows had flights
	// lying wholly within the limit's lookback (its memory, a window or
	// two) before the denial's decision. DenialsAttributed counts those
	// that only this limit can have made: it justifies them, and no other
	// limit the request met was full or may have been (one whose lookback
	// reaches before what the samples hold is taken by what they show of
	// it). They show that the load tested the limit.
	Denials           int64 `json:"denials"`
	DenialsAttributed int64 `json:"denials_attributed"`
	// DenialsJudged counts the denials judged for under-admission (see
	// UnderSkipped): those some limit justifies or may have made, which
	// are not under-admission, and those every limit the request met would
	// surely have admitted, which are. DenialsElsewhere counts the judged
	// denials that another limit justifies or may have made, and this one
	// does not alone.
	DenialsJudged    int64 `json:"denials_judged"`
	DenialsElsewhere int64 `json:"denials_elsewhere"`
	// DenialsUnjudged counts the denials judged neither way: no limit
	// justifies them, and what some limit counted is not known (its
	// lookback reaches before the samples begin, or past where they stop).
	// UnjudgedReason says which, and what would make them judgeable. They
	// never fail FailOnUnder by themselves.
	DenialsUnjudged int64  `json:"denials_unjudged"`
	UnjudgedReason  string `json:"unjudged_reason,omitempty"`
	// UnderAdmitted counts the judged denials that every limit the request
	// met would surely have admitted: for each, fewer than its limit of
	// the counter's other requests (any but a 429, a transport error
	// included) had flights that reach into its lookback before the
	// denial's decision. UnderAdmittedShare is its share of DenialsJudged,
	// and WorstUnderConsumer had the most of them, WorstUnderAdmitted.
	UnderAdmitted      int64   `json:"under_admitted"`
	UnderAdmittedShare float64 `json:"under_admitted_share"`
	WorstUnderConsumer string  `json:"worst_under_consumer"`
	WorstUnderAdmitted int64   `json:"worst_under_admitted"`
	// UnderSkipped says why under-admission was not judged, if so.
	UnderSkipped string `json:"under_skipped,omitempty"`
	// SharedLimit is set when the gateway seems to share one limit across
	// the identities sent: several consumers were denied what their own
	// limit would have admitted, and the admissions of all of them taken
	// together never went over one consumer's limit and account for
	// (nearly) every such denial. The verdict is then NoVerdict.
	SharedLimit bool `json:"shared_limit"`
	// WorstConsumers sums up the worst consumers, at most ten: the most
	// over-admitted first, then the most under-admitted, then those with
	// no 2xx.
	WorstConsumers []ConsumerAudit `json:"worst_consumers"`
	RetryAfter     RetryAfterAudit `json:"retry_after"`
	Headers        HeadersAudit    `json:"headers"`
}

// ConsumerAudit is one consumer's part of a LimitAudit.
type ConsumerAudit struct {
	Consumer string `json:"consumer"`
	// Admitted counts its 2xx, Denied its 429s, and Failed its other
	// responses and transport errors.
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	Failed   int64 `json:"failed"`
	// OverAdmitted is how far its worst span went beyond the rule;
	// UnderAdmitted counts its denials that the rule would have admitted.
	OverAdmitted  int64 `json:"over_admitted"`
	UnderAdmitted int64 `json:"under_admitted"`
}

// RetryAfterAudit is what the Retry-After probes found.
type RetryAfterAudit struct {
	// Probes is how many denied consumers were asked again around their
	// advertised Retry-After.
	Probes int `json:"probes"`
	// MaxErrorMillis is how long after the advertised time the worst
	// probe was admitted, when it was denied at its first try after it
	// (0 when every probe was admitted at its first try).
	MaxErrorMillis int64 `json:"max_error_ms"`
	// Early counts the probes admitted, reply and all, a second or more
	// before their advertised time: a Retry-After longer than the wait.
	Early int `json:"early"`
	// Honest is false when a consumer was still denied after its
	// Retry-After, or admitted a whole second before it; null when no
	// probe was made (Skipped says why).
	Honest *bool `json:"honest"`
	// Skipped says why probes could not be made, if so.
	Skipped string `json:"skipped,omitempty"`
}

// HeadersAudit is what the checks of the rate-limit headers found.
type HeadersAudit struct {
	// Checked is the number of responses whose rate-limit headers were read.
	Checked int64 `json:"checked"`
	// Violations counts advertised limits other than the expected one,
	// remaining counts above the limit, remaining counts that fall by
	// more than the admissions in between, successes right after a
	// response that said 0 remaining (see remainingChecks), and 429s
	// whose violated-policies named this limit wrongly (checkViolated).
	Violations int64 `json:"violations"`
	// Named counts the 429s whose problem body named this limit in its
	// violated-policies, each checked (checkViolated).
	Named int64 `json:"named,omitempty"`
	// Example describes the first violation.
	Example string `json:"example,omitempty"`
	// NeverAdvertised, when set, says that the responses to the requests
	// that met the limit named other policies in RateLimit-Policy, and
	// never this one (by name, or by quota and window): a strong sign that
	// the gateway leaves the limit out. It is no violation: a gateway may
	// advertise some of its policies.
	NeverAdvertised string `json:"never_advertised,omitempty"`
	// Partial, when set, says why the checks that need every response
	// of a consumer (how remaining falls, and remaining 0) were not made:
	// other load machines send the same consumers. report merge makes
	// them over every machine's responses.
	Partial string `json:"partial,omitempty"`
}

// Label names the limit in messages: its ID, or LIMIT per WINDOW when it
// has none (a result written before limits had IDs).
func (l LimitAudit) Label() string {
	if l.ID != "" {
		return l.ID
	}
	return fmt.Sprintf("%d per %s", l.Limit, time.Duration(l.WindowMillis)*time.Millisecond)
}

// Fault says in words what the probes found wrong with the Retry-After,
// when they found it false: "" when not.
func (r RetryAfterAudit) Fault() string {
	if r.Honest == nil || *r.Honest {
		return ""
	}
	var faults []string
	if r.Early > 0 {
		faults = append(faults, fmt.Sprintf("%d of %d probes were admitted a second or more before it", r.Early, r.Probes))
	}
	if r.MaxErrorMillis > 0 {
		faults = append(faults, fmt.Sprintf("a probe was still denied %d ms after it", r.MaxErrorMillis))
	}
	if len(faults) == 0 {
		return "false" // a run merged from versions that kept no reason
	}
	return strings.Join(faults, ", and ")
}

// Policy is the limit the audit expected, as a saved result says it: an
// error when no run can have expected it (which the guarantees, made for
// valid policies, cannot judge by).
func (a *LimitAudit) Policy() (algorithms.Policy, error) {
	ms := a.WindowMillis
	// Burst is in the limit's units, Limit in whole requests.
	p := algorithms.Policy{Limit: a.Limit, Burst: a.Burst / max(a.Cost, 1)}
	if ms >= 1 && ms <= math.MaxInt64/int64(time.Millisecond) {
		p.Window = time.Duration(ms) * time.Millisecond
		if p.Validate() == nil {
			return p, nil
		}
	}
	return p, fmt.Errorf("audit of %d per %d ms: not a limit a run can expect", a.Limit, ms)
}
