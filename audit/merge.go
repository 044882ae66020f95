package audit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// Part is one run's part of a merged audit (Merge): its audit and its
// samples, as its result holds them.
type Part struct {
	Audit   *Audit
	Samples *Samples
	// Offset is how long after the earliest of the runs merged this one
	// began; Consumers bounds its samples' consumers, and Rename, when
	// set, gives each of them its number in the merge.
	Offset    time.Duration
	Consumers int
	Rename    []int32
}

// Merging says how Merge judges several runs as one.
type Merging struct {
	// Tolerance is how far the load machines' clocks may disagree: every
	// flight is widened by it on both sides.
	Tolerance time.Duration
	// Consumers counts the merge's consumers, and Name names them.
	Consumers int
	Name      func(int32) string
	// Service says the runs called a rate limit service (bench rls), and
	// Several that some of their calls sent several descriptors.
	Service, Several bool
}

// Merged is the audit of several runs as one, with its samples encoded
// (so that a merge can be merged again); or, with no audit, a note that
// says why there is none.
type Merged struct {
	Audit   *Audit
	Samples *Samples
	Note    string
}

// Merge judges the samples of several runs (parts, each one load machine's
// or one run's) as one run's, as if one machine had sent everything: each
// run's responses are placed by the time it began, and every flight is
// widened by opts.Tolerance on both sides, so that clocks that disagree by
// up to that much cannot make an honest limiter look leaky. The
// Retry-After probes ran on each machine after its run: the merge keeps
// what they found. When a run was not audited, judged other limits, or
// kept no samples, there is no audit, and Note says why (none when no run
// was audited). A part's samples that do not decode are an error, naming
// its run (from 1).
func Merge(parts []Part, opts Merging) (Merged, error) {
	var with, without []int
	for i, r := range parts {
		if r.Audit != nil {
			with = append(with, i+1)
		} else {
			without = append(without, i+1)
		}
	}
	none := func(format string, a ...any) (Merged, error) {
		return Merged{Note: fmt.Sprintf(format, a...)}, nil
	}
	switch {
	case len(with) == 0:
		return Merged{}, nil
	case len(without) > 0:
		return none("no merged audit: run %v ran without --expect-limit or --expect-rules", without)
	}
	first := parts[0].Audit.Limits
	if len(first) == 0 {
		return none("no merged audit: run 1's audit holds no limit (a file written before audits listed their limits)")
	}
	// An audit by rules keeps which counters each request met: the merge
	// judges each counter on every run's requests that met it.
	var counters *counterMerge
	if byRules(first) {
		counters = newCounterMerge(len(first))
	}
	var all []Sample
	var advs []advert
	cov := Coverage{horizon: -1}
	probes := make([]RetryAfterAudit, len(first))
	honest, probed := make([]bool, len(first)), make([]bool, len(first))
	for k := range honest {
		honest[k] = true
	}
	for i, r := range parts {
		a := r.Audit
		if !sameLimits(a.Limits, first) {
			return none("no merged audit: run %d expected %s, run 1 %s", i+1, limitsText(a.Limits), limitsText(first))
		}
		if r.Samples == nil {
			return none("no merged audit: run %d kept no audit samples (it was written before they were kept)", i+1)
		}
		if counters != nil && len(r.Samples.Counters) != len(first) {
			return none("no merged audit: run %d kept no counters of its rules' limits", i+1)
		}
		offset := r.Offset
		ss, ads, hits, err := r.Samples.decodeAll(offset, r.Consumers)
		if err != nil {
			return Merged{}, fmt.Errorf("run %d: %w", i+1, err)
		}
		if counters != nil {
			if err := counters.add(len(all), hits, r.Samples.Counters); err != nil {
				return Merged{}, fmt.Errorf("run %d: audit samples: %w", i+1, err)
			}
		}
		base := uint32(len(advs))
		advs = append(advs, ads...)
		for k := range ss {
			if r.Rename != nil {
				ss[k].Consumer = r.Rename[ss[k].Consumer]
			}
			ss[k].Sent -= opts.Tolerance
			ss[k].Done += opts.Tolerance
			ss[k].advAt += base
		}
		all = append(all, ss...)
		if a.CappedFromMillis != nil {
			h := offset + time.Duration(*a.CappedFromMillis)*time.Millisecond
			if cov.horizon < 0 || h < cov.horizon {
				cov.horizon = h
			}
		}
		// Before a run began (and its warm-up ended), its consumers may
		// have been admitted by requests that no run kept.
		cov.from = max(cov.from, offset+time.Duration(min(max(a.CompleteFromMillis, 0), maxSampleMicros/1000))*time.Millisecond+opts.Tolerance)
		// The Retry-After probes ran on each machine after its run: the
		// merge keeps what they found.
		for k, l := range a.Limits {
			ra := l.RetryAfter
			probes[k].Probes += ra.Probes
			probes[k].MaxErrorMillis = max(probes[k].MaxErrorMillis, ra.MaxErrorMillis)
			probes[k].Early += ra.Early
			if ra.Honest != nil {
				probed[k] = true
				honest[k] = honest[k] && *ra.Honest
			} else if probes[k].Skipped == "" {
				probes[k].Skipped = fmt.Sprintf("run %d: %s", i+1, ra.Skipped)
			}
		}
	}
	exps := make([]Expectation, len(first))
	for k, l := range first {
		// The burst is in the limit's units, the limit in whole requests.
		p := algorithms.Policy{Limit: l.Limit, Window: time.Duration(l.WindowMillis) * time.Millisecond, Burst: l.Burst / max(l.Cost, 1)}
		exp, err := ExpectationOf(p, l.Algorithm)
		if err != nil {
			return Merged{}, fmt.Errorf("run 1: audit: %w", err)
		}
		exp.ID, exp.burst = l.ID, l.Burst
		if counters != nil { // a rules limit, as the run's audit described it
			exp.descriptor, exp.shadow, exp.unlimited, exp.cost = l.Descriptor, l.Shadow, l.Unlimited, l.Cost
			exp.quota = l.Limit * max(l.Cost, 1)
			if l.Quota > 0 {
				exp.quota = l.Quota
			}
		}
		exps[k] = exp
	}
	for k := range exps { // a rate limit service: see Service.Judge
		exps[k].refusedAtZero = opts.Service
		exps[k].noPolicies = opts.Service
	}
	if opts.Several {
		for k := range exps {
			exps[k].refusedMaySpend = true
		}
		if cov.skipUnder == "" {
			cov.skipUnder = severalDescriptors
		}
	}
	m := EveryConsumer(all, len(exps), opts.Consumers, opts.Name)
	if counters != nil {
		m = counters.m
	}
	a := auditLimits(all, advs, exps, m, cov)
	checkViolated(&a, all, advs, exps, m, opts.Name)
	for k := range a.Limits {
		a.Limits[k].RetryAfter = probes[k]
		if probed[k] {
			a.Limits[k].RetryAfter.Honest = &honest[k]
			a.Limits[k].RetryAfter.Skipped = ""
		}
	}
	return Merged{Audit: &a, Samples: encodeSamplesWith(all, advs, &m)}, nil
}

// byRules says whether an audit's limits are a rules file's.
func byRules(limits []LimitAudit) bool {
	return len(limits) > 0 && limits[0].Descriptor != ""
}

// sameLimits says whether two audits judged the same limits, in order.
func sameLimits(a, b []LimitAudit) bool {
	return slices.EqualFunc(a, b, func(x, y LimitAudit) bool {
		return x.Limit == y.Limit && x.WindowMillis == y.WindowMillis && x.Algorithm == y.Algorithm && x.ID == y.ID &&
			x.Descriptor == y.Descriptor && x.Shadow == y.Shadow && x.Unlimited == y.Unlimited && x.Cost == y.Cost
	})
}

// limitsText says which limits an audit judged: "5 per 1000 ms (gcra)".
func limitsText(ls []LimitAudit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%d per %d ms (%s)", l.Limit, l.WindowMillis, orRule(l.Algorithm))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, " and ")
}

func orRule(algorithm string) string {
	if algorithm == "" {
		return "the sliding-window rule"
	}
	return algorithm
}
