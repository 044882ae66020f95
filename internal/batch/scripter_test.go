package batch

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

func TestScripterRunsScriptsInBatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare runs before the callers, on the client and the Scripter.
		prepare func(ctx context.Context, c *redis.Client, s redis.Scripter) error
		// retries is the range of retry pipelines the callers' need: with
		// one flusher, the first NOSCRIPT of a known script loads it for
		// good. An unknown script gets known when a caller's EVAL starts,
		// which may race a pipeline in flight.
		retries [2]int
	}{
		{"loaded", func(ctx context.Context, c *redis.Client, s redis.Scripter) error {
			return echo.Load(ctx, s).Err()
		}, [2]int{0, 0}},
		{"flushed after loading through it", func(ctx context.Context, c *redis.Client, s redis.Scripter) error {
			if err := echo.Load(ctx, s).Err(); err != nil {
				return err
			}
			return c.ScriptFlush(ctx).Err()
		}, [2]int{1, 1}},
		{"unknown to it", func(ctx context.Context, c *redis.Client, s redis.Scripter) error {
			return c.ScriptFlush(ctx).Err()
		}, [2]int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.Client(t, srv)
			var rec recorder
			b := newBatcher(t, c, Options{Max: 8, OnBatch: rec.onBatch})
			s := b.Scripter()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tc.prepare(ctx, c, s); err != nil {
				t.Fatal(err)
			}
			key := redistest.Prefix(t) + "n"
			const callers = 64
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Script.Run: EVALSHA, and EVAL on NOSCRIPT.
					got, err := echo.Run(ctx, s, []string{key}, i).Result()
					if err != nil || got != strconv.Itoa(i) {
						errs <- fmt.Errorf("caller %d: got %v, %v", i, got, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if _, _, retries := rec.snapshot(); retries < tc.retries[0] || retries > tc.retries[1] {
				t.Errorf("%d retry pipelines, want %d to %d", retries, tc.retries[0], tc.retries[1])
			}
			if n, err := c.Get(ctx, key).Int(); err != nil || n != callers {
				t.Errorf("the script ran %d times (%v), want %d", n, err, callers)
			}
		})
	}
}
