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
