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

// TestOpenModelSeesTheStall: at 100 requests/s on one connection, the
// server holds request 5 until the test lets it go, 300 ms or more after it
// came in. Every later request is sent only after that, so each one due in
// the stall waited from when it was due, and the open model, which times a
// request from then, records it: the 20 or more due at least 100 ms before
// the release each take 100 ms or more, and the p99 shows the stall. Only
// lower bounds that the test's own stall sets are asserted: a loaded
// machine can only make the stall longer.
func TestOpenModelSeesTheStall(t *testing.T) {
	t.Parallel()
	const held = 5 // the request the server holds, from 0
	var n atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if n.Add(1) == held+1 {
			close(holding)
			<-release
		}
	}))
	defer srv.Close()
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	defer let() // before the server closes, whatever happens
	type run struct {
		res bench.Result
		err error
	}
	done := make(chan run, 1)
	go func() {
		res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 100, Requests: 60,
			Connections: 1, KeepResponses: true})
		done <- run{res, err}
	}()
	select {
	case <-holding:
	case r := <-done:
		t.Fatalf("the run ended (%v, %d requests) and the server held nothing", r.err, r.res.Requests)
	}
	time.Sleep(300 * time.Millisecond) // the stall itself
	released := time.Now()
	let()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	res := r.res
	t.Logf("%d requests, p50 %dµs, p99 %dµs, max %dµs", res.Requests, res.LatencyMicros.P50, res.LatencyMicros.P99, res.LatencyMicros.Max)
	// Bounded by --requests alone, the run sends every one, however late.
	if res.Requests != 60 || res.Unsent != 0 || res.StatusCounts["200"] != 60 || len(res.Responses()) != 60 {
		t.Fatalf("%d requests, %d unsent, statuses %v, %d kept", res.Requests, res.Unsent, res.StatusCounts, len(res.Responses()))
	}
	// Requests 6 to 25 at least were due 100 ms or more before the release
	// (request 5 came in at or after it was due, and was held 300 ms), and
	// were sent after it, on the one connection.
	var stalled int64
	for _, rs := range res.Responses() {
		if !rs.Due.After(released.Add(-100*time.Millisecond)) && !rs.Sent.Before(released) {
			stalled++
		}
	}
	if stalled < 20 {
		t.Fatalf("%d requests due 100 ms before the release were sent after it; the stall holds up 20 at least", stalled)
	}
	h := res.Histogram()
	if late := h.TotalCount() - countBelow(h, 100_000); late < stalled {
		t.Fatalf("%d latencies of 100 ms or more; %d requests waited that long from when they were due", late, stalled)
	}
	if res.LatencyMicros.P99 < 100_000 || res.LatencyMicros.Max < 300_000 {
		t.Fatalf("p99 %dµs, max %dµs: the stall of 300 ms or more is hidden", res.LatencyMicros.P99, res.LatencyMicros.Max)
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

// TestValidate: each field's bounds, both sides of each edge.
func TestValidate(t *testing.T) {
	// ok is a valid config changed by f.
	ok := func(f func(*bench.HTTPConfig)) bench.HTTPConfig {
		c := bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  bench.HTTPConfig
		want string // the error's start; "" for none
	}{
		{"ftp", bench.HTTPConfig{Target: "ftp://x", Duration: time.Second}, `Target "ftp://x": want an http:// or https:// URL`},
		{"port", bench.HTTPConfig{Target: "http://127.0.0.1:180810/", Duration: time.Second},
			`Target "http://127.0.0.1:180810/": the port "180810" is not between 1 and 65535`},
		{"port 0", bench.HTTPConfig{Target: "http://127.0.0.1:0/", Duration: time.Second}, `Target "http://127.0.0.1:0/": the port "0" is not between 1 and 65535`},
		{"negative rate", ok(func(c *bench.HTTPConfig) { c.Rate = -1 }), "Rate must be between 0"},
		{"unbounded", bench.HTTPConfig{Target: "http://127.0.0.1:1/"}, "Duration or Requests must bound the run"},
		{"consumers without a header", ok(func(c *bench.HTTPConfig) { c.Consumers = 3 }), "Consumers needs {consumer} in Target, Header or Body, or a ConsumerHeader"},
		{"timeout 0: the default", ok(func(c *bench.HTTPConfig) { c.Timeout = 0 }), ""},
		{"timeout 1ms", ok(func(c *bench.HTTPConfig) { c.Timeout = time.Millisecond }), ""},
		{"timeout 1h", ok(func(c *bench.HTTPConfig) { c.Timeout = time.Hour }), ""},
		{"timeout 500µs", ok(func(c *bench.HTTPConfig) { c.Timeout = 500 * time.Microsecond }), "Timeout must be between 1ms and 1h"},
		{"timeout 2h", ok(func(c *bench.HTTPConfig) { c.Timeout = 2 * time.Hour }), "Timeout must be between 1ms and 1h"},
		{"timeout 1h and 1ns", ok(func(c *bench.HTTPConfig) { c.Timeout = time.Hour + 1 }), "Timeout must be between 1ms and 1h"},
		{"timeout -1s", ok(func(c *bench.HTTPConfig) { c.Timeout = -time.Second }), "Timeout must be between 1ms and 1h"},
		{"shard 0/0: the whole run", ok(func(c *bench.HTTPConfig) {}), ""},
		{"shard 2/3", ok(func(c *bench.HTTPConfig) { c.Shard, c.Shards = 2, 3 }), ""},
		{"shard 0/1", ok(func(c *bench.HTTPConfig) { c.Shard, c.Shards = 0, 1 }), ""},
		{"shard 3/3", ok(func(c *bench.HTTPConfig) { c.Shard, c.Shards = 3, 3 }), "Shard must be I/N with 0 ≤ I < N"},
		{"shard 5 without shards", ok(func(c *bench.HTTPConfig) { c.Shard = 5 }), "Shard must be I/N with 0 ≤ I < N ≤ 10000 (got 5/0)"},
		{"shard 1 without shards", ok(func(c *bench.HTTPConfig) { c.Shard = 1 }), "Shard must be I/N"},
		{"shard -1/3", ok(func(c *bench.HTTPConfig) { c.Shard, c.Shards = -1, 3 }), "Shard must be I/N"},
		{"shard 0/-1", ok(func(c *bench.HTTPConfig) { c.Shards = -1 }), "Shard must be I/N"},
		{"header with a line break", ok(func(c *bench.HTTPConfig) { c.Header = http.Header{"X-A": {"a\r\nX-B: 1"}} }),
			`Header X-A: "a\r\nX-B: 1" holds a line break`},
		{"header name with a space", ok(func(c *bench.HTTPConfig) { c.Header = http.Header{"X A": {"1"}} }), `Header "X A" is not a header name`},
		{"method with a line break", ok(func(c *bench.HTTPConfig) { c.Method = "GET / HTTP/1.1\r\n" }), `Method "GET / HTTP/1.1\r\n" is not an HTTP method`},
		{"consumer header with a line break", ok(func(c *bench.HTTPConfig) { c.Consumers, c.ConsumerHeader = 3, "X-Id\r\nX-B" }),
			`ConsumerHeader "X-Id\r\nX-B" is not a header name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
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
