package race

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/roundtrip"
)

// openPool opens a client whose pool holds exactly n connections, all opened
// and checked with a PING before any trial, and counts round trips through a
// hook. With the pool no larger than n, holding n connections at once
// initialises every connection it will ever hand out, so no handshake is sent
// (and counted) during a trial. A hook, when not nil, is added after the
// count's.
func openPool(ctx context.Context, base *redis.UniversalOptions, n int, hook redis.Hook) (redis.UniversalClient, error) {
	// One connection first, so that an unreachable address fails once,
	// quickly, before the pool tries to dial it n times.
	if _, err := redisrun.Ping(ctx, base); err != nil {
		return nil, fmt.Errorf("race: %w", err)
	}
	opts := *base
	opts.PoolSize = n
	opts.MinIdleConns = n
	opts.MaxIdleConns = 0      // keep them all
	opts.PipelinePoolSize = -1 // pipelines use the same pre-opened connections
	client := redis.NewUniversalClient(&opts)
	roundtrip.Attach(client)
	if hook != nil {
		addHook(client, hook)
	}
	if err := fillPool(ctx, client, n); err != nil {
		client.Close()
		return nil, fmt.Errorf("race: opening %s: %w", plural.Count(n, "connection"), err)
	}
	return client, nil
}

// fillPool opens and checks the n connections of client's pool (of each
// node's pool, on a Cluster).
func fillPool(ctx context.Context, client redis.UniversalClient, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if cc, ok := client.(*redis.ClusterClient); ok {
		// Every node has a pool of its own: fill each one.
		return cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			return holdConns(ctx, node, n)
		})
	}
	return holdConns(ctx, client, n)
}

// holdConns holds n connections of c's pool at once, so the pool must open
// n, and checks each with a PING.
func holdConns(ctx context.Context, c interface {
	Watch(context.Context, func(*redis.Tx) error, ...string) error
}, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	var hold sync.WaitGroup
	hold.Add(n)
	release := make(chan struct{})
	var opened atomic.Int64
	for range n {
		g.Go(func() error {
			held := false
			// A Tx pins the connection of its first command until fn
			// returns; with no keys it sends no WATCH, only the PING.
			err := c.Watch(gctx, func(tx *redis.Tx) error {
				err := tx.Ping(gctx).Err()
				if err == nil {
					opened.Add(1)
				}
				held = true
				hold.Done()
				select {
				case <-release:
				case <-gctx.Done():
				}
				return err
			})
			if !held {
				hold.Done()
			}
			return err
		})
	}
	waited := make(chan struct{})
	go func() { hold.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-gctx.Done():
	}
	close(release)
	err := g.Wait()
	<-waited
	if err != nil {
		return err
	}
	if got := opened.Load(); got < int64(n) {
		return fmt.Errorf("opened %d of %d", got, n)
	}
	return nil
}

// addHook adds h to c; on a Cluster, to every node's client as nodes are
// found, where transactions run too (as roundtrip.Attach does).
func addHook(c redis.UniversalClient, h redis.Hook) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		return
	}
	c.AddHook(h)
}
