package reports

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/bench"
)

func TestSparkline(t *testing.T) {
	if got := sparkline([]float64{1, 4.5, 8, 8}); got != "▁▄██" {
		t.Errorf("sparkline = %q", got)
	}
	if got := sparkline([]float64{3, 3}); got != "▁▁" {
		t.Errorf("flat sparkline = %q", got)
	}
	r := bench.Result{Timeline: bench.Timeline{IntervalMillis: 1000}}
	if lines := benchSparklines(r); lines != nil {
		t.Errorf("no intervals drew %q", lines)
	}
	r.Timeline.Intervals = make([]bench.Interval, 3)
	for i := range r.Timeline.Intervals {
		r.Timeline.Intervals[i].ThroughputRPS = float64(100 * (i + 1))
		r.Timeline.Intervals[i].LatencyMicros.P99 = int64(1000 * (3 - i))
	}
	lines := benchSparklines(r)
	if len(lines) != 2 || !strings.Contains(lines[0], "▁▄█  100–300 responses/s, one mark per 1s") ||
		!strings.Contains(lines[1], "█▄▁  1ms–3ms") {
		t.Errorf("sparklines %q", lines)
	}
}
