package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/rules"
)

// The audit of a rate limit service judges each descriptor's counter on
// the calls whose overall code was OK: a call OVER_LIMIT may have been
// refused by any of its descriptors, and a service may consume nothing of
// a call it refuses (ratelab rls decides a call's limits all or nothing)
// or every descriptor's hits (envoyproxy/ratelimit counts each): the OK
// calls are what every honest service counted. With several descriptors,
// a refused call may thus have spent the limits that did not refuse it:
// the checks that need every admission of a counter then count every
// call, and under-admission is not judged.

// severalDescriptors says why under-admission is not judged for calls of
// several descriptors.
const severalDescriptors = "a call of several descriptors may be refused by one of them and still spend the others " +
	"(envoyproxy/ratelimit counts every descriptor's hits): which denials were false cannot be told"

// validateExpect checks what the audit expects.
func (c RLSConfig) validateExpect() error {
	switch {
	case c.ExpectLimit < 0 || (c.ExpectLimit > 0) != (c.ExpectWindow > 0):
		return field.Errorf("ExpectLimit", "needs a positive limit and window (got %d per %s)", c.ExpectLimit, c.ExpectWindow)
	case c.ExpectAlgorithm != "" && c.ExpectLimit == 0:
		return field.Errorf("ExpectAlgorithm", "needs {ExpectLimit}")
	case c.ExpectConfig != nil && c.ExpectLimit > 0:
		return field.Errorf("ExpectConfig", "and {ExpectLimit} are two audits: give one")
	case c.ExpectConfig != nil && c.ExpectConfig.Domain != c.Domain:
		return field.Errorf("ExpectConfig", "%s: its domain is %q, not the calls' %q", c.ExpectConfig.File, c.ExpectConfig.Domain, c.Domain)
	case c.ExpectConfig != nil && len(c.ExpectConfig.Limits()) > maxExpected:
		return field.Errorf("ExpectConfig", "%s: at most %d limits (got %d)", c.ExpectConfig.File, maxExpected, len(c.ExpectConfig.Limits()))
	}
	if c.ExpectLimit > 0 {
		p := algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow, Burst: c.ExpectBurst}
		if err := p.Validate(); err != nil {
			return field.Errorf("ExpectLimit", ": %v", err)
		}
		if _, err := expectationOf(p, c.ExpectAlgorithm); err != nil {
			return err
		}
	}
	return nil
}

// LimitIDs are the IDs of the limits the audit may judge, as it labels
// them (LimitAudit.Label): each descriptor's with ExpectLimit
// (user={consumer}), or each limit's of ExpectConfig.
func (c RLSConfig) LimitIDs() []string {
	var ids []string
	switch {
	case c.ExpectConfig != nil:
		for _, e := range rulesExpectations(c.ExpectConfig) {
			ids = append(ids, e.id)
		}
	case c.ExpectLimit > 0:
		for _, d := range c.Descriptors {
			ids = append(ids, d.String())
		}
	}
	return ids
}

// auditing says whether the run is audited.
func (c RLSConfig) auditing() bool { return c.ExpectLimit > 0 || c.ExpectConfig != nil }

// cost is what one call takes of each descriptor's limit: its hits_addend,
// which the service reads as 1 when unset.
func (c RLSConfig) cost() int64 { return max(int64(c.HitsAddend), 1) }

// rlsMet is what the audit knows of the calls a run made: the limits
// judged, which of them each sample's call met and on which counters, and
// the limit each of its descriptors' statuses speaks of.
type rlsMet struct {
	exps []expectation
	m    meeting
	// status[{set, c}][d] is the limit descriptor d of consumer c's call of
	// set met, when it met one alone; -1 otherwise (none, several, or one
	// that another descriptor of the call met too).
	status map[[2]int32][]int
}

// rlsMeeting finds, for each sample, the limits its call met, by the set
// it sent (its route) and its consumer: with ExpectLimit, each descriptor
// (each text once, over every set) is a limit of its own, on the counter
// its values name; with ExpectConfig, each descriptor meets the limits the
// configuration gives it (rules.Set.LookupCall: replaces across the call,
// as the service applies it), and only the limits some call met are
// judged.
func rlsMeeting(cfg RLSConfig, calls *rlsCalls, samples []sample, name func(int32) string) rlsMet {
	type hit struct {
		k   int
		key string
		lbl string
	}
	var limits []*rules.Limit
	if cfg.ExpectConfig != nil {
		limits = cfg.ExpectConfig.Limits()
	}
	own := map[string]int{} // ExpectLimit: each descriptor's limit, by its text
	for k, d := range cfg.descriptors() {
		own[d.String()] = k
	}
	sets := cfg.sets()
	// Each consumer's call of a set meets the same limits: found once.
	perCall := map[[2]int32][][]hit{}
	meet := func(set, c int32) [][]hit {
		at := [2]int32{set, c}
		if hs, ok := perCall[at]; ok {
			return hs
		}
		consumer := int(c)
		if cfg.Consumers == 0 {
			consumer = -1
		}
		req := calls.request(int(set), consumer)
		hs := make([][]hit, len(req.GetDescriptors()))
		descs := make([][]rules.Entry, len(req.GetDescriptors()))
		for d, desc := range req.GetDescriptors() {
			entries := make([]rules.Entry, len(desc.GetEntries()))
			for j, e := range desc.GetEntries() {
				entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
			}
			descs[d] = entries
			if cfg.ExpectConfig == nil {
				label := cfg.Domain + "/" + descriptorLabel(entries)
				hs[d] = []hit{{k: own[sets[set].Descriptors[d].String()], key: label, lbl: label}}
			}
		}
		if cfg.ExpectConfig != nil {
			for d, rh := range cfg.ExpectConfig.LookupCall(descs) {
				for _, h := range rh {
					key := h.Key
					if key == "" { // unlimited: no counter
						key = h.Label()
					}
					hs[d] = append(hs[d], hit{k: slices.Index(limits, h.Limit), key: key, lbl: h.Label()})
				}
			}
		}
		perCall[at] = hs
		return hs
	}
	// The limits judged: every descriptor's, or the configuration's that
	// some call met, in the file's order.
	n := len(own)
	if cfg.ExpectConfig != nil {
		n = len(limits)
	}
	metAny := make([]bool, n)
	for k := range metAny {
		metAny[k] = cfg.ExpectConfig == nil // every descriptor is a limit of its own
	}
	for _, s := range samples {
		for _, hs := range meet(int32(s.route), s.consumer) {
			for _, h := range hs {
				metAny[h.k] = true
			}
		}
	}
	var r rlsMet
	renum := make([]int, n)
	for k := range n {
		renum[k] = -1
		if !metAny[k] {
			continue
		}
		renum[k] = len(r.exps)
		r.exps = append(r.exps, cfg.expectation(k))
	}
	b := newCounterBook(len(samples), len(r.exps), name)
	for i, s := range samples {
		for _, hs := range meet(int32(s.route), s.consumer) {
			for _, h := range hs {
				k := int32(renum[h.k])
				b.add(i, k, b.counter(k, h.key, h.lbl, s.consumer))
			}
		}
	}
	r.m = b.m
	r.status = map[[2]int32][]int{}
	for at, hs := range perCall {
		st := make([]int, len(hs))
		count := map[int]int{}
		for d, h := range hs {
			st[d] = -1
			if len(h) == 1 {
				st[d] = renum[h[0].k]
				count[st[d]]++
			}
		}
		for d, k := range st {
			if k >= 0 && count[k] > 1 {
				st[d] = -1
			}
		}
		r.status[at] = st
	}
	return r
}

// descriptorLabel is a descriptor's entries as key=value,key=value,
// escaped as Descriptor.String escapes them.
func descriptorLabel(entries []rules.Entry) string {
	d := make(Descriptor, len(entries))
	for i, e := range entries {
		d[i] = DescriptorEntry{Key: e.Key, Value: e.Value}
	}
	return d.String()
}

// expectation is what the audit holds limit k to: descriptor k's
// ExpectLimit (of descriptors(): each text once), or the configuration's k-th limit; each call takes its
// hits_addend of it.
func (c RLSConfig) expectation(k int) expectation {
	var exp expectation
	if c.ExpectConfig == nil {
		exp, _ = expectationOf(algorithms.Policy{Limit: c.ExpectLimit, Window: c.ExpectWindow, Burst: c.ExpectBurst}, c.ExpectAlgorithm) // validated
		exp.descriptor = c.descriptors()[k].String()
		exp.id = exp.descriptor
	} else {
		exp = rulesExpectations(c.ExpectConfig)[k]
	}
	exp.cost = c.cost()
	if !exp.unlimited {
		exp.policy.Limit = exp.quota / exp.cost
		exp.policy.Burst = exp.burst / exp.cost
	}
	return exp
}

// nameAdverts names each sample's adverts, which the wire named by
// descriptor, by the limit its descriptor met alone; an advert of a
// descriptor that met none, or several, says nothing.
func (r rlsMet) nameAdverts(samples []sample, advs []advert) {
	for _, s := range samples {
		st := r.status[[2]int32{int32(s.route), s.consumer}]
		for i := s.advAt; i < s.advAt+uint32(s.advN); i++ {
			a := &advs[i]
			d := int(a.name)
			if a.named && d < len(st) && st[d] >= 0 {
				a.name = int16(st[d])
				continue
			}
			*a = advert{}
		}
	}
}

// rlsAudit judges a run's samples (with their adverts) against what cfg
// expects, and asks the engine for the probes of duration_until_reset. It
// returns the meeting of samples and limits it judged by.
//
// Envoy refuses a request only when the overall code is OVER_LIMIT: it
// lets a call answered with any other code (UNKNOWN) through as it lets
// OK through, so the audit counts those calls as admitted (the results
// still show them as another code).
func rlsAudit(ctx context.Context, cfg RLSConfig, p *plan, calls *rlsCalls, samples []sample, advs []advert, cov coverage) (audit.Audit, *meeting) {
	for i := range samples {
		if samples[i].status == rlsUnknown {
			samples[i].status = rlsOK
		}
	}
	r := rlsMeeting(cfg, calls, samples, p.consumerName)
	r.nameAdverts(samples, advs)
	several := cfg.severalPerCall()
	if several && cov.skipUnder == "" {
		cov.skipUnder = severalDescriptors
	}
	for k := range r.exps {
		r.exps[k].refusedMaySpend, r.exps[k].refusedAtZero, r.exps[k].noPolicies = several, true, true
	}
	if len(r.exps) == 0 { // by a configuration, which no call met
		why := fmt.Sprintf("no descriptor sent meets a limit of domain %q in %s", cfg.Domain, cfg.ExpectConfig.File)
		if hint := cfg.unmetHint(); hint != "" {
			why += ": " + hint
		}
		if len(samples) == 0 {
			why = "no call was made in the measured run"
		}
		a := audit.Audit{Verdict: audit.NoVerdict, Samples: int64(len(samples)), Limits: []audit.LimitAudit{}, Reasons: []string{why}}
		return a, &r.m
	}
	a := auditLimits(samples, advs, r.exps, r.m, cov)
	// duration_until_reset is when the limits are whole again: a call is
	// surely admitted then; only a fixed window frees nothing before it.
	p.wholeAfter = true
	p.noEarlyProbe = slices.ContainsFunc(r.exps, func(e expectation) bool {
		return e.judged() && e.guarantee != algorithms.AlignedWindows
	})
	skip := ""
	if cfg.Consumers > 1 {
		for _, d := range cfg.descriptors() {
			if !d.namesConsumer() {
				skip = "descriptor " + d.String() + " is every consumer's: the probes of several consumers at once would spend it"
				break
			}
		}
	}
	probeLimits(ctx, p, samples, &a, cov, cfg.NoProbes, skip)
	return a, &r.m
}

// waitFor is how long after a denial came back its consumer must be
// admitted: its Retry-After, or for a rate limit service, when every limit
// its call met is whole again (the longest duration_until_reset).
func (p *plan) waitFor(s sample) time.Duration {
	if p.wholeAfter {
		return max(s.retryAfter, s.reset)
	}
	return s.retryAfter
}

// waitName names what waitFor reads: Retry-After, or a rate limit
// service's duration_until_reset.
func (p *plan) waitName() string {
	if p.wholeAfter {
		return rlsWords.Wait
	}
	return httpWords.Wait
}
