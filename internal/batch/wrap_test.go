package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/noreplay"
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
			// A script built at run time (multi-limit-atomic's, for its
			// shape) goes out as EVAL until it has run once: a first call,
			// on a key of its own, makes it known, as a gateway's first
			// requests do.
			if _, err := lim.Allow(ctx, key+"-first"); err != nil {
				t.Fatal(err)
			}
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

// TestWrapProcess: through a wrapped client's Process, an EVALSHA goes
// through the Batcher, whichever command carries it, and is answered to
// its caller; an EVAL goes straight to the client and makes its script
// known, so that the Batcher loads it after the server lost it; any other
// command goes straight to the client.
func TestWrapProcess(t *testing.T) {
	c := redistest.Client(t, srv)
	var rec recorder
	b := newBatcher(t, c, Options{Max: 8, OnBatch: rec.onBatch})
	w := b.Wrap(redis.UniversalClient(c))
	key := redistest.Prefix(t) + "n"
	src := `redis.call('INCR', KEYS[1]) return ARGV[1] .. '!'` // unknown to the Batcher until it is EVALed
	sha := redis.NewScript(src).Hash()
	for _, tc := range []struct {
		name string
		// cmd sends the command and returns its reply.
		cmd func(ctx context.Context) (any, error)
		// prepare runs on the server before cmd.
		prepare          func(ctx context.Context) error
		want             any
		batched, retries int
	}{
		{"evalsha sent once", func(ctx context.Context) (any, error) {
			cmd := noreplay.EvalSha(ctx, echo.Hash(), []string{key}, "once")
			err := w.Process(ctx, cmd)
			return cmd.Val(), err
		}, func(ctx context.Context) error { return echo.Load(ctx, c).Err() }, "once", 1, 0},
		{"go-redis's evalsha", func(ctx context.Context) (any, error) {
			cmd := redis.NewCmd(ctx, "evalsha", echo.Hash(), 1, key, "plain")
			err := w.Process(ctx, cmd)
			return cmd.Val(), err
		}, nil, "plain", 1, 0},
		{"eval", func(ctx context.Context) (any, error) {
			cmd := noreplay.Eval(ctx, src, []string{key}, "eval")
			err := w.Process(ctx, cmd)
			return cmd.Val(), err
		}, nil, "eval!", 0, 0},
		{"evalsha of a script flushed since its eval", func(ctx context.Context) (any, error) {
			cmd := noreplay.EvalSha(ctx, sha, []string{key}, "again")
			err := w.Process(ctx, cmd)
			return cmd.Val(), err
		}, func(ctx context.Context) error { return c.ScriptFlush(ctx).Err() }, "again!", 1, 1},
		{"another command", func(ctx context.Context) (any, error) {
			cmd := redis.NewStringCmd(ctx, "get", key)
			err := w.Process(ctx, cmd)
			return cmd.Val(), err
		}, nil, "4", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.prepare != nil {
				if err := tc.prepare(ctx); err != nil {
					t.Fatal(err)
				}
			}
			_, first0, retries0 := rec.snapshot()
			got, err := tc.cmd(ctx)
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			if _, first, retries := rec.snapshot(); first-first0 != tc.batched || retries-retries0 != tc.retries {
				t.Errorf("%d calls through the Batcher, %d sent again after NOSCRIPT; want %d and %d",
					first-first0, retries-retries0, tc.batched, tc.retries)
			}
		})
	}
}
