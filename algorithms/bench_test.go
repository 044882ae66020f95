package algorithms_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
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
// over loopback: what the limits after the first add to a decision. The
// batched runs decide from 50 goroutines at once through the gateway's
// Decider (limiter.OpenDecider at the default --redis-batch), and report
// this process's CPU time per decision in user space and in the kernel
// (getrusage: what the decision path costs a gateway, its syscalls
// included) beside its allocations.
func BenchmarkDecide(b *testing.B) {
	c := redistest.Client(b, srv)
	p := algorithms.Policy{Limit: 1 << 30, Window: time.Minute} // never reached
	prefix := redistest.Prefix(b)
	d := algorithms.NewDecider(c)
	batched, closeBatched := limiter.OpenDecider(limiter.RedisConfig{Options: &redis.UniversalOptions{Addrs: []string{srv.Addr}},
		Timeout: 5 * time.Second, Pool: 64, Batch: 16})
	defer closeBatched()
	for _, d := range []*algorithms.Decider{d, batched} {
		if err := d.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for _, algs := range [][]string{{"sliding-log"}, {"fixed-window"}, {"sliding-log", "gcra", "fixed-window"}} {
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
		name := "limits=" + strconv.Itoa(len(algs))
		if len(algs) == 1 {
			name = algs[0]
		}
		b.Run(name+"/alone", func(b *testing.B) {
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := d.Decide(ctx, requests[i%len(requests)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/batched", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
			var next atomic.Int64
			user0, sys0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := batched.Decide(ctx, requests[next.Add(1)%int64(len(requests))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			user, sys := processCPU(b)
			b.ReportMetric(float64(user-user0)/1e3/float64(b.N), "user-µs/decision")
			b.ReportMetric(float64(sys-sys0)/1e3/float64(b.N), "sys-µs/decision")
		})
		c.Del(context.Background(), keys...)
	}
}

// processCPU is this process's CPU time so far, in user space and in the
// kernel.
func processCPU(b *testing.B) (user, sys time.Duration) {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkRedisCost is what a decision costs Redis, in pipelines of 16
// calls (ratelab edge's default --redis-batch) from 1,000 consumers under
// limits they never reach: Redis's own CPU time per decision (INFO cpu:
// the script, the commands it calls, reading and writing the network) and
// the script's time per decision (INFO commandstats: EVALSHA's usec, which
// holds its commands'). Beside each algorithm's script, built for its
// shape as the gateway runs it, and three sliding-log limits in one call,
// and a fixed window's and a sliding log's with each batch joined in one
// call (as ratelab edge joins the concurrent decisions of one shape),
// the floor of a script call on this Redis and machine: a script that does
// nothing, one that calls one command (INCR), and one that calls the three
// commands a fixed window's decision calls (TIME, HMGET, HINCRBY) and
// nothing else; and the floor of a joined fixed window's batch: its
// arguments and keys carried and a reply of six numbers a decision given
// back, with nothing decided, and that with the two commands a decision
// calls (HMGET, HINCRBY) and the one TIME of the batch.
func BenchmarkRedisCost(b *testing.B) {
	c := redistest.Client(b, srv)
	ctx := context.Background()
	p := algorithms.Policy{Limit: 1 << 30, Window: time.Minute} // never reached
	prefix := redistest.Prefix(b)
	const batch, consumers = 16, 1000
	type shape struct {
		name   string
		algs   []string
		src    string
		argv   func(int) []any
		joined bool // the batch's 16 requests in one call, as a gateway joins them
	}
	shapes := []shape{
		{name: "empty-script", src: "return 1", argv: func(int) []any { return nil }},
		{name: "one-command", src: "return redis.call('INCR', KEYS[1])", argv: func(int) []any { return nil }},
		{name: "fixed-window-commands", src: "redis.call('TIME')\nredis.call('HMGET', KEYS[1], 'w', 'n')\nreturn redis.call('HINCRBY', KEYS[1], 'n', 1)",
			argv: func(int) []any { return nil }},
	}
	_, fwArgv, err := algorithms.ShapeScript("fixed-window")
	if err != nil {
		b.Fatal(err)
	}
	fwChecks := []algorithms.Check{{Algorithm: "fixed-window", Policy: p, Cost: 1}}
	for _, f := range []struct{ name, per, once string }{
		{"joined-arguments-and-replies", "", ""},
		{"fixed-window-commands-joined", "  redis.call('HMGET', KEYS[k], 'w', 'n')\n  redis.call('HINCRBY', KEYS[k], 'n', 1)\n", "redis.call('TIME')\n"},
	} {
		src := f.once + "local replies, a, k, n = {}, 1, 1, #ARGV\nwhile a <= n do\n" + f.per +
			"  replies[#replies + 1] = {1, 1, 0, 0, 0, 0}\n  a, k = a + " + strconv.Itoa(len(fwArgv(fwChecks, []string{""}))) +
			", k + 1\nend\nreturn replies\n"
		shapes = append(shapes, shape{name: f.name, algs: []string{"fixed-window"}, src: src, joined: true,
			argv: func(int) []any { return fwArgv(fwChecks, []string{""}) }})
	}
	for _, tc := range []struct {
		algs   []string
		joined bool
	}{
		{[]string{"fixed-window"}, false}, {[]string{"gcra"}, false}, {[]string{"token-bucket"}, false},
		{[]string{"sliding-counter"}, false}, {[]string{"sliding-log"}, false}, {[]string{"sliding-log", "sliding-log", "sliding-log"}, false},
		{[]string{"fixed-window"}, true}, {[]string{"sliding-log"}, true},
	} {
		algs := tc.algs
		src, argv, err := algorithms.ShapeScript(algs...)
		if err != nil {
			b.Fatal(err)
		}
		name := algs[0]
		if len(algs) > 1 {
			name = "three-" + name
		}
		if tc.joined {
			name += "-joined"
		}
		checks := make([]algorithms.Check, len(algs))
		for j, a := range algs {
			checks[j] = algorithms.Check{Algorithm: a, Policy: p, Cost: 1}
		}
		n := 0
		shapes = append(shapes, shape{name: name, algs: algs, src: src, joined: tc.joined, argv: func(int) []any {
			n++
			members := make([]string, len(algs))
			for j := range members {
				members[j] = strconv.Itoa(n) + "-" + strconv.Itoa(j)
			}
			return argv(checks, members)
		}})
	}
	for _, s := range shapes {
		script := redis.NewScript(s.src)
		if err := script.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		keys := make([][]string, consumers)
		var all []string
		for i := range keys {
			for j := range max(len(s.algs), 1) {
				keys[i] = append(keys[i], prefix+"-"+s.name+"-"+strconv.Itoa(i)+"-"+strconv.Itoa(j))
				if len(s.algs) > 0 && s.algs[j] == "sliding-counter" {
					keys[i] = append(keys[i], keys[i][len(keys[i])-1]+"-previous")
				}
			}
			all = append(all, keys[i]...)
		}
		b.Run(s.name, func(b *testing.B) {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := redisCPU(b, c)
			calls := 0
			for i := 0; b.Loop(); i++ {
				pipe := c.Pipeline()
				var joinedKeys []string
				var joinedArgs []any
				for j := range batch {
					k := keys[(i*batch+j)%consumers]
					if s.joined {
						joinedKeys, joinedArgs = append(joinedKeys, k...), append(joinedArgs, s.argv(j)...)
						continue
					}
					script.EvalSha(ctx, pipe, k, s.argv(j)...)
				}
				if s.joined {
					script.EvalSha(ctx, pipe, joinedKeys, joinedArgs...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				calls += batch
			}
			cpu := redisCPU(b, c) - cpu0
			b.ReportMetric(cpu.Seconds()*1e6/float64(calls), "redis-cpu-µs/decision")
			b.ReportMetric(scriptUsec(b, c)/float64(calls), "script-µs/decision")
		})
		c.Del(ctx, all...)
	}
}

// redisCPU is Redis's process CPU time so far, user and system (INFO cpu).
func redisCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	b.Helper()
	var total float64
	for line := range strings.SplitSeq(c.Info(context.Background(), "cpu").Val(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// scriptUsec is the usec of EVALSHA since the last CONFIG RESETSTAT.
func scriptUsec(b *testing.B, c redis.UniversalClient) float64 {
	b.Helper()
	for line := range strings.SplitSeq(c.Info(context.Background(), "commandstats").Val(), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					u, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return u
				}
			}
		}
	}
	b.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0
}
