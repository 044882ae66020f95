// Package hdr is how ratelab records latencies: HDR histograms of
// microseconds over one range, and the percentiles every result reports from
// them.
package hdr

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The range of every latency histogram, in µs: Lowest is 1 µs and Highest
// one hour. Record puts a value outside it at the nearer end.
const (
	Lowest  int64 = 1
	Highest int64 = int64(time.Hour / time.Microsecond)
)

// Digits is the number of significant digits New keeps: a recorded value
// reads back within 0.1% of what was recorded.
const Digits = 3

// New returns an empty histogram of µs from Lowest to Highest at Digits
// significant digits (about 190 KB). A histogram is not safe for concurrent
// use: keep one per goroutine and Merge them once the goroutines are done.
func New() *hdrhistogram.Histogram {
	return hdrhistogram.New(Lowest, Highest, Digits)
}

// Record adds one value in µs to h. A value below Lowest counts as Lowest
// and one above Highest as Highest, so that no value goes uncounted.
func Record(h *hdrhistogram.Histogram, micros int64) {
	_ = h.RecordValue(min(max(micros, Lowest), Highest))
}

// Percentiles summarise a histogram of latencies; every figure is in µs.
// All are zero for an empty histogram.
type Percentiles struct {
	P50 int64 `json:"p50"`
	P90 int64 `json:"p90"`
	P95 int64 `json:"p95"`
	P99 int64 `json:"p99"`
	// P999 is the 99.9th percentile.
	P999 int64 `json:"p999"`
	Max  int64 `json:"max"`
	// Count is the number of values behind them.
	Count int64 `json:"count"`
}

// PercentilesOf reads the percentiles of h.
func PercentilesOf(h *hdrhistogram.Histogram) Percentiles {
	return Percentiles{
		P50:   h.ValueAtPercentile(50),
		P90:   h.ValueAtPercentile(90),
		P95:   h.ValueAtPercentile(95),
		P99:   h.ValueAtPercentile(99),
		P999:  h.ValueAtPercentile(99.9),
		Max:   h.Max(),
		Count: h.TotalCount(),
	}
}
