package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// fakeProber answers the audit's requests for probes with what it is told
// to find, and notes what it was asked.
type fakeProber struct {
	denied  []sample
	found   []retried
	retries [][]sample // the denials each retry was asked about
}

func (f *fakeProber) denials(context.Context, int, int64) []sample { return f.denied }

func (f *fakeProber) waitFor(s sample) time.Duration { return s.retryAfter }
func (f *fakeProber) waitName() string               { return "Retry-After" }

func (f *fakeProber) retry(_ context.Context, d []sample) []retried {
	f.retries = append(f.retries, d)
	return f.found[:len(d)]
}

// TestRetryAfterVerdict: the audit judges what the engine's probes found,
// and asks only about denials it can trust.
func TestRetryAfterVerdict(t *testing.T) {
	// Times in ms since the run began.
	denial := func(consumer int32, ms int, retryAfter time.Duration) sample {
		sent := time.Duration(ms) * time.Millisecond
		return sample{consumer: consumer, status: 429, sent: sent, done: sent + time.Millisecond, retryAfter: retryAfter,
			limit: -1, remaining: -1, reset: -1}
	}
	ok := func(consumer int32, ms int) sample {
		sent := time.Duration(ms) * time.Millisecond
		return sample{consumer: consumer, status: 200, sent: sent, done: sent + time.Millisecond, retryAfter: -1, limit: -1, remaining: -1, reset: -1}
	}
	onTime := retried{asked: true, admitted: true, first: true}
	for _, tc := range []struct {
		name    string
		samples []sample
		denied  []sample // what driving to a denial finds
		found   []retried
		honest  string // "true", "false" or "" (null)
		maxErr  int64
		probes  int
		skipped bool
		asked   []int32 // the consumers retried
	}{
		{name: "on time", samples: []sample{ok(1, 1), denial(1, 10, time.Second), denial(0, 5, time.Second)},
			found: []retried{onTime, onTime}, honest: "true", probes: 2, asked: []int32{0, 1}},
		{name: "admitted early", samples: []sample{denial(0, 1, time.Second)},
			found: []retried{{asked: true, early: true}}, honest: "false", probes: 1, asked: []int32{0}},
		{name: "late", samples: []sample{denial(0, 1, time.Second), denial(1, 1, time.Second)},
			found: []retried{onTime, {asked: true, admitted: true, late: 1200*time.Millisecond + 1}}, honest: "false", maxErr: 1201, probes: 2,
			asked: []int32{0, 1}},
		{name: "never admitted", samples: []sample{denial(0, 1, time.Second)},
			found: []retried{{asked: true}}, honest: "false", maxErr: 10_000, probes: 1, asked: []int32{0}},
		// Admitted just before, its reply back too late to tell: no claim.
		{name: "too slow to tell", samples: []sample{denial(0, 1, time.Second)},
			found: []retried{{asked: true, unsure: true}}, probes: 0, skipped: true, asked: []int32{0}},
		{name: "one too slow to tell", samples: []sample{denial(0, 1, time.Second), denial(1, 1, time.Second)},
			found: []retried{{asked: true, unsure: true}, onTime}, honest: "true", probes: 1, asked: []int32{0, 1}},
		{name: "not asked", samples: []sample{denial(0, 1, time.Second)},
			found: []retried{{}}, probes: 0, asked: []int32{0}},
		// A 429 that a success came back after tells nothing: drive one.
		{name: "untrusted denial", samples: []sample{denial(0, 1, time.Second), ok(0, 5)}, denied: []sample{denial(2, 9, time.Second)},
			found: []retried{onTime}, honest: "true", probes: 1, asked: []int32{2}},
		{name: "no denial", samples: []sample{ok(0, 1)}, skipped: true},
		{name: "too long", samples: []sample{denial(0, 1, 71*time.Second)}, skipped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeProber{denied: tc.denied, found: tc.found}
			var a audit.LimitAudit
			probeRetryAfter(context.Background(), f, tc.samples, &a)
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
					asked = append(asked, s.consumer)
				}
			}
			if len(f.retries) > 1 || len(asked) != len(tc.asked) || (len(asked) > 0 && !slices.Equal(asked, tc.asked)) {
				t.Fatalf("retried %v, want consumers %v once", f.retries, tc.asked)
			}
		})
	}
}
