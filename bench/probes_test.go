package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
