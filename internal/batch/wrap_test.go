package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestWrappedLimitersAdmitTheLimit runs correct scripted limiters through a
// wrapped client: concurrent requests of one client in one window, batched,
// admit exactly the limit.
func TestWrappedLimitersAdmitTheLimit(t *testing.T) {
	for _, name := range []string{"lua", "fixed-window", "gcra", "multi-limit-atomic"} {
		t.Run(name, func(t *testing.T) {
			c := redistest.Client(t, srv)
			var rec recorder
			b := newBatcher(t, c, Options{Max: 8, OnBatch: rec.onBatch})
			const limit, requests = 10, 48
			lim, err := algorithms.New(name, b.Wrap(redis.UniversalClient(c)), algorithms.Policy{Limit: limit, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if l, ok := lim.(algorithms.Loader); ok {
				if err := l.Load(ctx); err != nil {
					t.Fatal(err)
				}
			}
			key := redistest.Prefix(t) + "client"
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := lim.Allow(ctx, key)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("admitted %d of %d, want %d", got, requests, limit)
			}
			if _, first, _ := rec.snapshot(); first == 0 {
				t.Error("no call went through the batcher")
			}
		})
	}
}
