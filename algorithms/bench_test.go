package algorithms_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// BenchmarkAllow measures one decision of each limiter, one at a time and
// from parallel goroutines, spread over 1,000 clients that stay under a
// limit they never reach, on the package's redis-server over loopback.
func BenchmarkAllow(b *testing.B) {
	c := redistest.Client(b, srv)
	p := algorithms.Policy{Limit: 1 << 30, Window: time.Minute} // never reached; limit × window in ms stays below 2^53
	prefix := redistest.Prefix(b)
	keys := make([]string, 1000)
	for _, name := range algorithms.Names() {
		for i := range keys {
			keys[i] = algorithms.Key(prefix+"-"+strconv.Itoa(i), name)
		}
		l := newLimiterB(b, name, c, p)
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := l.Allow(ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := l.Allow(ctx, keys[i%len(keys)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		c.Del(context.Background(), keys...)
	}
}

func newLimiterB(b *testing.B, name string, c redis.UniversalClient, p algorithms.Policy) algorithms.Limiter {
	b.Helper()
	l, err := algorithms.New(name, c, p)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkDecide measures one Decide of one limit and of three (sliding
// log, GCRA and fixed window on one consumer), spread over 1,000 consumers
// that stay under limits they never reach, on the package's redis-server
// over loopback: what the limits after the first add to a decision.
func BenchmarkDecide(b *testing.B) {
	c := redistest.Client(b, srv)
	p := algorithms.Policy{Limit: 1 << 30, Window: time.Minute} // never reached
	prefix := redistest.Prefix(b)
	d := algorithms.NewDecider(c)
	if err := d.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, algs := range [][]string{{"sliding-log"}, {"sliding-log", "gcra", "fixed-window"}} {
		requests := make([][]algorithms.Check, 1000)
		var keys []string
		for i := range requests {
			consumer := prefix + "-" + strconv.Itoa(i)
			for j, a := range algs {
				key := algorithms.Key(consumer, strconv.Itoa(j)+a)
				requests[i] = append(requests[i], algorithms.Check{Key: key, Algorithm: a, Policy: p, Cost: 1})
				keys = append(keys, key)
			}
		}
		b.Run("limits="+strconv.Itoa(len(algs)), func(b *testing.B) {
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := d.Decide(ctx, requests[i%len(requests)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		c.Del(context.Background(), keys...)
	}
}
