package bench_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
)

// TestShardedProbesAskOnlyTheirConsumers: three shards, each sending its
// own consumers, audit a server that never denies. No denial in the run
// can be trusted, so each shard asks consumers again until denied: only
// its own, never another shard's, whose quota it would spend.
func TestShardedProbesAskOnlyTheirConsumers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]map[string]int{} // shard -> consumer -> requests
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		s := r.Header.Get("X-Shard")
		if seen[s] == nil {
			seen[s] = map[string]int{}
		}
		seen[s][r.Header.Get("X-Consumer-Id")]++
	}))
	defer srv.Close()
	const shards, consumers = 3, 7
	results := make([]bench.Result, shards)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 60, Requests: 30,
				Connections: shards, Consumers: consumers, ConsumerHeader: "X-Consumer-Id", Header: http.Header{"X-Shard": {fmt.Sprint(i)}},
				ExpectLimit: 5, ExpectWindow: time.Minute, Shard: i, Shards: shards})
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, r := range results {
		if r.Audit == nil || r.Audit.Limits[0].RetryAfter.Skipped == "" {
			t.Fatalf("shard %d: audit %+v, want the probes skipped for want of a denial", i, r.Audit)
		}
		var sent int64
		for c := range consumers {
			n := seen[fmt.Sprint(i)][fmt.Sprintf("consumer-%d", c)]
			sent += int64(n)
			if c%shards != i && n > 0 {
				t.Errorf("shard %d sent %d requests to consumer-%d, which is shard %d's", i, n, c, c%shards)
			}
		}
		// The probes asked: more than the run's own requests were sent.
		if sent <= r.Requests {
			t.Errorf("shard %d: %d requests in all, %d in the run: no probe was sent", i, sent, r.Requests)
		}
	}
}

// penaltyBox is an honest test limiter: per consumer, it admits the first
// admit requests, then denies each until a moment it names (Retry-After,
// rounded up) and keeps: each of the run's denials sets it free 1,050 ms
// after. Once the run's requests have come (the probes), it decides each
// request only after slow has passed, as a loaded gateway does.
type penaltyBox struct {
	admit, run int
	slow       time.Duration

	mu     sync.Mutex
	seen   int
	count  map[string]int
	freeAt map[string]time.Time
}

func (b *penaltyBox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := r.Header.Get("X-Consumer-Id")
	b.mu.Lock()
	b.seen++
	probe := b.seen > b.run
	b.mu.Unlock()
	if probe {
		time.Sleep(b.slow) // the load: a slow decision, and a slow reply
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count == nil {
		b.count, b.freeAt = map[string]int{}, map[string]time.Time{}
	}
	now := time.Now()
	if free, denied := b.freeAt[c]; b.count[c] < b.admit || (denied && !now.Before(free)) {
		b.count[c]++
		return
	}
	if !probe {
		b.freeAt[c] = now.Add(1050 * time.Millisecond)
	}
	w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(b.freeAt[c].Sub(now).Seconds()))))
	w.WriteHeader(http.StatusTooManyRequests)
}

// TestSlowProbeIsNotEarly: a probe sent just before the earliest moment a
// Retry-After allows, whose decision and reply come late (a loaded
// machine), may be admitted by an honest gateway: it proves nothing early,
// and the gateway is never called false for it.
func TestSlowProbeIsNotEarly(t *testing.T) {
	t.Parallel()
	const requests = 30
	srv := httptest.NewServer(&penaltyBox{admit: 5, run: requests, slow: 300 * time.Millisecond})
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 40, Requests: requests,
		Consumers: 2, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit: %s %q: %+v", res.Audit.Verdict, res.Audit.Reasons, res.Audit.Limits[0])
	ra := res.Audit.Limits[0].RetryAfter
	if (ra.Honest != nil && !*ra.Honest) || ra.Early != 0 || ra.Fault() != "" {
		t.Fatalf("retry-after %+v (%s): an honest gateway called false", ra, ra.Fault())
	}
	if ra.Honest == nil && !strings.Contains(ra.Skipped, "too slow to tell") {
		t.Fatalf("retry-after %+v: not probed", ra)
	}
}

// TestUnansweredProbeIsNoFault: a gateway that stops answering after the
// run (its connections reset) never shows whether it would admit a
// consumer after its Retry-After: the probes find nothing, and the
// Retry-After is not called false.
func TestUnansweredProbeIsNoFault(t *testing.T) {
	t.Parallel()
	const requests = 6
	var n sync.Mutex
	seen := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Lock()
		seen++
		run := seen <= requests
		n.Unlock()
		if !run { // after the run: no answer
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 0, Connections: 1, Requests: requests,
		Consumers: 1, ConsumerHeader: "X-Consumer-Id", ExpectLimit: 5, ExpectWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ra := res.Audit.Limits[0].RetryAfter
	if ra.Honest != nil || ra.Probes != 0 {
		t.Fatalf("retry-after %+v (%s): probes that got no answer judged the gateway", ra, ra.Fault())
	}
}
