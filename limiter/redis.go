package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// RedisOptions adapts base for a limiter: pool connections at most, the
// decision's deadline on every socket operation, no replay of a failed
// call (it may have been counted), and one dial attempt, so that a refused
// connection fails the decision at once instead of after five tries.
func RedisOptions(base redis.UniversalOptions, timeout time.Duration, pool int) *redis.UniversalOptions {
	o := base
	o.PoolSize = pool
	o.DialTimeout = timeout
	o.PoolTimeout = timeout
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1
	return &o
}

// RedisConfig is how a front door reaches Redis.
type RedisConfig struct {
	// Options are the target's (redisrun.Target.Options); adapted by
	// RedisOptions.
	Options *redis.UniversalOptions
	// Timeout bounds one decision; Pool the connections.
	Timeout time.Duration
	Pool    int
	// Batch is the most decisions sent in one round trip: concurrent
	// decisions' script calls go out together as one pipeline
	// (internal/batch). 0 or 1: one round trip per decision.
	Batch int
	// Clock is where the decisions take the time from.
	Clock algorithms.Clock
	// Metrics count the round trips and the decisions in each.
	Metrics *Metrics
}

// batchFlushers is how many pipelines of batched decisions are always
// ready to go out, each on its own connection: one in Redis while the next
// gathers. A decision that has waited batch.Options.Wait while both are
// out starts another, up to as many as the pool allows
// (batch.Options.MaxPipelines).
const batchFlushers = 2

// OpenDecider returns the Decider of a front door and what closes its
// client: the batcher (when Batch is over 1), then the client.
func OpenDecider(cfg RedisConfig) (*algorithms.Decider, func()) {
	plain := redis.NewUniversalClient(RedisOptions(*cfg.Options, cfg.Timeout, cfg.Pool))
	if cfg.Metrics != nil {
		cfg.Metrics.CountRedis(plain)
	}
	client, closeClient := redis.UniversalClient(plain), func() { plain.Close() }
	// d's concurrent decisions of one shape go out as one call (Joins),
	// which Redis runs once for them all.
	var d *algorithms.Decider
	if cfg.Batch > 1 {
		b := batch.New(plain, batch.Options{Max: cfg.Batch, Flushers: batchFlushers, MaxPipelines: cfg.Pool, Timeout: cfg.Timeout,
			Join: func(sha string) bool { return d.Joins(sha) }})
		client = b.Wrap(plain)
		closeClient = func() {
			b.Close()
			plain.Close()
		}
	}
	d = algorithms.NewDecider(client, algorithms.DecideClock(cfg.Clock), algorithms.DecideOnCluster(redisrun.IsCluster(cfg.Options)))
	return d, closeClient
}

// LoadScript loads d's script into Redis (every master of a Cluster) so
// that no decision pays for the NOSCRIPT fallback; addr names the Redis in
// the error.
func LoadScript(ctx context.Context, d *algorithms.Decider, timeout time.Duration, addr string) error {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.Load(lctx); err != nil {
		return fmt.Errorf("cannot load the decision's script into Redis at %s: %w", addr, err)
	}
	return nil
}

// MaxBatch bounds RedisConfig.Batch: deeper pipelines save no more round
// trips than Redis can serve, and delay the first reply of each.
const MaxBatch = 1024
