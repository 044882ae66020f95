package bench_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// stallOnce answers at once, except one request after the first stallAfter,
// which it holds for stall: the server stops serving for that long.
func stallOnce(stallAfter int64, stall time.Duration) http.Handler {
	var n atomic.Int64
	var mu sync.Mutex // one request at a time: a stall holds everyone, like a GC pause
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if n.Add(1) == stallAfter {
			time.Sleep(stall)
		}
		w.WriteHeader(http.StatusOK)
	})
}

// TestOpenModelSeesTheStall: at a steady 200 requests/s for 3 s, one 500 ms
// stall delays every request scheduled during it. Timed from when each
// should have been sent, well over 1% of requests wait 100 ms or more, so
// the p99 shows the stall; the closed model, which waits for the server
// before sending, records the stall once and its p99 hides it.
func TestOpenModelSeesTheStall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	run := func(cfg bench.HTTPConfig) bench.Result {
		srv := httptest.NewServer(stallOnce(100, 500*time.Millisecond))
		defer srv.Close()
		cfg.Target = srv.URL
		res, err := bench.RunHTTP(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	open := run(bench.HTTPConfig{Rate: 200, Duration: 3 * time.Second})
	closed := run(bench.HTTPConfig{Rate: 0, Connections: 1, Duration: 3 * time.Second})
	t.Logf("open model: %d requests, p50 %dµs, p99 %dµs, max %dµs", open.Requests, open.LatencyMicros.P50, open.LatencyMicros.P99, open.LatencyMicros.Max)
	t.Logf("closed model: %d requests, p50 %dµs, p99 %dµs, max %dµs", closed.Requests, closed.LatencyMicros.P50, closed.LatencyMicros.P99, closed.LatencyMicros.Max)
	if open.LatencyMicros.P99 < 100_000 {
		t.Fatalf("open model p99 %dµs: the 500 ms stall is hidden", open.LatencyMicros.P99)
	}
	// About 100 requests were due during the stall, 2% of the 600: each waited.
	h := open.Histogram()
	late := h.TotalCount() - countBelow(h, 100_000)
	if late < 50 {
		t.Fatalf("only %d requests waited 100 ms or more; ~100 were scheduled during the stall", late)
	}
	if closed.LatencyMicros.P99 >= 100_000 || closed.LatencyMicros.Max < 500_000 {
		t.Fatalf("closed model p99 %dµs, max %dµs: want the stall in max only", closed.LatencyMicros.P99, closed.LatencyMicros.Max)
	}
	if open.Requests < 590 || open.Unsent != 0 || open.StatusCounts["200"] != open.Requests {
		t.Fatalf("open model: %d requests, %d unsent, statuses %v", open.Requests, open.Unsent, open.StatusCounts)
	}
}

func countBelow(h *hdrhistogram.Histogram, v int64) int64 {
	var n int64
	for _, b := range h.Distribution() {
		if b.To < v {
			n += b.Count
		}
	}
	return n
}

// TestRequestsWarmupConsumers: --requests bounds the measured part, the
// warm-up is counted apart, consumers take turns, and statuses are split.
func TestRequestsWarmupConsumers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Consumer-Id")
		mu.Lock()
		seen[c]++
		n := seen[c]
		mu.Unlock()
		if n > 3 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Connections: 4, Requests: 100,
		Warmup: 50 * time.Millisecond, Consumers: 5, ConsumerHeader: "X-Consumer-Id"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 100 || res.LatencyMicros.Count != 100 || res.SendLagMicros.Count != 100 {
		t.Fatalf("%d measured requests (%d latencies, %d send lags), want 100", res.Requests,
			res.LatencyMicros.Count, res.SendLagMicros.Count)
	}
	if res.StatusCounts["200"]+res.StatusCounts["429"] != 100 || res.Latency429Micros.Count != res.StatusCounts["429"] {
		t.Fatalf("statuses %v, 429 latencies %d", res.StatusCounts, res.Latency429Micros.Count)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 || !strings.HasPrefix(firstKey(seen), "consumer-") {
		t.Fatalf("consumers seen: %v", seen)
	}
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  bench.HTTPConfig
		want string
	}{
		{bench.HTTPConfig{Target: "ftp://x", Duration: time.Second}, `Target "ftp://x": want an http:// or https:// URL`},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Rate: -1, Duration: time.Second}, "Rate must be between 0"},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/"}, "Duration or Requests must bound the run"},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Consumers: 3}, "Consumers needs ConsumerHeader"},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Header: http.Header{"X-A": {"a\r\nX-B: 1"}}},
			`Header X-A: "a\r\nX-B: 1" holds a line break`},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Header: http.Header{"X A": {"1"}}}, `Header "X A" is not a header name`},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Method: "GET / HTTP/1.1\r\n"}, `Method "GET / HTTP/1.1\r\n" is not an HTTP method`},
		{bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Consumers: 3, ConsumerHeader: "X-Id\r\nX-B"},
			`ConsumerHeader "X-Id\r\nX-B" is not a header name`},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestProgress: a run of 2.5 s at 100/s reports its progress while it
// runs: what is done only grows and never passes what the run sent, and a
// whole interval's figures are of responses the run counted.
func TestProgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var got []bench.Progress
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 100, Duration: 2500 * time.Millisecond,
		Progress: func(p bench.Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no progress in 2.5 s")
	}
	for i, p := range got {
		if p.Phase != "run" || p.Done > res.Requests || (i > 0 && p.Done < got[i-1].Done) {
			t.Fatalf("progress %d of %+v (%d requests in all)", i, got, res.Requests)
		}
		// A whole interval's rate counts responses the run counted.
		if p.RatePerSec < 0 || int64(p.RatePerSec) > res.Requests || (p.RatePerSec > 0 && p.P99Micros <= 0) {
			t.Fatalf("progress %d of %+v", i, got)
		}
	}
}

// TestCancel: cancelling stops the run and returns what was measured.
func TestCancel(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := bench.RunHTTP(ctx, bench.HTTPConfig{Target: srv.URL, Rate: 100, Duration: time.Hour})
	if err == nil || res.Requests == 0 {
		t.Fatalf("err %v, %d requests: want the context's error and what was measured", err, res.Requests)
	}
}
