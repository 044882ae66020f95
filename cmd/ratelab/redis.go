package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/race"
)

// Timeouts on every connection ratelab opens.
const (
	dialTimeout = 3 * time.Second
	ioTimeout   = 3 * time.Second
)

// protocol is RESP2 unless the URL asks otherwise: ratelab uses no push
// messages, and go-redis checks for them on every RESP3 reply.
const protocol = 2

// redisFlag resolves --redis: the flag, else REDIS_URL, else "" (start a
// private server), with the name of where it came from for messages.
func redisFlag(flag string) (url, source string) {
	if flag != "" {
		return flag, "--redis"
	}
	return os.Getenv("REDIS_URL"), "REDIS_URL"
}

// redisOptions resolves --redis (or REDIS_URL) and --cluster into client
// options; nil means no server was named. Errors are usage errors.
func redisOptions(flag string, cluster bool) (*redis.UniversalOptions, error) {
	url, source := redisFlag(flag)
	if url == "" {
		if cluster {
			return nil, usagef("--cluster needs --redis (or REDIS_URL): the address of a cluster node")
		}
		return nil, nil
	}
	o, err := parseRedisURL(url, source, cluster)
	if err != nil {
		return nil, &usageError{err}
	}
	return o, nil
}

// parseRedisURL turns a redis://, rediss:// or unix:// URL, or several
// comma-separated redis:// URLs of one Redis Cluster, into client options
// with ratelab's timeouts and no automatic retries: a retried decision could
// be counted twice. cluster forces Cluster mode for a single seed address.
func parseRedisURL(raw, source string, cluster bool) (*redis.UniversalOptions, error) {
	var u *redis.UniversalOptions
	for _, part := range strings.Split(raw, ",") {
		o, err := redis.ParseURL(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", source, redact(raw), err)
		}
		if u != nil {
			u.Addrs = append(u.Addrs, o.Addr)
			continue
		}
		u = &redis.UniversalOptions{
			Addrs:         []string{o.Addr},
			Username:      o.Username,
			Password:      o.Password,
			DB:            o.DB,
			TLSConfig:     o.TLSConfig,
			Protocol:      cmp.Or(o.Protocol, protocol),
			ClientName:    o.ClientName,
			DialTimeout:   or(o.DialTimeout, dialTimeout),
			ReadTimeout:   or(o.ReadTimeout, ioTimeout),
			WriteTimeout:  or(o.WriteTimeout, ioTimeout),
			MaxRetries:    -1,
			IsClusterMode: cluster,
		}
		if o.Network == "unix" {
			u.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			}
		}
	}
	if len(u.Addrs) > 1 {
		u.IsClusterMode = true
	}
	if u.IsClusterMode && u.DB != 0 {
		return nil, fmt.Errorf("%s %q: a Redis Cluster has only database 0", source, redact(raw))
	}
	return u, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	at := strings.LastIndex(raw, "@")
	scheme := strings.Index(raw, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return raw
	}
	return raw[:scheme+3] + "…" + raw[at:]
}

// target is the Redis a command runs against.
type target struct {
	opts  *redis.UniversalOptions
	info  race.Server
	close func()
}

// openTarget connects to --redis, or starts a private redis-server, or
// falls back to the embedded server with a banner on stderr. It checks the
// server answers, within the timeouts, before it returns.
func openTarget(ctx context.Context, opts *redis.UniversalOptions, stderr io.Writer) (*target, error) {
	if opts != nil {
		version, err := serverVersion(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("cannot reach Redis at %s: %w", strings.Join(opts.Addrs, ","), err)
		}
		return &target{opts: opts, close: func() {},
			info: race.Server{Mode: string(redisrun.External), Version: version, Addr: strings.Join(opts.Addrs, ",")}}, nil
	}
	srv, err := redisrun.Start(ctx, redisrun.Options{})
	if errors.Is(err, redisrun.ErrNotFound) {
		srv, err = redisrun.StartEmbedded()
		if err == nil {
			fmt.Fprintln(stderr, "ratelab: no redis-server on PATH: results come from an embedded in-process Redis "+
				"(miniredis), not a Redis server. Install redis-server or pass --redis URL for real numbers.")
		}
	}
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{Addrs: []string{srv.Addr}, DialTimeout: dialTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout, MaxRetries: -1, Protocol: protocol}
	return &target{opts: o, close: srv.Stop,
		info: race.Server{Mode: string(srv.Mode), Version: srv.Version, Addr: srv.Addr}}, nil
}

// openLocalCluster starts a private three-master Redis Cluster.
func openLocalCluster(ctx context.Context) (*target, error) {
	cl, err := redisrun.StartCluster(ctx, 3, redisrun.Options{})
	if errors.Is(err, redisrun.ErrNotFound) {
		return nil, fmt.Errorf("--cluster-local needs redis-server on PATH: %w", err)
	}
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{Addrs: cl.Addrs(), IsClusterMode: true, DialTimeout: dialTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout, MaxRetries: -1, Protocol: protocol}
	return &target{opts: o, close: cl.Stop,
		info: race.Server{Mode: string(redisrun.Ephemeral), Version: cl.Version(), Addr: strings.Join(cl.Addrs(), ",")}}, nil
}

// serverVersion PINGs the server and reads redis_version from INFO server.
func serverVersion(ctx context.Context, opts *redis.UniversalOptions) (string, error) {
	o := *opts
	o.PoolSize = 1
	c := redis.NewUniversalClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, o.DialTimeout+o.ReadTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown", nil // some proxies refuse INFO; the server still answers
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}
