// Package roundtrip counts the Redis round trips made on behalf of a
// context: a go-redis hook adds one for every command and every pipeline
// sent with a context that carries a Counter, and counts the transactions
// Redis aborted.
package roundtrip

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter holds the counts for one context.
type Counter struct {
	trips, aborted atomic.Int64
}

// Trips is the number of round trips counted.
func (c *Counter) Trips() int64 { return c.trips.Load() }

// Aborted is the number of EXECs Redis aborted because a WATCHed key changed.
func (c *Counter) Aborted() int64 { return c.aborted.Load() }

type key struct{}

// With returns a context whose round trips are counted in a new Counter.
func With(ctx context.Context) (context.Context, *Counter) {
	c := &Counter{}
	return context.WithValue(ctx, key{}, c), c
}

// Hook counts round trips for contexts made by With. Add it once per client.
type Hook struct{}

var _ redis.Hook = Hook{}

// DialHook passes dials through.
func (Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one round trip per command.
func (Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := ctx.Value(key{}).(*Counter); ok {
			c.trips.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook counts one round trip per pipeline, and aborted EXECs.
func (Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if c, ok := ctx.Value(key{}).(*Counter); ok {
			c.trips.Add(1)
			if errors.Is(err, redis.TxFailedErr) {
				c.aborted.Add(1)
			}
		}
		return err
	}
}

// Attach adds the hook to c. On a Cluster it goes on every node's client
// (as nodes are found), where transactions run too; call it before the
// client sends anything.
func Attach(c redis.UniversalClient) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(Hook{}) })
		return
	}
	c.AddHook(Hook{})
}
