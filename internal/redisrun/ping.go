package redisrun

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingTimeout bounds Ping when the options set no dial or read timeout.
const pingTimeout = 10 * time.Second

// Ping checks on one connection of its own that the Redis opts names answers
// PING, and returns the server's version from INFO server: "unknown" when the
// server answers PING but refuses INFO, as some proxies do. It takes at most
// opts' dial timeout plus its read timeout (10s when either is unset), and
// returns early when ctx ends. Called before a pool opens its connections, it
// makes an unreachable server fail once, quickly, instead of once per
// connection. Its error names the address (never the password) and wraps
// the PING's.
func Ping(ctx context.Context, opts *redis.UniversalOptions) (version string, err error) {
	o := *opts
	o.PoolSize = 1
	o.MinIdleConns = 0
	c := redis.NewUniversalClient(&o)
	defer c.Close()
	timeout := o.DialTimeout + o.ReadTimeout
	if o.DialTimeout <= 0 || o.ReadTimeout <= 0 {
		timeout = pingTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", fmt.Errorf("cannot reach Redis at %s: %w", strings.Join(opts.Addrs, ","), err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown", nil
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}
