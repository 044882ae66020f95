package audit

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/ratelab/ratelab/internal/plural"
)

// Meeting says which limits each sample met, and on which counter of each:
// requests that share a counter are judged together.
type Meeting struct {
	// met[i] is the mask of the limits sample i met (bit k: limit k).
	met []uint64
	// of[k] is limit k's part: the samples that met it and their counters.
	of []limitCounters
}

// limitCounters are the samples that met one limit (idx, in the samples'
// order), each with the counter it counts against (0 … len(names)-1), and
// the counters' names.
type limitCounters struct {
	idx, counter []int32
	names        []string
	// consumers says that every sample met the limit on its consumer's
	// counter (idx is every index, counter every consumer).
	consumers bool
	// keys are, for an audit by rules, the counters' Redis keys
	// (rules.Hit.Key): one counter whatever run met it.
	keys []string
}

// counterBook builds a meeting whose counters have keys (an audit by
// rules, or by a rate limit service's descriptors): requests that name one
// key count against one counter, whichever consumer sent them.
type counterBook struct {
	m        Meeting
	counters []map[string]int32 // per limit, counter by key
	owner    [][]int32          // per limit, each counter's consumer; -2 when several
	name     func(int32) string
}

func newCounterBook(samples, limits int, name func(int32) string) *counterBook {
	b := &counterBook{m: Meeting{met: make([]uint64, samples), of: make([]limitCounters, limits)},
		counters: make([]map[string]int32, limits), owner: make([][]int32, limits), name: name}
	for k := range b.m.of {
		b.m.of[k].keys = []string{}
		b.counters[k] = map[string]int32{}
	}
	return b
}

// counter is limit k's counter of key, which consumer's request met: a
// new one, named after the consumer, when the key is new; named by label
// once several consumers met it.
func (b *counterBook) counter(k int32, key, label string, consumer int32) int32 {
	lc := &b.m.of[k]
	c, seen := b.counters[k][key]
	switch {
	case !seen:
		c = int32(len(lc.names))
		b.counters[k][key] = c
		lc.names = append(lc.names, b.name(consumer))
		lc.keys = append(lc.keys, key)
		b.owner[k] = append(b.owner[k], consumer)
	case b.owner[k][c] != consumer && b.owner[k][c] != -2:
		b.owner[k][c] = -2
		lc.names[c] = label
	}
	return c
}

// add notes that sample i met limit k on its counter c.
func (b *counterBook) add(i int, k, c int32) {
	b.m.met[i] |= 1 << k
	lc := &b.m.of[k]
	lc.idx = append(lc.idx, int32(i))
	lc.counter = append(lc.counter, c)
}

// EveryConsumer is the meeting of limits that each consumer has its own of,
// and that every request meets: --expect-limit's. name names the consumers.
func EveryConsumer(samples []Sample, limits, consumers int, name func(int32) string) Meeting {
	m := Meeting{met: make([]uint64, len(samples)), of: make([]limitCounters, limits)}
	all := uint64(1)<<limits - 1
	idx := make([]int32, len(samples))
	counter := make([]int32, len(samples))
	for i, s := range samples {
		m.met[i] = all
		idx[i], counter[i] = int32(i), s.Consumer
	}
	names := make([]string, consumers)
	for c := range names {
		names[c] = name(int32(c))
	}
	for k := range m.of {
		m.of[k] = limitCounters{idx: idx, counter: counter, names: names, consumers: true}
	}
	return m
}

// Judge judges a run's samples (rec) against each expectation, each on
// its own counters (m), with what their answers advertised and the
// policies their 429s named as violated, and makes the verdict of them
// all; name names the consumers in the faults of violated policies.
func Judge(rec Record, exps []Expectation, m Meeting, cov Coverage, name func(int32) string) Audit {
	a := auditLimits(rec.Samples, rec.advs, exps, m, cov)
	checkViolated(&a, rec.Samples, rec.advs, exps, m, name)
	return a
}

// Met counts the samples that met limit k, and Counters its counters.
func (m Meeting) Met(k int) int { return len(m.of[k].idx) }

// Counters counts limit k's counters: those the samples that met it
// counted against.
func (m Meeting) Counters(k int) int { return len(m.of[k].names) }

// auditLimits judges the samples against several limits at once, each by
// its own guarantee on its own counters (m), and makes the verdict of them
// all. advs holds the samples' adverts.
//
// A request admitted counts against every limit it met. A request denied
// is attributed to the limit whose own full window alone justifies it
// (see attribution.go); one that no limit justifies or may have made, and
// that every limit it met would surely have admitted, is under-admission.
// Shadow, unlimited and cost 0 limits are reported, never judged.
func auditLimits(samples []Sample, advs []advert, exps []Expectation, m Meeting, cov Coverage) Audit {
	complete := (max(cov.from, 0) + time.Millisecond - 1) / time.Millisecond
	a := Audit{Samples: int64(len(samples)), Reasons: []string{}, CompleteFromMillis: int64(complete)}
	if cov.horizon >= 0 {
		ms := cov.horizon.Milliseconds()
		a.CappedFromMillis = &ms
	}
	var enforcing uint64
	for k, exp := range exps {
		if exp.judged() {
			enforcing |= 1 << k
		}
	}
	// What each limit's own counter shows at each denial.
	book := newDenialBook(samples)
	for k, exp := range exps {
		if !exp.judged() {
			continue
		}
		forCounters(samples, m.of[k], func(ss []Sample, idx []int32) {
			checkDenials(ss, exp, cov, func(i int, st limitState) { book.note(idx[i], k, st) })
		})
	}
	lookbacks := make([]time.Duration, len(exps))
	for k, exp := range exps {
		_, lookbacks[k], _ = exp.fullWindow()
	}
	book.markSuspects(m, enforcing, lookbacks)
	for k, exp := range exps {
		lc := m.of[k]
		var proj []Sample
		if len(exps) == 1 && lc.consumers {
			// The one limit, on the consumers' own counters: the samples
			// are projected where they are (what they read is not lost:
			// their adverts stay).
			proj = samples
		} else {
			proj = make([]Sample, len(lc.idx))
		}
		var notes denialNotes
		var rivals, unsure uint64
		var uncounted [MaxLimits]int64
		var late int64
		for j, i := range lc.idx {
			s := samples[i]
			s.Consumer = lc.counter[j]
			if s.Denied() && exp.judged() {
				v := book.view(i, k, m.met[i]&enforcing, cov.skipUnder != "")
				s.judgement, s.otherMayDeny = v.judgement, v.otherMayDeny
				if v.rivals != 0 {
					notes.sharedFull++
					rivals, unsure = rivals|v.rivals, unsure|v.unsure
				}
				switch {
				case v.judgement != unjudged:
				case cov.horizon >= 0 && s.Done >= cov.horizon:
					late++
				default:
					for u := v.uncounted; u != 0; u &= u - 1 {
						uncounted[bits.TrailingZeros64(u)]++
					}
				}
			}
			project(&s, advs, k, m.met[i], enforcing, exps)
			proj[j] = s
		}
		notes.rivals, notes.unsure = limitIDs(rivals, exps), limitIDs(unsure, exps)
		if cov.skipUnder == "" {
			notes.unjudged = unjudgedReason(&uncounted, late, exps, cov)
		}
		l := limitLine(proj, exp, lc.names, cov, len(samples) > 0, notes)
		l.ID, l.Descriptor, l.Shadow, l.Unlimited, l.Cost, l.Requests = exp.ID, exp.descriptor, exp.shadow, exp.unlimited, exp.cost, int64(len(proj))
		l.Burst = exp.burst
		if _, cost := exp.units(); cost > 1 {
			l.Quota = exp.quota
		}
		for _, s := range proj {
			if s.OK() {
				l.Admitted++
			}
		}
		if exp.judged() {
			if never := neverAdvertised(samples, advs, lc, k, exps); never != "" {
				l.Headers.NeverAdvertised = never
				if l.Verdict == NotReached || l.Verdict == NoVerdict {
					l.Reasons = append(l.Reasons, "the gateway "+never)
				}
			}
		}
		a.Limits = append(a.Limits, l)
	}
	a.Verdict, a.Reasons = overall(a.Limits)
	return a
}

// limitLine is what the audit found of one limit, from the samples that
// met it, projected on its counters (named by names). sent says the run
// sent requests at all; notes are what its denials say beyond counts.
func limitLine(proj []Sample, exp Expectation, names []string, cov Coverage, sent bool, notes denialNotes) LimitAudit {
	name := func(c int32) string { return names[c] }
	blank := LimitAudit{Limit: exp.policy.Limit, WindowMillis: exp.policy.Window.Milliseconds(), Algorithm: exp.algorithm,
		Rule: exp.rule(), WorstConsumers: []ConsumerAudit{}}
	switch {
	case !exp.judged():
		l := blank
		if exp.unlimited {
			l.Rule = "unlimited"
		}
		l.Verdict, l.Reasons, l.Consumers = NotJudged, []string{exp.unjudgedReason()}, len(names)
		for _, s := range proj {
			if s.Denied() {
				l.Denials++
			}
		}
		return l
	case len(proj) == 0 && sent:
		l := blank
		l.Verdict, l.Reasons = NoVerdict, []string{"no request sent met it: " + cmp.Or(exp.Unmet, "send what it matches (its route, its headers)")}
		return l
	}
	l := judgeLimit(proj, exp, len(names), cov, name, notes)
	retryAfterBeforeReset(proj, &l.Headers, name)
	return l
}

// neverAdvertised says, when the responses to the requests that met limit
// k (those of lc) named policies in RateLimit-Policy, and never k (by its
// name, or by its quota and window), how many did and which they named;
// "" when some named k, or none named any.
func neverAdvertised(samples []Sample, advs []advert, lc limitCounters, k int, exps []Expectation) string {
	if exps[k].noPolicies {
		return ""
	}
	var naming int64
	var named []string
	for _, i := range lc.idx {
		s := samples[i]
		policies := false
		for _, a := range advs[s.advAt : s.advAt+uint32(s.advN)] {
			if a.legacy || !a.q.ok {
				continue // not an item of RateLimit-Policy
			}
			if speaksOf(a, k, exps) {
				return ""
			}
			policies = true
			what := fmt.Sprintf("q=%d;w=%d", a.q.n, a.w.n)
			if a.named {
				what = exps[a.name].ID
			}
			if len(named) < 4 && !slices.Contains(named, what) {
				named = append(named, what)
			}
		}
		if policies {
			naming++
		}
	}
	if naming == 0 {
		return ""
	}
	return fmt.Sprintf("never advertised it: %d responses to its requests named %s in RateLimit-Policy, and never it "+
		"(by name, or by quota and window): a strong sign that the gateway leaves it out", naming, plural.List(named, "and"))
}

// speaksOf says whether an advert may be of limit k: it names it, or,
// unnamed, gives its quota and window (w in whole seconds, rounded either
// way).
func speaksOf(a advert, k int, exps []Expectation) bool {
	if a.named {
		return int(a.name) == k
	}
	e := exps[k]
	w := e.policy.Window
	return int64(a.q.n) == e.quota && (!a.w.ok || int64(a.w.n) == int64(w/time.Second) || int64(a.w.n) == int64((w+time.Second-1)/time.Second))
}

// forCounters calls f with each counter's samples of lc (the samples'
// consumer set to the counter), in send order, and their indexes in
// samples.
func forCounters(samples []Sample, lc limitCounters, f func(ss []Sample, idx []int32)) {
	per := make([][]int32, len(lc.names))
	for j, i := range lc.idx {
		per[lc.counter[j]] = append(per[lc.counter[j]], i)
	}
	var ss []Sample
	for c, idx := range per {
		ss = ss[:0]
		for _, i := range idx {
			s := samples[i]
			s.Consumer = int32(c)
			ss = append(ss, s)
		}
		f(ss, idx)
	}
}

// project makes s speak of limit k alone: its advertised limit, remaining
// and reset become those of the policy its response gave for k, if any
// (met: the limits its request met; enforcing: those judged). A sample
// without adverts keeps what it read.
//
// A draft-10 policy is limit k's when its name is k's (ID or name), or,
// unnamed so, when its quota and window are k's. When none of a response's
// policies is any limit its request met, its first is held to the tightest
// of them (the lowest rate), as are legacy fields whose limit is none of
// them.
func project(s *Sample, advs []advert, k int, met, enforcing uint64, exps []Expectation) {
	if s.advN == 0 {
		return
	}
	ads := advs[s.advAt : s.advAt+uint32(s.advN)]
	tight := tightest(met&enforcing, exps)
	if tight < 0 {
		tight = tightest(met, exps)
	}
	var draft, legacy = -1, -1 // the advert for k
	resolvedAny, firstDraft := false, -1
	for i, a := range ads {
		to := resolve(a, met, exps)
		if !a.legacy {
			if firstDraft < 0 && a.q.ok {
				firstDraft = i
			}
			if to >= 0 || to == ambiguous {
				resolvedAny = true
			}
			if to == k && draft < 0 {
				draft = i
			}
			continue
		}
		if to == -1 {
			to = tight
		}
		if to == k {
			legacy = i
		}
	}
	if !resolvedAny && firstDraft >= 0 && tight == k {
		draft = firstDraft
	}
	s.limit, s.remaining, s.Reset = -1, -1, -1
	pick := draft
	if pick < 0 {
		pick = legacy
	}
	if pick < 0 {
		return
	}
	a := ads[pick]
	cost := max(exps[k].cost, 1)
	if a.q.ok {
		s.limit = int64(a.q.n) / cost
	}
	if a.r.ok {
		s.remaining = int64(a.r.n) / cost
	}
	if a.t.ok {
		s.Reset = time.Duration(a.t.n) * time.Second
	}
}

// resolve is the limit among met that an advert speaks of: by name, else
// by quota and window (w in whole seconds, rounded either way); -1 when
// none, ambiguous when several. An item of RateLimit alone (no quota)
// speaks of the one limit met, when there is one.
func resolve(a advert, met uint64, exps []Expectation) int {
	if a.named {
		if met&(1<<a.name) != 0 {
			return int(a.name)
		}
		return -1
	}
	if !a.q.ok {
		if bits.OnesCount64(met) == 1 && !a.legacy {
			return bits.TrailingZeros64(met)
		}
		return -1
	}
	found := -1
	for m := met; m != 0; m &= m - 1 {
		k := bits.TrailingZeros64(m)
		if speaksOf(a, k, exps) {
			if found >= 0 {
				return ambiguous // two limits of that quota (and window)
			}
			found = k
		}
	}
	return found
}

// ambiguous is an advert that two of the limits met could be: it is held
// to neither.
const ambiguous = -2

// tightest is the limit of mask with the lowest rate (limit per window);
// -1 for none.
func tightest(mask uint64, exps []Expectation) int {
	best := -1
	for m := mask; m != 0; m &= m - 1 {
		k := bits.TrailingZeros64(m)
		if best < 0 {
			best = k
			continue
		}
		p, b := exps[k].policy, exps[best].policy
		if float64(p.Limit)/p.Window.Seconds() < float64(b.Limit)/b.Window.Seconds() {
			best = k
		}
	}
	return best
}

// retryAfterBeforeReset counts the denials whose Retry-After came more than
// a second (its rounding) before the reset the same response gave for a
// policy it said had nothing remaining: that policy denies until then, so
// the client was told to come back too soon.
func retryAfterBeforeReset(proj []Sample, h *HeadersAudit, name func(int32) string) {
	for _, s := range proj {
		if !s.Denied() || s.RetryAfter < 0 || s.remaining != 0 || s.Reset <= s.RetryAfter+time.Second {
			continue
		}
		h.Violations++
		if h.Example == "" {
			h.Example = fmt.Sprintf("%s was told Retry-After %s, but the policy said nothing remained for %s",
				name(s.Consumer), s.RetryAfter, strconv.FormatInt(int64(s.Reset/time.Second), 10)+"s")
		}
	}
}
