package bench

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Merge combines runs of one test from several load machines into one
// result: counts add up, and the percentiles come from the merged
// histograms, so they are exact, not averages of percentiles. Throughput is
// the sum of the runs' (they ran at the same time); the duration is the
// longest.
func Merge(runs []Result) (Result, error) {
	if len(runs) == 0 {
		return Result{}, errors.New("nothing to merge")
	}
	hists := map[string]*hdrhistogram.Histogram{}
	for _, name := range []string{"all", "2xx", "429", "other", "errors", "send_lag"} {
		hists[name] = newHist()
	}
	t := &recorder{status: map[int]int64{}}
	var longest float64
	var rps float64
	for i, r := range runs {
		if r.Command != "bench_http" {
			return Result{}, fmt.Errorf("run %d is a %q result, not bench_http", i+1, r.Command)
		}
		if r.Target != runs[0].Target {
			return Result{}, fmt.Errorf("run %d measured %s, run 1 %s: merge runs of one target", i+1, r.Target, runs[0].Target)
		}
		for name, h := range hists {
			enc, ok := r.Histograms[name]
			if !ok {
				return Result{}, fmt.Errorf("run %d has no %q histogram (was it written with --output json?)", i+1, name)
			}
			d, err := hdrhistogram.Decode([]byte(enc))
			if err != nil {
				return Result{}, fmt.Errorf("run %d: histogram %q: %w", i+1, name, err)
			}
			h.Merge(d)
		}
		for k, v := range r.StatusCounts {
			code, err := strconv.Atoi(k)
			if err != nil {
				return Result{}, fmt.Errorf("run %d: status %q", i+1, k)
			}
			t.status[code] += v
		}
		t.errors += r.Errors
		t.bytes += r.Bytes
		t.warmup += r.WarmupRequests
		longest = max(longest, r.DurationSeconds)
		rps += r.ThroughputRPS
	}
	t.all, t.ok, t.limited, t.other, t.failed, t.lag = hists["all"], hists["2xx"], hists["429"], hists["other"], hists["errors"], hists["send_lag"]
	cfg := HTTPConfig{Target: runs[0].Target, Method: runs[0].Config.Method}
	for _, r := range runs {
		cfg.Rate += r.Config.RatePerSec
		cfg.Connections += r.Config.Connections
		cfg.MaxInFlight += r.Config.MaxInFlight
		cfg.Consumers = max(cfg.Consumers, r.Config.Consumers)
	}
	cfg.ConsumerHeader = runs[0].Config.ConsumerHeader
	cfg.Duration = time.Duration(longest * float64(time.Second))
	res := newResult(cfg, t, cfg.Duration)
	res.ThroughputRPS = rps
	res.RateShortfall = cfg.Rate > 0 && rps < 0.99*cfg.Rate
	for _, r := range runs {
		res.Unsent += r.Unsent
	}
	return res, nil
}
