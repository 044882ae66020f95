package audit

import (
	"slices"
	"strings"
	"testing"
	"time"

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
func (svc rlsService) answer(calls int) ([]Sample, []advert) {
	windows := [2]time.Duration{time.Second, time.Minute}
	var used [2]int64
	var at [2]time.Duration // each counter's window
	var samples []Sample
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
		s := Sample{Consumer: 0, Sent: sent, Done: sent + time.Millisecond, Status: 200, RetryAfter: -1, limit: -1, remaining: -1,
			Reset: max(reset[0], reset[1])}
		s.advAt, s.advN = uint32(len(advs)), 2
		for d := range used {
			r := max(svc.limits[d]-svc.fallBy*used[d], 0)
			if over[d] {
				r = svc.overSays
			}
			if !ok && (over[d] || r == 0) {
				s.Status, s.RetryAfter = 429, max(s.RetryAfter, reset[d])
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

// serviceOf is the run of one consumer's calls of descriptors, each
// key=value[,key=value…] ({consumer} standing for its identity), to
// domain d, audited by set.
func serviceOf(set *rules.Set, descriptors []string) Service {
	return Service{Domain: "d", Sets: [][]string{descriptors}, Consumers: 1, Config: set,
		Sent: func(_, consumer int) [][]rules.Entry {
			var out [][]rules.Entry
			for _, d := range descriptors {
				var entries []rules.Entry
				for _, e := range strings.Split(d, ",") {
					k, v, _ := strings.Cut(e, "=")
					entries = append(entries, rules.Entry{Key: k, Value: strings.ReplaceAll(v, "{consumer}", consumerName(int32(consumer)))})
				}
				out = append(out, entries)
			}
			return out
		},
		Label: func(entries []rules.Entry) string {
			var parts []string
			for _, e := range entries {
				parts = append(parts, e.Key+"="+e.Value)
			}
			return strings.Join(parts, ",")
		}}
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
		descriptors []string
		svc         rlsService
		verdict     Verdict
		violation   string // in the headers' example; "" for none
	}{
		{"spends refused calls", []string{"a=x", "b=x"}, rlsService{limits: [2]int64{5, 100}, spendRefused: true, fallBy: 1}, Held, ""},
		{"spends nothing of refused calls", []string{"a=x", "b=x"}, rlsService{limits: [2]int64{5, 100}, fallBy: 1}, Held, ""},
		{"one descriptor", []string{"a=x"}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 1}, Held, ""},
		{"remaining falls by two", []string{"a=x"}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 2}, Held, "remaining fell from 3 to 1"},
		{"refused with some remaining", []string{"a=x"}, rlsService{limits: [2]int64{5, 1 << 20}, fallBy: 1, overSays: 2}, Held,
			"was refused with 2 remaining"},
		{"admits three times the limit", []string{"a=x"}, rlsService{limits: [2]int64{15, 1 << 20}, fallBy: 1}, Leaked, "advertised a limit of 15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			samples, advs := tc.svc.answer(40)
			r := serviceOf(set, tc.descriptors).meeting(samples, consumerName)
			r.nameAdverts(samples, advs)
			for k := range r.exps {
				r.exps[k].refusedMaySpend, r.exps[k].refusedAtZero = len(tc.descriptors) > 1, true
			}
			cov := Coverage{horizon: -1}
			if len(tc.descriptors) > 1 {
				cov.skipUnder = severalDescriptors
			}
			a := auditLimits(samples, advs, r.exps, r.m, cov)
			if len(a.Limits) != len(tc.descriptors) || a.Limits[0].Verdict != tc.verdict {
				t.Fatalf("%d limits (%+v), want %d, the first %s", len(a.Limits), a.Limits, len(tc.descriptors), tc.verdict)
			}
			// b's 100 a minute is never reached by 40 calls.
			for _, l := range a.Limits[1:] {
				if l.Verdict != NotReached || !slices.Equal(l.Reasons, []string{"20 of 100 in 1m: not tested"}) {
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
		descriptors []string
		want        []string // the limits met, in the file's order
	}{
		{"alone", []string{"user={consumer}"}, []string{"default"}},
		{"replaced", []string{"plan=gold", "user={consumer}"}, []string{"gold"}},
		{"an unlimited limit replaced is met", []string{"plan=gold", "health=x"}, []string{"gold", "free"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := serviceOf(set, tc.descriptors).meeting([]Sample{{Consumer: 0, Status: 200}}, consumerName)
			var got []string
			for _, e := range r.exps {
				got = append(got, e.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("limits met %v, want %v", got, tc.want)
			}
		})
	}
}
