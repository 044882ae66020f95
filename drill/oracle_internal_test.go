package drill

import (
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
)

// TestDetectAndRecover: detect runs from the fault's start to the first
// answer made without Redis; recover from its end to the last such answer
// before Redis decided a request sent after the end. A failure after that
// is an error, not the fault going on.
func TestDetectAndRecover(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	answer := func(sent, done int, byRedis bool) bench.Response {
		return bench.Response{Consumer: 0, Due: at(sent), Sent: at(sent), Done: at(done), Status: 200, Limited: byRedis}
	}
	w := window{start: at(1000), end: at(2000)}
	cfg := Config{Algorithm: "sliding-log", Policy: algorithms.Policy{Limit: 1000, Window: time.Second}, Consumers: 1}
	ms := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	for _, tc := range []struct {
		name            string
		rs              []bench.Response
		detect, recover any
	}{
		{"recovered, then one late failure",
			[]bench.Response{answer(500, 510, true), answer(1100, 1150, false), answer(1900, 2080, false),
				answer(2100, 2120, true), answer(2500, 3000, false), answer(2600, 2610, true)},
			int64(150), int64(80)},
		{"Redis decided first after the end",
			[]bench.Response{answer(1100, 1150, false), answer(1500, 1520, false), answer(2010, 2015, true)},
			int64(150), int64(0)},
		{"never decided again",
			[]bench.Response{answer(500, 510, true), answer(1100, 1150, false), answer(2100, 2120, false)},
			int64(150), nil},
		{"never failed",
			[]bench.Response{answer(500, 510, true), answer(1100, 1150, true), answer(2100, 2120, true)},
			nil, nil},
	} {
		row := judge(cfg, tc.rs, w)
		if ms(row.DetectMillis) != tc.detect || ms(row.RecoverMillis) != tc.recover {
			t.Errorf("%s: detect %v, recover %v; want %v, %v", tc.name, ms(row.DetectMillis), ms(row.RecoverMillis), tc.detect, tc.recover)
		}
	}
}
