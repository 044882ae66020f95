package bench

import (
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Percentiles are latencies in microseconds.
type Percentiles struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P95  int64 `json:"p95"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p999"`
	Max  int64 `json:"max"`
	// Count is the number of responses behind them.
	Count int64 `json:"count"`
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	return Percentiles{
		P50: h.ValueAtPercentile(50), P90: h.ValueAtPercentile(90), P95: h.ValueAtPercentile(95),
		P99: h.ValueAtPercentile(99), P999: h.ValueAtPercentile(99.9), Max: h.Max(), Count: h.TotalCount(),
	}
}

// Settings is the configuration as reports show it.
type Settings struct {
	Model          string  `json:"model"` // "open" (a fixed schedule) or "closed" (back to back)
	Method         string  `json:"method"`
	RatePerSec     float64 `json:"rate_per_sec"`
	Connections    int     `json:"connections"`
	MaxInFlight    int     `json:"max_in_flight"`
	DurationMillis int64   `json:"duration_ms"`
	Requests       int64   `json:"requests"`
	WarmupMillis   int64   `json:"warmup_ms"`
	Consumers      int     `json:"consumers"`
	ConsumerHeader string  `json:"consumer_header"`
}

// Result is one run, measured after the warm-up.
type Result struct {
	Command string   `json:"command"` // "bench_http"
	Target  string   `json:"target"`
	Config  Settings `json:"config"`
	// Requests is the number of measured requests that completed or failed.
	Requests int64 `json:"requests"`
	// DurationSeconds is the measured time, warm-up excluded.
	DurationSeconds float64 `json:"duration_s"`
	ThroughputRPS   float64 `json:"throughput_rps"`
	// StatusCounts counts responses by status code.
	StatusCounts map[string]int64 `json:"status_counts"`
	// Errors counts transport errors and timeouts.
	Errors int64 `json:"errors"`
	Bytes  int64 `json:"bytes"`
	// WarmupRequests were sent during the warm-up and are not in the figures.
	WarmupRequests int64 `json:"warmup_requests"`
	// Unsent counts the open model's requests whose time came during the run
	// but that were never sent (every worker was busy): not skipped silently.
	Unsent int64 `json:"unsent"`
	// RateShortfall is set when the open model achieved under 99% of the rate.
	RateShortfall bool `json:"rate_shortfall"`
	// LatencyMicros is measured from when each request should have been sent
	// (open model) or was sent (closed model), in µs; the others split it by outcome.
	LatencyMicros      Percentiles `json:"latency_us"`
	Latency2xxMicros   Percentiles `json:"latency_2xx_us"`
	Latency429Micros   Percentiles `json:"latency_429_us"`
	LatencyOtherMicros Percentiles `json:"latency_other_us"`
	LatencyErrorMicros Percentiles `json:"latency_error_us"`
	// SendLagMicros is actual minus intended send time, in µs.
	SendLagMicros struct {
		P50 int64 `json:"p50"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"send_lag_us"`
	// Histograms keeps every histogram, HdrHistogram V2 compressed and base64
	// encoded, so that runs from several machines can be merged exactly.
	Histograms map[string]string `json:"histograms"`
	// Audit is what the admission audit found; null without --expect-limit.
	Audit *Audit `json:"audit"`

	all *hdrhistogram.Histogram
}

// Histogram is the latency histogram of all responses, in µs.
func (r Result) Histogram() *hdrhistogram.Histogram { return r.all }

func newResult(cfg HTTPConfig, t *recorder, elapsed time.Duration) Result {
	model := "closed"
	if cfg.Rate > 0 {
		model = "open"
	}
	r := Result{
		Command: "bench_http",
		Target:  cfg.Target,
		Config: Settings{Model: model, Method: cfg.Method, RatePerSec: cfg.Rate, Connections: cfg.Connections,
			MaxInFlight: cfg.MaxInFlight, DurationMillis: cfg.Duration.Milliseconds(), Requests: cfg.Requests,
			WarmupMillis: cfg.Warmup.Milliseconds(), Consumers: cfg.Consumers, ConsumerHeader: cfg.ConsumerHeader},
		Requests:           t.all.TotalCount(),
		DurationSeconds:    elapsed.Seconds(),
		StatusCounts:       map[string]int64{},
		Errors:             t.errors,
		Bytes:              t.bytes,
		WarmupRequests:     t.warmup,
		LatencyMicros:      percentiles(t.all),
		Latency2xxMicros:   percentiles(t.ok),
		Latency429Micros:   percentiles(t.limited),
		LatencyOtherMicros: percentiles(t.other),
		LatencyErrorMicros: percentiles(t.failed),
		Histograms:         map[string]string{},
		all:                t.all,
	}
	if elapsed > 0 {
		r.ThroughputRPS = float64(r.Requests) / elapsed.Seconds()
	}
	if cfg.Rate > 0 && r.ThroughputRPS < 0.99*cfg.Rate {
		r.RateShortfall = true
	}
	for k, v := range t.status {
		r.StatusCounts[strconv.Itoa(k)] = v
	}
	r.SendLagMicros.P50, r.SendLagMicros.P99, r.SendLagMicros.Max = t.lag.ValueAtPercentile(50), t.lag.ValueAtPercentile(99), t.lag.Max()
	for name, h := range map[string]*hdrhistogram.Histogram{"all": t.all, "2xx": t.ok, "429": t.limited,
		"other": t.other, "errors": t.failed, "send_lag": t.lag} {
		if b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
			r.Histograms[name] = string(b) // already base64, as HdrHistogram's logs keep it
		}
	}
	return r
}
