package bench_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/field"
)

func TestNextStart(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		now   time.Time
		every time.Duration
		want  string
	}{
		{at("2026-12-02T18:00:00Z"), time.Minute, "2026-12-02T18:01:00Z"},
		{at("2026-12-02T18:00:44.999Z"), time.Minute, "2026-12-02T18:01:00Z"},
		// The margin's edge: exactly 15 s away is far enough, a nanosecond less is not.
		{at("2026-12-02T18:00:45Z"), time.Minute, "2026-12-02T18:01:00Z"},
		{at("2026-12-02T18:00:45.000000001Z"), time.Minute, "2026-12-02T18:02:00Z"},
		{at("2026-12-02T18:00:59.9Z"), time.Minute, "2026-12-02T18:02:00Z"},
		// A step shorter than the margin: the first multiple past it.
		{at("2026-12-02T18:00:00.5Z"), time.Second, "2026-12-02T18:00:16Z"},
		{at("2026-12-02T18:00:10Z"), 10 * time.Second, "2026-12-02T18:00:30Z"},
		{at("2026-12-02T18:00:10Z"), 5 * time.Minute, "2026-12-02T18:05:00Z"},
		{at("2026-12-02T18:59:50Z"), time.Hour, "2026-12-02T20:00:00Z"},
		{at("2026-12-02T23:59:30Z"), time.Minute, "2026-12-03T00:00:00Z"},
		// The UTC clock's marks, whatever the zone now is read in.
		{at("2026-12-02T18:00:00Z").In(paris), time.Hour, "2026-12-02T19:00:00Z"},
	} {
		t.Run(tc.now.Format(time.RFC3339Nano)+"/"+tc.every.String(), func(t *testing.T) {
			got, err := bench.NextStart(tc.now, tc.every)
			if err != nil {
				t.Fatal(err)
			}
			if s := got.Format(time.RFC3339Nano); s != tc.want {
				t.Fatalf("NextStart = %s, want %s", s, tc.want)
			}
			if got.Sub(tc.now) < bench.StartMargin {
				t.Fatalf("NextStart = %s, less than %s after %s", got, bench.StartMargin, tc.now)
			}
		})
	}
	for _, every := range []time.Duration{0, -time.Minute, 999 * time.Millisecond, time.Hour + time.Second} {
		_, err := bench.NextStart(at("2026-12-02T18:00:00Z"), every)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != "Every" {
			t.Errorf("every %s: error %v, want one naming Every", every, err)
		}
	}
}
