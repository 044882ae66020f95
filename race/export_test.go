package race

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithReadBarrier returns cfg with a barrier between the limiters' reads
// and their writes: in every trial, explained ones included, each
// goroutine's first GET of the trial's key returns only once all
// cfg.Concurrency goroutines have read the key, and later reads of it pass.
// Every goroutine then reads the count before any writes it, whatever the
// scheduling: the naive limiter admits every request of a trial, and every
// WATCH of the watch limiter's first attempts comes before every EXEC.
// Limiters that do not GET the key (the scripts, multi) are not held.
func WithReadBarrier(cfg Config) Config {
	cfg.hook = &readBarrier{n: cfg.Concurrency, gates: map[string]*gate{}}
	return cfg
}

// readBarrier is the go-redis hook of WithReadBarrier.
type readBarrier struct {
	n     int
	mu    sync.Mutex
	gates map[string]*gate // by key
}

// gate holds the readers of one key until n have read it.
type gate struct {
	read int
	open chan struct{}
}

var _ redis.Hook = (*readBarrier)(nil)

// DialHook passes dials through.
func (b *readBarrier) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook holds after a GET.
func (b *readBarrier) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		b.hold(ctx, []redis.Cmder{cmd})
		return err
	}
}

// ProcessPipelineHook holds after a pipeline with a GET.
func (b *readBarrier) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		b.hold(ctx, cmds)
		return err
	}
}

// hold waits, after a GET of a key fewer than n goroutines have read, until
// n have, or ctx ends.
func (b *readBarrier) hold(ctx context.Context, cmds []redis.Cmder) {
	for _, c := range cmds {
		args := c.Args()
		if c.Name() != "get" || len(args) != 2 {
			continue
		}
		key, _ := args[1].(string)
		if g := b.arrive(key); g != nil {
			select {
			case <-g.open:
			case <-ctx.Done():
			}
		}
		return
	}
}

// arrive counts a read of key, and returns its gate to wait on; nil once
// the gate is open.
func (b *readBarrier) arrive(key string) *gate {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gates[key]
	if g == nil {
		g = &gate{open: make(chan struct{})}
		b.gates[key] = g
	}
	if g.read == b.n {
		return nil
	}
	g.read++
	if g.read == b.n {
		close(g.open)
	}
	return g
}

// WithDelay returns cfg with the first command of every attempt at a
// decision (EVALSHA or EVAL of a script, WATCH of the watch limiter) sent
// no sooner than d after the limiter asked for it: each attempt reaches
// Redis at least d after the limiter read the caller's clock, and a
// goroutine's decisions are at least d apart. A trial of n decisions per
// goroutine then spans at least n × d of real time, however fast the
// machine; a loaded one only makes it longer.
func WithDelay(cfg Config, d time.Duration) Config {
	cfg.hook = delay(d)
	return cfg
}

// delay is the go-redis hook of WithDelay.
type delay time.Duration

var _ redis.Hook = delay(0)

// DialHook passes dials through.
func (delay) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook waits before the first command of an attempt.
func (d delay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d.wait(ctx, cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook waits before a pipeline that starts an attempt.
func (d delay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			d.wait(ctx, cmds[0])
		}
		return next(ctx, cmds)
	}
}

// wait returns after d, or once ctx ends, when cmd starts an attempt; at
// once otherwise.
func (d delay) wait(ctx context.Context, cmd redis.Cmder) {
	switch cmd.Name() {
	case "evalsha", "eval", "watch":
	default:
		return
	}
	t := time.NewTimer(time.Duration(d))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// WithFirstRoundTogether returns cfg with the first round of every trial
// of in-flight limiters held together: each admitted request of it holds
// its slot until every goroutine's first acquire has replied, so that they
// are all held at one instant, whatever the scheduling.
func WithFirstRoundTogether(cfg Config) Config {
	cfg.together = &firstRound{n: cfg.Concurrency}
	return cfg
}

// JudgeLimits is judgeLimits, for tests.
var JudgeLimits = judgeLimits

// WaitOutLeases is how a trial of semaphore-lease checks its key once
// every lease's TTL has passed: it polls the live leases of key until none
// count, or until deadline, and returns the count it saw last.
func WaitOutLeases(ctx context.Context, cfg Config, key string, deadline time.Time) (int64, error) {
	control := redis.NewUniversalClient(cfg.Redis)
	defer control.Close()
	f, err := newInFlight(ctx, control, cfg, "semaphore-lease")
	if err != nil {
		return 0, err
	}
	return f.waitOutLeases(ctx, key, deadline)
}
