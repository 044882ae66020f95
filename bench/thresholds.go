package bench

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/plural"
)

// Thresholds are the limits a run must stay within; each is off at its
// zero value.
type Thresholds struct {
	// MaxP99 is the highest acceptable p99 latency of the responses; 0 for
	// none.
	MaxP99 time.Duration
	// MaxErrorRate, when not nil, is the highest acceptable share (0 to 1)
	// of failed requests among the measured ones: transport errors, and
	// responses other than 2xx and 429 (Result.Failures). new(0.0) fails a
	// run with any; nil for none.
	MaxErrorRate *float64
	// FailOnLeak fails a run whose audit did not find every limit it
	// judges held: a consumer over a limit (leaked), a limit the load never
	// tested (not reached) or that the audit could not judge (no verdict),
	// unless allowed (AllowUntested, AllowNoVerdict), a limit shared across
	// the identities sent, a false Retry-After or wrong rate-limit headers.
	FailOnLeak bool
	// AllowNoVerdict lets FailOnLeak pass every limit that went untested:
	// not reached, or no verdict; a limit shared across the identities
	// still fails.
	AllowNoVerdict bool
	// AllowUntested names the limits, as the audit labels them
	// (LimitAudit.Label: 5/1s, or a rules limit's ID), that FailOnLeak lets
	// go untested; a limit shared across the identities still fails.
	AllowUntested []string
	// FailOnUnder, when not nil, is the highest acceptable share (0 to 1)
	// of a limit's judged denials that its rule would have admitted
	// (LimitAudit.UnderAdmittedShare); a limit with denials of which none
	// could be judged fails it too. nil for none.
	FailOnUnder *float64
}

// Validate checks t. Errors are *field.Error.
func (t Thresholds) Validate() error {
	switch {
	case t.MaxP99 < 0:
		return field.Errorf("MaxP99", "must not be negative (got %s)", t.MaxP99)
	case t.MaxErrorRate != nil && (*t.MaxErrorRate < 0 || *t.MaxErrorRate > 1):
		return field.Errorf("MaxErrorRate", "must be between 0 and 1 (got %g)", *t.MaxErrorRate)
	case t.FailOnUnder != nil && (*t.FailOnUnder < 0 || *t.FailOnUnder > 1):
		return field.Errorf("FailOnUnder", "must be between 0 and 1 (got %g)", *t.FailOnUnder)
	case t.AllowNoVerdict && !t.FailOnLeak:
		return field.Errorf("AllowNoVerdict", "needs {FailOnLeak}")
	case len(t.AllowUntested) > 0 && !t.FailOnLeak:
		return field.Errorf("AllowUntested", "needs {FailOnLeak}")
	}
	return nil
}

// ValidateNames checks that AllowUntested names only limits of ids, the
// limits the audit may judge. Errors are *field.Error.
func (t Thresholds) ValidateNames(ids []string) error {
	for _, name := range t.AllowUntested {
		if !slices.Contains(ids, name) {
			if len(ids) == 0 {
				return field.Errorf("AllowUntested", "%q: the audit judges no limit", name)
			}
			return field.Errorf("AllowUntested", "%q is not a limit the audit judges (its limits: %s)", name, strings.Join(ids, ", "))
		}
	}
	return nil
}

// allowsUntested says whether FailOnLeak lets limit l go untested.
func (t Thresholds) allowsUntested(l audit.LimitAudit) bool {
	return t.AllowNoVerdict || slices.Contains(t.AllowUntested, l.Label())
}

// Crossed says which thresholds r crossed, one error each naming its field
// of Thresholds; none when it held them all. With FailOnLeak or
// FailOnUnder and no audit (a merge that could not audit), it says that.
func (t Thresholds) Crossed(r Result) []*field.Error {
	var crossed []*field.Error
	if p99 := time.Duration(r.LatencyMicros.P99) * time.Microsecond; t.MaxP99 > 0 && p99 > t.MaxP99 {
		crossed = append(crossed, field.Errorf("MaxP99", ": p99 %s is above %s", p99, t.MaxP99))
	}
	if t.MaxErrorRate != nil && r.Requests > 0 {
		if rate := float64(r.Failures()) / float64(r.Requests); rate > *t.MaxErrorRate {
			crossed = append(crossed, field.Errorf("MaxErrorRate", ": %.4f of requests failed, above %g (%s)", rate, *t.MaxErrorRate, failuresText(r)))
		}
	}
	if f := r.InFlightAudit; f != nil {
		crossed = append(crossed, t.crossedInFlight(*f)...)
	}
	a := r.Audit
	if a == nil && r.InFlightAudit != nil {
		return crossed // the in-flight audit alone
	}
	if a == nil {
		for name, on := range map[string]bool{"FailOnLeak": t.FailOnLeak, "FailOnUnder": t.FailOnUnder != nil} {
			if on {
				crossed = append(crossed, field.Errorf(name, ": there is no audit (%s)", cmp.Or(r.AuditNote, "the run audited nothing")))
			}
		}
		return crossed
	}
	if len(a.Limits) == 0 && a.Verdict == audit.NoVerdict && t.FailOnLeak && !t.AllowNoVerdict {
		// bench rls by a configuration that no call met: nothing judged.
		crossed = append(crossed, field.Errorf("FailOnLeak", ": no verdict: %s", strings.Join(a.Reasons, "; ")))
	}
	for _, l := range a.Limits {
		if l.Verdict == audit.NotJudged {
			continue
		}
		var found []*field.Error
		if t.FailOnLeak {
			found = append(found, crossedLeak(l, r, t.allowsUntested(l))...)
		}
		if t.FailOnUnder != nil {
			found = append(found, crossedUnder(l, *t.FailOnUnder)...)
		}
		if len(a.Limits) > 1 || r.Command == "bench_rls" { // say which limit (bench rls: which descriptor)
			for _, e := range found {
				e.Reason = ": " + l.Label() + e.Reason
			}
		}
		crossed = append(crossed, found...)
	}
	return crossed
}

// crossedLeak is what FailOnLeak finds wrong with one limit of r's audit;
// untested says it may go untested.
func crossedLeak(l audit.LimitAudit, r Result, untested bool) []*field.Error {
	var crossed []*field.Error
	switch {
	case l.Verdict == audit.Leaked:
		crossed = append(crossed, field.Errorf("FailOnLeak", ": %s got %d through in %s, over the %d allowed (%s)",
			l.WorstConsumer, l.WorstWindowAdmitted, time.Duration(l.WorstSpanMillis)*time.Millisecond, l.WorstSpanAllowed, l.Rule))
	case l.Verdict == audit.NoVerdict && (l.SharedLimit || !untested):
		crossed = append(crossed, field.Errorf("FailOnLeak", ": no verdict: %s (statuses seen: %s)", strings.Join(l.Reasons, "; "), seenText(r)))
	case l.Verdict == audit.NotReached && !untested:
		crossed = append(crossed, field.Errorf("FailOnLeak", ": not reached: %s ({AllowUntested} %s lets it go untested)",
			strings.Join(l.Reasons, "; "), l.Label()))
	}
	w := r.Words()
	if h := l.RetryAfter.Honest; h != nil && !*h {
		crossed = append(crossed, field.Errorf("FailOnLeak", ": %s was false: %s", w.Wait, l.RetryAfter.Fault()))
	}
	if l.Headers.Violations > 0 {
		crossed = append(crossed, field.Errorf("FailOnLeak", ": %d %s with wrong %s (%s)",
			l.Headers.Violations, w.Answers, w.Fields, l.Headers.Example))
	}
	return crossed
}

// crossedUnder is what FailOnUnder finds wrong with one limit: a share of
// false denials above most, or denials of which none could be judged for
// a reason of the run (UnderSkipped: the gate does not pass what it could
// not see). Denials that a limit's lookback, reaching before the samples,
// left unjudged never fail it by themselves: the report says what would
// judge them.
func crossedUnder(l audit.LimitAudit, most float64) []*field.Error {
	switch {
	case l.Denials > 0 && l.UnderSkipped != "":
		return []*field.Error{field.Errorf("FailOnUnder", ": none of the %d denials could be judged (%s)", l.Denials, l.UnderSkipped)}
	case l.DenialsJudged > 0 && l.UnderAdmittedShare > most:
		return []*field.Error{field.Errorf("FailOnUnder", ": %d of the %d denials judged (%.1f%%) would have been admitted (%s), above %g; the most, %d, to %s",
			l.UnderAdmitted, l.DenialsJudged, 100*l.UnderAdmittedShare, l.Rule, most, l.WorstUnderAdmitted, l.WorstUnderConsumer)}
	}
	return nil
}

// failuresText names the failures of r: "errors by status: 400 × 240;
// transport errors: 3".
func failuresText(r Result) string {
	var parts []string
	if s := r.FailedStatuses(); s != "" {
		parts = append(parts, "errors by status: "+s)
	}
	if r.Errors > 0 {
		parts = append(parts, "transport errors: "+kindsText(r.ErrorKinds))
	}
	return strings.Join(parts, "; ")
}

// seenText lists every status r got, and its transport errors.
func seenText(r Result) string {
	s := cmp.Or(plural.Tally(r.StatusCounts, func(string) bool { return true }), "none")
	if r.Errors > 0 {
		s += "; transport errors: " + kindsText(r.ErrorKinds)
	}
	return s
}

// kindsText lists transport errors by kind: "refused 3, timeout 1".
func kindsText(kinds map[string]ErrorKind) string {
	counts := map[string]int64{}
	for k, e := range kinds {
		counts[k] = e.Count
	}
	return strings.ReplaceAll(plural.Tally(counts, func(string) bool { return true }), " × ", " ")
}

// crossedInFlight is what FailOnLeak and FailOnUnder find wrong with the
// in-flight audit: over-admission, a verdict other than held (not reached
// and no verdict as AllowNoVerdict allows), a share of wrongful denials
// above FailOnUnder, or denials of which none could be judged.
func (t Thresholds) crossedInFlight(f audit.InFlightAudit) []*field.Error {
	var crossed []*field.Error
	if t.FailOnLeak {
		switch {
		case f.Verdict == audit.Leaked:
			crossed = append(crossed, field.Errorf("FailOnLeak", ": in flight: %s", strings.Join(f.Reasons, "; ")))
		case f.Verdict != audit.Held && !t.AllowNoVerdict:
			crossed = append(crossed, field.Errorf("FailOnLeak", ": in flight: %s: %s", f.Verdict, strings.Join(f.Reasons, "; ")))
		}
	}
	if t.FailOnUnder != nil {
		switch {
		case f.Denied > 0 && f.UnderSkipped != "":
			crossed = append(crossed, field.Errorf("FailOnUnder", ": in flight: none of the %d denials could be judged (%s)", f.Denied, f.UnderSkipped))
		case f.DenialsJudged > 0 && f.UnderAdmittedShare > *t.FailOnUnder:
			crossed = append(crossed, field.Errorf("FailOnUnder", ": in flight: %d of the %d denials judged (%.1f%%) came when fewer than %d could be held, above %g; the most, %d, to %s",
				f.UnderAdmitted, f.DenialsJudged, 100*f.UnderAdmittedShare, f.Limit, *t.FailOnUnder, f.WorstUnderAdmitted, f.WorstUnderConsumer))
		}
	}
	return crossed
}
