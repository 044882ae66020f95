package reports

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
)

// What the audit of a bench run found, as the notes and the table say it.

// auditNotes say what the audit found, in prose: per limit, what
// limitNotes say, in one line each when there are several, after a
// headline that counts their verdicts.
func auditNotes(r bench.Result, a *audit.Audit) []string {
	var notes []string
	switch {
	case len(a.Limits) == 0: // bench rls by a configuration no call met
		notes = append(notes, fmt.Sprintf("Audit: %s: %s.", verdictWord(a.Verdict), strings.Join(a.Reasons, "; ")))
	case len(a.Limits) > 1:
		notes = append(notes, auditHead(a))
	}
	for _, l := range a.Limits {
		lines := limitNotes(r, l)
		if len(a.Limits) > 1 {
			lines = []string{strings.Join(lines, " ")} // one line per limit
		}
		notes = append(notes, lines...)
	}
	return notes
}

// auditHead is the headline of an audit of several limits: the verdict
// they share, or how many have each. It never says held when a limit was
// not tested.
func auditHead(a *audit.Audit) string {
	order := []audit.Verdict{audit.Held, audit.NotReached, audit.NoVerdict, audit.Leaked, audit.NotJudged}
	count := map[audit.Verdict]int{}
	for _, l := range a.Limits {
		count[l.Verdict]++
	}
	head := fmt.Sprintf("Audit of %d limits: ", len(a.Limits))
	if count[a.Verdict] == len(a.Limits) {
		return head + verdictWord(a.Verdict) + "."
	}
	var parts []string
	for _, v := range order {
		if n := count[v]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, v))
		}
	}
	return head + strings.Join(parts, ", ") + "."
}

// auditTable is an audit of several limits as a table, a row per limit,
// with what the table cannot say below it: the reasons of every limit
// that did not hold, under-admission, wrong headers, Retry-After. ok is
// false for an audit of one limit or none, which auditNotes say better.
type auditTable struct {
	head    string
	headers []string
	rows    [][]string
	bad     []bool // the row's limit leaked or went untested
	notes   []string
}

func auditTableOf(r bench.Result, a *audit.Audit) (auditTable, bool) {
	if len(a.Limits) < 2 {
		return auditTable{}, false
	}
	w := r.Words()
	headers := strings.ToLower(w.Checks)
	t := auditTable{head: auditHead(a),
		headers: []string{"limit", "rule", "verdict", "most in a window / limit", "denials attributed", "under-admitted", headers}}
	var skipped string
	retryAfter := map[string][]string{}
	var ras []string // the distinct Retry-After lines, in order
	for _, l := range a.Limits {
		// The rule a rules limit is on; what the others allow.
		rule := l.Rule
		if l.Descriptor != "" && l.Descriptor != l.ID {
			rule = l.Descriptor
		}
		t.bad = append(t.bad, l.Verdict != audit.Held && l.Verdict != audit.NotJudged)
		if l.Verdict == audit.NotJudged {
			t.rows = append(t.rows, []string{l.Label(), rule, verdictWord(l.Verdict), "–", "–", "–", "–"})
			t.notes = append(t.notes, fmt.Sprintf("%s: %s: %s; %d requests met it, %d admitted.", l.Label(), verdictWord(l.Verdict),
				strings.Join(l.Reasons, "; "), l.Requests, l.Admitted))
			continue
		}
		under := fmt.Sprintf("%d of %d judged", l.UnderAdmitted, l.DenialsJudged)
		if l.UnderSkipped != "" {
			under, skipped = "not judged", l.UnderSkipped
		}
		h := fmt.Sprintf("%d checked, %d wrong", l.Headers.Checked, l.Headers.Violations)
		if l.Headers.NeverAdvertised != "" {
			h += ", never advertised"
		}
		full, span := l.FullAt, time.Duration(l.FullSpanMillis)*time.Millisecond
		if full == 0 { // a result written before the audit said it
			full, span = l.Limit, time.Duration(l.WindowMillis)*time.Millisecond
		}
		t.rows = append(t.rows, []string{l.Label(), rule, verdictWord(l.Verdict), fmt.Sprintf("%d / %d in %s", l.MostInWindow, full, windowText(span)),
			fmt.Sprintf("%d of %d", l.DenialsAttributed, l.Denials), under, h})
		if l.Verdict != audit.Held {
			n := fmt.Sprintf("%s: %s: %s.", l.Label(), verdictWord(l.Verdict), strings.Join(l.Reasons, "; "))
			if l.Verdict == audit.NoVerdict {
				n += " Statuses seen: " + statusesSeen(r) + "."
			}
			t.notes = append(t.notes, n)
		} else if l.Headers.NeverAdvertised != "" {
			t.notes = append(t.notes, fmt.Sprintf("%s: the gateway %s.", l.Label(), l.Headers.NeverAdvertised))
		}
		if l.UnderSkipped == "" && (l.UnderAdmitted > 0 || l.DenialsUnjudged > 0) {
			t.notes = append(t.notes, l.Label()+": "+underNote(l))
		}
		if l.Headers.Violations > 0 {
			t.notes = append(t.notes, fmt.Sprintf("%s: %s: %d of %d %s checked were wrong (%s).", l.Label(), w.Checks,
				l.Headers.Violations, l.Headers.Checked, w.Answers, l.Headers.Example))
		}
		ra := retryAfterNote(r, l)
		if _, seen := retryAfter[ra]; !seen {
			ras = append(ras, ra)
		}
		retryAfter[ra] = append(retryAfter[ra], l.Label())
	}
	if skipped != "" {
		t.notes = append(t.notes, "Under-admission: not judged ("+skipped+").")
	}
	for _, ra := range ras {
		if len(ras) > 1 {
			ra = strings.Join(retryAfter[ra], ", ") + ": " + ra
		}
		t.notes = append(t.notes, ra)
	}
	return t, true
}

// limitNotes say what the audit found of one limit: its verdict and then,
// unless it could not judge (when it says why, and nothing else), what it
// found of admissions, denials, Retry-After and the headers.
func limitNotes(r bench.Result, l audit.LimitAudit) []string {
	held := "the sliding-window rule"
	if l.Algorithm != "" {
		held = l.Algorithm
	}
	window := time.Duration(l.WindowMillis) * time.Millisecond
	head := fmt.Sprintf("Audit against %d per %s as %s (%s): %s", l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	switch {
	case l.Descriptor != "" && l.Descriptor == l.ID: // a descriptor of bench rls, or a limit named as its rule
		head = fmt.Sprintf("Limit %s, %d per %s as %s (%s): %s", l.ID, l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	case l.Descriptor != "": // a limit of a rules file
		head = fmt.Sprintf("Limit %s (%s), %d per %s as %s (%s): %s", l.ID, l.Descriptor, l.Limit, window, held, l.Rule, verdictWord(l.Verdict))
	}
	got := fmt.Sprintf("got %d through in %s where %d were allowed", l.WorstWindowAdmitted,
		time.Duration(l.WorstSpanMillis)*time.Millisecond, l.WorstSpanAllowed)
	var notes []string
	switch l.Verdict {
	case audit.NotJudged:
		return []string{fmt.Sprintf("%s: %s; %d requests met it, %d admitted.", head, strings.Join(l.Reasons, "; "), l.Requests, l.Admitted)}
	case audit.NoVerdict:
		return []string{fmt.Sprintf("%s: %s. Statuses seen: %s.", head, strings.Join(l.Reasons, "; "), statusesSeen(r))}
	case audit.NotReached:
		notes = append(notes, fmt.Sprintf("%s: %s.", head, strings.Join(l.Reasons, "; ")))
	case audit.Leaked:
		notes = append(notes, fmt.Sprintf("%s: %s %s (%d over).", head, orDash(l.WorstConsumer), got, l.OverAdmitted))
	default:
		notes = append(notes, fmt.Sprintf("%s: the worst consumer, %s, %s; %d of the %d denials were its own (its window full).",
			head, orDash(l.WorstConsumer), got, l.DenialsAttributed, l.Denials))
	}
	notes = append(notes, underNote(l), retryAfterNote(r, l))
	w := r.Words()
	headers := w.Checks
	h := fmt.Sprintf("%s: %d %s checked, %d violations", headers, l.Headers.Checked, w.Answers, l.Headers.Violations)
	if l.Headers.Example != "" {
		h += " (" + l.Headers.Example + ")"
	}
	if l.Headers.NeverAdvertised != "" && l.Verdict != audit.NotReached {
		h += "; the gateway " + l.Headers.NeverAdvertised
	}
	notes = append(notes, h+".")
	if l.Headers.Named > 0 {
		notes = append(notes, fmt.Sprintf("violated-policies: named it in %d 429s.", l.Headers.Named))
	}
	return notes
}

// windowText is a window as the rules write it: 1s, 10m, 1h (not 1h0m0s).
func windowText(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if s != d.String() {
		s += "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// retryAfterNote says what the probes found of one limit's Retry-After
// (bench rls: duration_until_reset).
func retryAfterNote(r bench.Result, l audit.LimitAudit) string {
	retryAfter := r.Words().Wait
	ra := l.RetryAfter
	switch {
	case ra.Honest == nil:
		return retryAfter + ": not probed (" + orDash(ra.Skipped) + ")."
	case *ra.Honest:
		return fmt.Sprintf("%s: honest in %d probes (each admitted at its first try after the advertised time).", retryAfter, ra.Probes)
	}
	return fmt.Sprintf("%s: FALSE in %d probes: %s.", retryAfter, ra.Probes, ra.Fault())
}

// verdictWord is a verdict as the notes shout it.
func verdictWord(v audit.Verdict) string {
	return strings.ToUpper(string(v))
}

// underNote says what the audit found of the limit's denials.
func underNote(l audit.LimitAudit) string {
	switch {
	case l.UnderSkipped != "":
		return "Under-admission: not judged (" + l.UnderSkipped + ")."
	case l.Denials == 0:
		return "Under-admission: no request was denied."
	}
	var s string
	switch {
	case l.DenialsJudged == 0:
		s = fmt.Sprintf("Under-admission: none of the %d denials could be judged", l.Denials)
	case l.UnderAdmitted == 0:
		s = fmt.Sprintf("Under-admission: none of the %d denials judged (of %d) would have been admitted", l.DenialsJudged, l.Denials)
	default:
		s = fmt.Sprintf("UNDER-ADMITTING: %d of the %d denials judged (%.1f%%) would have been admitted by the rule; the most, %d, to %s",
			l.UnderAdmitted, l.DenialsJudged, 100*l.UnderAdmittedShare, l.WorstUnderAdmitted, l.WorstUnderConsumer)
	}
	if l.DenialsJudged > 0 && l.DenialsUnjudged > 0 {
		s += fmt.Sprintf("; %d not judged", l.DenialsUnjudged)
	}
	if l.UnjudgedReason != "" {
		s += ": " + l.UnjudgedReason
	}
	return s + "."
}
