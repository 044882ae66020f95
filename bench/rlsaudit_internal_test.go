package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/rules"
)

// rlsService simulates a rate limit service's answers to one consumer's
// calls of two descriptors, each with a fixed window (a of 1s, b of 1m):
// the limits, and what it spends of a refused call.
type rlsService struct {
	limits [2]int64
	// spendRefused adds every descriptor's hits, refused or not
	// (envoyproxy/ratelimit); otherwise a refused call spends nothing
	// (ratelab rls).
	spendRefused bool
	// overSays is the limit_remaining a status over its limit gives (0
	// for an honest service); fallBy how much remaining falls per hit (1).
	overSays, fallBy int64
}

// answer decides the calls, made every 100 ms by consumer 0, one at a
// time, and returns them as the wire samples them.
func (svc rlsService) answer(calls int) ([]sample, []advert) {
	windows := [2]time.Duration{time.Second, time.Minute}
	var used [2]int64
	var at [2]time.Duration // each counter's window
	var samples []sample
	var advs []advert
	for i := range calls {
		sent := time.Duration(i) * 100 * time.Millisecond
		var over [2]bool
		var reset [2]time.Duration
		for d, w := range windows {
			if start := sent.Truncate(w); start != at[d] {
				at[d], used[d] = start, 0
			}
			over[d] = used[d]+1 > svc.limits[d]
			reset[d] = (at[d] + w - sent + time.Second - 1).Truncate(time.Second)
		}
		ok := !over[0] && !over[1]
		for d := range used {
			if ok || svc.spendRefused {
				used[d]++
			}
		}
		s := sample{consumer: 0, sent: sent, done: sent + time.Millisecond, status: rlsOK, retryAfter: -1, limit: -1, remaining: -1,
			reset: max(reset[0], reset[1])}
		s.advAt, s.advN = uint32(len(advs)), 2
		for d := range used {
			r := max(svc.limits[d]-svc.fallBy*used[d], 0)
			if over[d] {
				r = svc.overSays
			}
			if !ok && (over[d] || r == 0) {
				s.status, s.retryAfter = rlsOver, max(s.retryAfter, reset[d])
			}
			advs = append(advs, advert{name: int16(d), named: true, q: givenAs(int32(svc.limits[d])), w: givenAs(int32(windows[d] / time.Second)),
				r: givenAs(int32(r)), t: givenAs(int32(reset[d] / time.Second))})
		}
		samples = append(samples, s)
	}
	return samples, advs
}

// serviceSet parses config as the rate limit service reads it.
func serviceSet(t *testing.T, config string) *rules.Set {
	t.Helper()
	set, err := rules.Parse("d.yaml", []byte(config), rules.ForService(), rules.WithDefaultAlgorithm("fixed-window"))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// auditedCalls is the configuration and the calls of a run of one
// consumer that sends descriptors to domain d, audited by set.
func auditedCalls(t *testing.T, set *rules.Set, descriptors []Descriptor) (RLSConfig, *rlsCalls) {
	t.Helper()
	cfg := RLSConfig{Target: "127.0.0.1:1", Domain: "d", Descriptors: descriptors, Consumers: 1, Requests: 1, ExpectConfig: set}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	calls, err := newRLSCalls(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, calls
}

// TestRLSAuditJudgesStatuses: the audit never accuses a service that
// spends a refused call's other descriptors (envoyproxy/ratelimit), nor
// one that spends nothing (ratelab rls), and catches remaining counts that
// fall too fast or say something remains of a limit that refused the call.
func TestRLSAuditJudgesStatuses(t *testing.T) {
	const config = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n" +
		"  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	set := serviceSet(t, config)
	for _, tc := range []struct {
		name        string
		descriptors []Descriptor
		svc         rlsService
		verdict     audit.Verdict
		violation   string // in the headers' example; "" for none
	}{
		{"spends refused calls", []Descriptor{{{"a", "x"}}, {{"b", "x"}}}, rlsService{limits: [2]int64{5, 100}, spendRefused: true, fallBy: 1}, audit.Held, ""},
		{"spends nothing of refused calls", []Descriptor{{{"a", "x"}}, {{"b", "x"}}}, rlsService{limits: [2]int64{5, 100}, fallBy: 1}, audit.Held, ""},
		{"one descriptor", []Descriptor{{{"a", "x"}}}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 1}, audit.Held, ""},
		{"remaining falls by two", []Descriptor{{{"a", "x"}}}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 2}, audit.Held, "remaining fell from 3 to 1"},
		{"refused with some remaining", []Descriptor{{{"a", "x"}}}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 1, overSays: 2}, audit.Held,
			"was refused with 2 remaining"},
		{"admits three times the limit", []Descriptor{{{"a", "x"}}}, rlsService{limits: [2]int64{15, 1 << 20}, fallBy: 1}, audit.Leaked, "advertised a limit of 15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, calls := auditedCalls(t, set, tc.descriptors)
			samples, advs := tc.svc.answer(40)
			r := rlsMeeting(cfg, calls, samples, consumerName)
			r.nameAdverts(samples, advs)
			for k := range r.exps {
				r.exps[k].refusedMaySpend, r.exps[k].refusedAtZero = len(tc.descriptors) > 1, true
			}
			cov := coverage{horizon: -1}
			if len(tc.descriptors) > 1 {
				cov.skipUnder = severalDescriptors
			}
			a := auditLimits(samples, advs, r.exps, r.m, cov)
			if len(a.Limits) != len(tc.descriptors) || a.Limits[0].Verdict != tc.verdict {
				t.Fatalf("%d limits (%+v), want %d, the first %s", len(a.Limits), a.Limits, len(tc.descriptors), tc.verdict)
			}
			// b's 100 a minute is never reached by 40 calls.
			for _, l := range a.Limits[1:] {
				if l.Verdict != audit.NotReached || !slices.Equal(l.Reasons, []string{"20 of 100 in 1m: not tested"}) {
					t.Errorf("%s: %s %q, want not reached", l.ID, l.Verdict, l.Reasons)
				}
			}
			h := a.Limits[0].Headers
			if h.Checked == 0 || (tc.violation == "") != (h.Violations == 0) || !strings.Contains(h.Example, tc.violation) {
				t.Fatalf("headers %+v, want a violation %q", h, tc.violation)
			}
			for _, l := range a.Limits[1:] {
				if l.Headers.Violations != 0 {
					t.Fatalf("%s: headers %+v", l.ID, l.Headers)
				}
			}
		})
	}
}

// TestRLSMeetingReplaces: each call meets the limits the configuration
// gives its descriptors with replaces across the call, as the service
// applies it: a replaced limit is not judged, and a replaced unlimited one
// is still met (the service answers it unlimited).
func TestRLSMeetingReplaces(t *testing.T) {
	const config = `domain: d
descriptors:
  - key: plan
    rate_limit: {name: gold, unit: second, requests_per_unit: 50, replaces: [{name: default}, {name: free}]}
  - key: user
    rate_limit: {name: default, unit: second, requests_per_unit: 5}
  - key: health
    rate_limit: {name: free, unlimited: true}
`
	set := serviceSet(t, config)
	for _, tc := range []struct {
		name        string
		descriptors []Descriptor
		want        []string // the limits met, in the file's order
	}{
		{"alone", []Descriptor{{{"user", "{consumer}"}}}, []string{"default"}},
		{"replaced", []Descriptor{{{"plan", "gold"}}, {{"user", "{consumer}"}}}, []string{"gold"}},
		{"an unlimited limit replaced is met", []Descriptor{{{"plan", "gold"}}, {{"health", "x"}}}, []string{"gold", "free"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, calls := auditedCalls(t, set, tc.descriptors)
			r := rlsMeeting(cfg, calls, []sample{{consumer: 0, status: rlsOK}}, consumerName)
			var got []string
			for _, e := range r.exps {
				got = append(got, e.id)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("limits met %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRLSMeetingSets: with a mix of sets, each call is judged by the set
// it sent (its route): by ExpectLimit, each descriptor's text is one limit
// over every set, met by the calls that sent it; the schedule sends each
// consumer the sets by their weights, exactly over whole rounds.
func TestRLSMeetingSets(t *testing.T) {
	var sets []DescriptorSet
	for _, s := range []string{"1:a={consumer};g=global", "3:b={consumer};g=global"} {
		set, err := ParseDescriptorSet(s)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, set)
	}
	cfg := RLSConfig{Target: "127.0.0.1:1", Domain: "d", Sets: sets, Consumers: 2, Requests: 1, ExpectLimit: 5, ExpectWindow: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	calls, err := newRLSCalls(cfg)
	if err != nil {
		t.Fatal(err)
	}
	schedule := spread([]int{1, 3})
	var samples []sample
	perSet := map[[2]int]int{}
	for j := range int64(32) {
		consumer := int(j % 2)
		set := scheduled(schedule, j, consumer, 2)
		perSet[[2]int{consumer, set}]++
		samples = append(samples, sample{consumer: int32(consumer), route: uint16(set), status: rlsOK, sent: time.Duration(j) * time.Millisecond,
			done: time.Duration(j)*time.Millisecond + 1, retryAfter: -1, limit: -1, remaining: -1, reset: -1})
		first := calls.request(set, consumer).GetDescriptors()[0].GetEntries()[0]
		if want := [2]string{"a", "b"}[set] + "=" + consumerName(int32(consumer)); first.GetKey()+"="+first.GetValue() != want {
			t.Fatalf("call %d of set %d sends %s=%s, want %s", j, set, first.GetKey(), first.GetValue(), want)
		}
	}
	for c := range 2 {
		if perSet[[2]int{c, 0}] != 4 || perSet[[2]int{c, 1}] != 12 {
			t.Errorf("consumer %d sent the sets %d and %d times, want 4 and 12", c, perSet[[2]int{c, 0}], perSet[[2]int{c, 1}])
		}
	}
	r := rlsMeeting(cfg, calls, samples, consumerName)
	var got []string
	for k, e := range r.exps {
		got = append(got, fmt.Sprintf("%s×%d", e.id, len(r.m.of[k].idx)))
	}
	if want := []string{"a={consumer}×8", "g=global×32", "b={consumer}×24"}; !slices.Equal(got, want) {
		t.Errorf("limits met %v, want %v", got, want)
	}
	a := auditLimits(samples, nil, r.exps, r.m, coverage{horizon: -1, skipUnder: severalDescriptors})
	if a.Limits[0].Requests != 8 || a.Limits[1].Requests != 32 || a.Limits[2].Requests != 24 {
		t.Errorf("requests per limit: %d, %d, %d; want 8, 32, 24", a.Limits[0].Requests, a.Limits[1].Requests, a.Limits[2].Requests)
	}
}
