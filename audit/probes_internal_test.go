package audit

import (
	"context"
	"slices"
	"testing"
	"time"
)

// fakeProber answers the audit's requests for probes with what it is told
// to find, and notes what it was asked.
type fakeProber struct {
	denied  []Sample
	found   []Retried
	retries [][]Sample // the denials each retry was asked about
	early   []bool     // whether each retry was to probe before the wait too
}

func (f *fakeProber) Denials(context.Context, int, int64) []Sample { return f.denied }

func (f *fakeProber) Wait(s Sample) time.Duration { return s.RetryAfter }
func (f *fakeProber) WaitName() string            { return "Retry-After" }

func (f *fakeProber) Retry(_ context.Context, d []Sample, early bool) []Retried {
	f.retries = append(f.retries, d)
	f.early = append(f.early, early)
	return f.found[:len(d)]
}

// TestRetryAfterVerdict: the audit judges what the engine's probes found,
// and asks only about denials it can trust.
func TestRetryAfterVerdict(t *testing.T) {
	// Times in ms since the run began.
	denial := func(consumer int32, ms int, retryAfter time.Duration) Sample {
		sent := time.Duration(ms) * time.Millisecond
		return Sample{Consumer: consumer, Status: 429, Sent: sent, Done: sent + time.Millisecond, RetryAfter: retryAfter,
			limit: -1, remaining: -1, Reset: -1}
	}
	ok := func(consumer int32, ms int) Sample {
		sent := time.Duration(ms) * time.Millisecond
		return Sample{Consumer: consumer, Status: 200, Sent: sent, Done: sent + time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
	}
	onTime := Retried{Asked: true, Admitted: true, First: true}
	for _, tc := range []struct {
		name    string
		samples []Sample
		denied  []Sample // what driving to a denial finds
		found   []Retried
		honest  string // "true", "false" or "" (null)
		maxErr  int64
		probes  int
		skipped bool
		asked   []int32 // the consumers retried
	}{
		{name: "on time", samples: []Sample{ok(1, 1), denial(1, 10, time.Second), denial(0, 5, time.Second)},
			found: []Retried{onTime, onTime}, honest: "true", probes: 2, asked: []int32{0, 1}},
		{name: "admitted early", samples: []Sample{denial(0, 1, time.Second)},
			found: []Retried{{Asked: true, Early: true}}, honest: "false", probes: 1, asked: []int32{0}},
		{name: "late", samples: []Sample{denial(0, 1, time.Second), denial(1, 1, time.Second)},
			found: []Retried{onTime, {Asked: true, Admitted: true, Late: 1200*time.Millisecond + 1}}, honest: "false", maxErr: 1201, probes: 2,
			asked: []int32{0, 1}},
		{name: "never admitted", samples: []Sample{denial(0, 1, time.Second)},
			found: []Retried{{Asked: true}}, honest: "false", maxErr: 10_000, probes: 1, asked: []int32{0}},
		// Admitted just before, its reply back too late to tell: no claim.
		{name: "too slow to tell", samples: []Sample{denial(0, 1, time.Second)},
			found: []Retried{{Asked: true, Unsure: true}}, probes: 0, skipped: true, asked: []int32{0}},
		{name: "one too slow to tell", samples: []Sample{denial(0, 1, time.Second), denial(1, 1, time.Second)},
			found: []Retried{{Asked: true, Unsure: true}, onTime}, honest: "true", probes: 1, asked: []int32{0, 1}},
		{name: "not asked", samples: []Sample{denial(0, 1, time.Second)},
			found: []Retried{{}}, probes: 0, asked: []int32{0}},
		// A 429 that a success came back after tells nothing: drive one.
		{name: "untrusted denial", samples: []Sample{denial(0, 1, time.Second), ok(0, 5)}, denied: []Sample{denial(2, 9, time.Second)},
			found: []Retried{onTime}, honest: "true", probes: 1, asked: []int32{2}},
		{name: "no denial", samples: []Sample{ok(0, 1)}, skipped: true},
		{name: "too long", samples: []Sample{denial(0, 1, 71*time.Second)}, skipped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeProber{denied: tc.denied, found: tc.found}
			var a LimitAudit
			early := len(tc.name)%2 == 0 // either way, passed on as asked
			probeRetryAfter(context.Background(), f, tc.samples, &a, early)
			r := a.RetryAfter
			honest := ""
			if r.Honest != nil {
				honest = map[bool]string{true: "true", false: "false"}[*r.Honest]
			}
			if honest != tc.honest || r.MaxErrorMillis != tc.maxErr || r.Probes != tc.probes || (r.Skipped != "") != tc.skipped {
				t.Fatalf("%+v, want honest %q, max error %d ms, %d probes, skipped %v", r, tc.honest, tc.maxErr, tc.probes, tc.skipped)
			}
			var asked []int32
			for _, d := range f.retries {
				for _, s := range d {
					asked = append(asked, s.Consumer)
				}
			}
			if len(f.retries) > 1 || len(asked) != len(tc.asked) || (len(asked) > 0 && !slices.Equal(asked, tc.asked)) {
				t.Fatalf("retried %v, want consumers %v once", f.retries, tc.asked)
			}
			if len(f.early) == 1 && f.early[0] != early {
				t.Fatalf("retried with early %v, asked for %v", f.early[0], early)
			}
		})
	}
}
