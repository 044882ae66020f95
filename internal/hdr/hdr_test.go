package hdr_test

import (
	"encoding/json"
	"testing"

	"github.com/ratelab/ratelab/internal/hdr"
)

// near reports whether got is within the histogram's precision (0.1%, and
// one unit) of want.
func near(got, want int64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= want/1000+1
}

// TestPercentilesOf: every field reads its own percentile of the values.
func TestPercentilesOf(t *testing.T) {
	h := hdr.New()
	for v := int64(1); v <= 10_000; v++ {
		hdr.Record(h, v)
	}
	p := hdr.PercentilesOf(h)
	for _, tc := range []struct {
		name      string
		got, want int64
	}{
		{"p50", p.P50, 5000},
		{"p90", p.P90, 9000},
		{"p95", p.P95, 9500},
		{"p99", p.P99, 9900},
		{"p999", p.P999, 9990},
		{"max", p.Max, 10_000},
	} {
		if !near(tc.got, tc.want) {
			t.Errorf("%s = %d, want %d within 0.1%%", tc.name, tc.got, tc.want)
		}
	}
	if p.Count != 10_000 {
		t.Errorf("count = %d, want 10000", p.Count)
	}
}

// TestEmpty: a histogram with nothing recorded reads all zeros.
func TestEmpty(t *testing.T) {
	if p := hdr.PercentilesOf(hdr.New()); p != (hdr.Percentiles{}) {
		t.Errorf("empty histogram: %+v, want zeros", p)
	}
}

// TestRecordClamps: values outside the range are counted at its ends, never
// dropped.
func TestRecordClamps(t *testing.T) {
	h := hdr.New()
	hdr.Record(h, -5)
	hdr.Record(h, 0)
	hdr.Record(h, 10*hdr.Highest)
	if h.TotalCount() != 3 {
		t.Fatalf("%d values counted, want 3", h.TotalCount())
	}
	if h.Min() != hdr.Lowest {
		t.Errorf("min = %d, want %d", h.Min(), hdr.Lowest)
	}
	if !near(h.Max(), hdr.Highest) {
		t.Errorf("max = %d, want %d within 0.1%%", h.Max(), hdr.Highest)
	}
}

// TestRange: New covers 1 µs to an hour at three significant digits.
func TestRange(t *testing.T) {
	h := hdr.New()
	if h.LowestTrackableValue() != 1 || h.HighestTrackableValue() < 3_600_000_000 || h.SignificantFigures() != 3 {
		t.Errorf("range %d to %d at %d digits, want 1 to 3600000000 at 3",
			h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures())
	}
}

// TestJSON: the field names results have always had, in µs.
func TestJSON(t *testing.T) {
	b, err := json.Marshal(hdr.Percentiles{P50: 1, P90: 2, P95: 3, P99: 4, P999: 5, Max: 6, Count: 7})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"p50":1,"p90":2,"p95":3,"p99":4,"p999":5,"max":6,"count":7}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}
