package audit

import (
	"context"
	"fmt"
	"slices"

	"github.com/ratelab/ratelab/algorithms"
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

// Service is a run of calls to a rate limit service, as its audit reads
// them, and what the audit holds the service to.
type Service struct {
	// Domain is the calls' domain.
	Domain string
	// Sets are each kind of call's descriptors (a mix's sets, or the one
	// of every call), in order, each as --descriptor takes it ({consumer}
	// as written): with Limit, each text is a limit of its own.
	Sets [][]string
	// Sent is the entries of each descriptor that consumer's call of set
	// sent (consumer -1: the call of no consumer); Label is entries' text
	// as Sets write them.
	Sent  func(set, consumer int) [][]rules.Entry
	Label func(entries []rules.Entry) string
	// Consumers counts the run's consumers (0: none), and Cost is what a
	// call takes of each descriptor's limit (its hits_addend; 1 when 0).
	Consumers int
	Cost      int64
	// Config, when set, is the service's configuration, by which each
	// descriptor meets its limits; without it, every descriptor is held
	// to Limit on the counter its values name.
	Config *rules.Set
	Limit  ExpectedLimit
	// Unmet says why no call met a limit of Config, when what was sent
	// shows it.
	Unmet string
}

// descriptors are the descriptors of every set, each text once, in order:
// with Limit, each is a limit of its own.
func (svc Service) descriptors() []string {
	var out []string
	for _, set := range svc.Sets {
		for _, d := range set {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// severalPerCall says some call sends several descriptors.
func (svc Service) severalPerCall() bool {
	return slices.ContainsFunc(svc.Sets, func(set []string) bool { return len(set) > 1 })
}

// Judge judges a run's samples (with their adverts, which it names by the
// limits they speak of) against what svc expects, and asks pr for the
// probes of duration_until_reset; skip, when set, says why none can be
// made. It returns the meeting of samples and limits it judged by.
// Samples whose status is not OK (200) or OVER_LIMIT (429) are the
// caller's to map: Envoy lets any other code through as it lets OK.
func (svc Service) Judge(ctx context.Context, rec *Record, cov Coverage, pr Prober, skip string, name func(int32) string) (Audit, Meeting) {
	samples := rec.Samples
	r := svc.meeting(samples, name)
	r.nameAdverts(samples, rec.advs)
	several := svc.severalPerCall()
	if several && cov.skipUnder == "" {
		cov.skipUnder = severalDescriptors
	}
	for k := range r.exps {
		r.exps[k].refusedMaySpend, r.exps[k].refusedAtZero, r.exps[k].noPolicies = several, true, true
	}
	if len(r.exps) == 0 { // by a configuration, which no call met
		why := fmt.Sprintf("no descriptor sent meets a limit of domain %q in %s", svc.Domain, svc.Config.File)
		if svc.Unmet != "" {
			why += ": " + svc.Unmet
		}
		if len(samples) == 0 {
			why = "no call was made in the measured run"
		}
		a := Audit{Verdict: NoVerdict, Samples: int64(len(samples)), Limits: []LimitAudit{}, Reasons: []string{why}}
		return a, r.m
	}
	a := auditLimits(samples, rec.advs, r.exps, r.m, cov)
	// duration_until_reset is when the limits are whole again: a call is
	// surely admitted then; only a fixed window frees nothing before it,
	// and a rolling one may free a slot before, which proves nothing.
	early := !slices.ContainsFunc(r.exps, func(e Expectation) bool {
		return e.judged() && e.guarantee != algorithms.AlignedWindows
	})
	probeLimits(ctx, pr, samples, &a, cov, skip, early)
	return a, r.m
}

// rlsMet is what the audit knows of the calls a run made: the limits
// judged, which of them each sample's call met and on which counters, and
// the limit each of its descriptors' statuses speaks of.
type rlsMet struct {
	exps []Expectation
	m    Meeting
	// status[{set, c}][d] is the limit descriptor d of consumer c's call of
	// set met, when it met one alone; -1 otherwise (none, several, or one
	// that another descriptor of the call met too).
	status map[[2]int32][]int
}

// meeting finds, for each sample, the limits its call met, by the set it
// sent (its route) and its consumer: with Limit, each descriptor (each
// text once, over every set) is a limit of its own, on the counter its
// values name; with Config, each descriptor meets the limits the
// configuration gives it (rules.Set.LookupCall: replaces across the call,
// as the service applies it), and only the limits some call met are
// judged.
func (svc Service) meeting(samples []Sample, name func(int32) string) rlsMet {
	type hit struct {
		k   int
		key string
		lbl string
	}
	var limits []*rules.Limit
	if svc.Config != nil {
		limits = svc.Config.Limits()
	}
	own := map[string]int{} // Limit: each descriptor's limit, by its text
	for k, d := range svc.descriptors() {
		own[d] = k
	}
	// Each consumer's call of a set meets the same limits: found once.
	perCall := map[[2]int32][][]hit{}
	meet := func(set, c int32) [][]hit {
		at := [2]int32{set, c}
		if hs, ok := perCall[at]; ok {
			return hs
		}
		consumer := int(c)
		if svc.Consumers == 0 {
			consumer = -1
		}
		descs := svc.Sent(int(set), consumer)
		hs := make([][]hit, len(descs))
		if svc.Config == nil {
			for d, entries := range descs {
				label := svc.Domain + "/" + svc.Label(entries)
				hs[d] = []hit{{k: own[svc.Sets[set][d]], key: label, lbl: label}}
			}
		}
		if svc.Config != nil {
			for d, rh := range svc.Config.LookupCall(descs) {
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
	if svc.Config != nil {
		n = len(limits)
	}
	metAny := make([]bool, n)
	for k := range metAny {
		metAny[k] = svc.Config == nil // every descriptor is a limit of its own
	}
	for _, s := range samples {
		for _, hs := range meet(int32(s.Route), s.Consumer) {
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
		r.exps = append(r.exps, svc.expectation(k))
	}
	b := newCounterBook(len(samples), len(r.exps), name)
	for i, s := range samples {
		for _, hs := range meet(int32(s.Route), s.Consumer) {
			for _, h := range hs {
				k := int32(renum[h.k])
				b.add(i, k, b.counter(k, h.key, h.lbl, s.Consumer))
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

// expectation is what the audit holds limit k to: descriptor k's Limit
// (of descriptors(): each text once), or the configuration's k-th limit;
// each call takes Cost of it.
func (svc Service) expectation(k int) Expectation {
	var exp Expectation
	if svc.Config == nil {
		exp, _ = ExpectationOf(svc.Limit.Policy(), svc.Limit.Algorithm) // validated
		exp.descriptor = svc.descriptors()[k]
		exp.ID = exp.descriptor
	} else {
		exp = RulesExpectations(svc.Config)[k]
	}
	exp.cost = max(svc.Cost, 1)
	if !exp.unlimited {
		exp.policy.Limit = exp.quota / exp.cost
		exp.policy.Burst = exp.burst / exp.cost
	}
	return exp
}

// nameAdverts names each sample's adverts, which the wire named by
// descriptor, by the limit its descriptor met alone; an advert of a
// descriptor that met none, or several, says nothing.
func (r rlsMet) nameAdverts(samples []Sample, advs []advert) {
	for _, s := range samples {
		st := r.status[[2]int32{int32(s.Route), s.Consumer}]
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
