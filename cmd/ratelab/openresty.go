package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
)

// runOpenResty renders edge/openresty/nginx.conf for the flags and runs nginx
// with the module until ctx is done.
func runOpenResty(ctx context.Context, opts edgeOptions, cfg edge.GatewayConfig, ropts *redis.UniversalOptions) error {
	switch {
	case cfg.Limit.Algorithm != "sliding-log":
		return usagef("--engine openresty runs the sliding log only (got --algorithm %s)", cfg.Limit.Algorithm)
	case cfg.Limit.Shadow:
		return usagef("--engine openresty has no --shadow")
	case len(cfg.Limit.KeyBy.TrustedProxies) > 0:
		return usagef("--engine openresty: use nginx's realip module (set_real_ip_from) instead of --trusted-proxies")
	case ropts != nil && (ropts.IsClusterMode || len(ropts.Addrs) > 1 || ropts.Dialer != nil || ropts.TLSConfig != nil):
		return usagef("--engine openresty reaches one Redis over plain TCP: no Cluster, unix socket or TLS")
	}
	if ropts != nil && (ropts.DB != 0 || ropts.Username != "") {
		return usagef("--engine openresty uses database 0 and password-only AUTH: drop the database and user from --redis")
	}
	if _, _, err := edge.FindNginx(); err != nil {
		return err
	}
	tgt, err := openTarget(ctx, ropts, opts.Stderr)
	if err != nil {
		return err
	}
	defer tgt.close()
	if tgt.info.Mode == "embedded" {
		return fmt.Errorf("--engine openresty needs a Redis server: install redis-server or pass --redis")
	}
	host, portText, err := net.SplitHostPort(tgt.opts.Addrs[0])
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(portText)
	// nginx resolves nothing without a resolver line: give it an address.
	if _, err := netip.ParseAddr(host); err != nil {
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil || len(addrs) == 0 {
			return fmt.Errorf("--redis host %s: %v", host, err)
		}
		host = addrs[0]
	}
	listen, admin := hostPort(opts.Listen), ""
	if opts.Admin != "" {
		admin = hostPort(opts.Admin)
	}
	nc := edge.NginxConfig{
		Listen: listen, Admin: admin, Upstream: cfg.Upstream,
		RedisHost: host, RedisPort: port, RedisPassword: tgt.opts.Password,
		Policy: cfg.Limit.Policy, Timeout: cfg.Limit.Timeout, Clock: cfg.Limit.Clock.String(),
		KeyBy: opts.KeyBy, OnError: string(cfg.Limit.OnError), Headers: string(cfg.Limit.Headers),
		DenyCache: cfg.Limit.DenyCache, Workers: 2, Off: cfg.Off,
	}
	n, err := edge.StartNginx(ctx, nc)
	if err != nil {
		return err
	}
	defer n.Stop()
	fmt.Fprintf(opts.Stderr, "ratelab edge: nginx with edge/openresty/ratelimit.lua listening on %s, upstream %s, admin %s (config in %s)\n",
		listen, cfg.Upstream, admin, n.Dir())
	clock := "Redis's clock"
	if cfg.Limit.Clock == algorithms.ClockCaller {
		clock = "this host's clock"
	}
	fmt.Fprintf(opts.Stderr, "ratelab edge: sliding-log, %d per %s, by %s; %s; Redis %s, timeout %s; on a Redis error: fail %s\n",
		nc.Policy.Limit, nc.Policy.Window, nc.KeyBy, clock, tgt.info.Addr, nc.Timeout, nc.OnError)
	select {
	case <-ctx.Done():
		fmt.Fprintln(opts.Stderr, "ratelab edge: stopping nginx")
		return nil
	case <-n.Exited():
		return fmt.Errorf("nginx exited; see its error.log in %s", n.Dir())
	}
}

// hostPort gives an address an explicit host, as nginx and a dialer both take it.
func hostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("0.0.0.0", port)
}
