package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
)

// edgeOptions are the flags of ratelab edge.
type edgeOptions struct {
	Listen         string
	Admin          string
	Upstream       string
	Limit          string
	Algorithm      string
	KeyBy          string
	TrustedProxies []string
	OnRedisError   string
	RedisTimeout   time.Duration
	RedisPool      int
	Headers        string
	DenyCache      bool
	Shadow         bool
	Redis          string
	Cluster        bool
	Engine         string
	Clock          string

	Stdout, Stderr io.Writer
}

func newEdgeCmd(stdout, stderr io.Writer) *cobra.Command {
	opts := edgeOptions{Stdout: stdout, Stderr: stderr}
	cmd := &cobra.Command{
		Use:   "edge",
		Short: "Run the production limiter as a gateway in front of an upstream",
		Long: `edge serves the limiter in front of --upstream: every request is decided in Redis
before it is proxied; clients over the limit get 429 with an honest Retry-After, and every
response carries RateLimit-Policy/RateLimit (the IETF draft) and RateLimit-Limit/Remaining/Reset.
Metrics are on --admin at /metrics (Prometheus); with --upstream builtin, the counts the
built-in upstream received are at /__ratelab/forwarded. SIGINT or SIGTERM shuts it down
gracefully.

--key-by header:NAME trusts the header as sent: use it only behind something that
authenticates it. --key-by ip uses the peer's address, and X-Forwarded-For only from
--trusted-proxies.

--clock redis (the default) has the script read Redis's TIME, so that any number of
gateways and nginx nodes on hosts whose clocks disagree can share one Redis; with
--clock caller each passes its own host's time, and a host ahead of the others prunes
their requests early and over-admits (ratelab skew measures by how much).`,
		Example: `  ratelab edge --listen :8080 --upstream http://127.0.0.1:9000 --limit 100/1m --key-by header:X-Consumer-Id
  ratelab edge --upstream builtin --limit 10/1s --on-redis-error closed --redis redis://127.0.0.1:6379
  ratelab edge --engine openresty --upstream builtin --limit 100/1m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEdge(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", ":8080", "address clients connect to")
	f.StringVar(&opts.Admin, "admin", "127.0.0.1:9090", "address of /metrics and /__ratelab/forwarded (empty: none)")
	f.StringVar(&opts.Upstream, "upstream", "", "URL to proxy to, or builtin (a 200 responder that counts per consumer)")
	f.StringVar(&opts.Limit, "limit", "100/1m", "the policy: requests/window, such as 100/1m or 10/1s; off serves with no limiter")
	f.StringVar(&opts.Algorithm, "algorithm", "sliding-log", "the algorithm: "+strings.Join(algorithms.Algorithms(), ", "))
	f.StringVar(&opts.KeyBy, "key-by", "ip", "who a request is from: ip, or header:NAME")
	f.StringSliceVar(&opts.TrustedProxies, "trusted-proxies", nil, "CIDRs whose X-Forwarded-For is believed (with --key-by ip)")
	f.StringVar(&opts.OnRedisError, "on-redis-error", "open", "when Redis fails: open (let through, counted) or closed (503)")
	f.DurationVar(&opts.RedisTimeout, "redis-timeout", 200*time.Millisecond, "bound on one decision in Redis")
	f.IntVar(&opts.RedisPool, "redis-pool", 256, "Redis connections at most")
	f.StringVar(&opts.Headers, "headers", "both", "rate-limit headers: draft, legacy or both")
	f.BoolVar(&opts.DenyCache, "deny-cache", true, "answer a denied consumer from memory until its retry-after has passed")
	f.BoolVar(&opts.Shadow, "shadow", false, "decide and add headers but never block (counts what would have been blocked)")
	f.StringVar(&opts.Redis, "redis", "", "Redis URL, or comma-separated URLs of a Cluster (default $REDIS_URL, else a private redis-server)")
	f.BoolVar(&opts.Cluster, "cluster", false, "treat --redis as a seed of a Redis Cluster")
	f.StringVar(&opts.Engine, "engine", "go", "go (this process), or openresty (render nginx.conf for edge/openresty and run nginx)")
	f.StringVar(&opts.Clock, "clock", "redis", "where the limiter takes the time from: redis (TIME, shared by every node) or caller (this host's)")
	_ = cmd.RegisterFlagCompletionFunc("clock", cobra.FixedCompletions([]string{"redis", "caller"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parseLimit parses "100/1m" into a policy.
func parseLimit(s string) (algorithms.Policy, error) {
	n, w, ok := strings.Cut(s, "/")
	if !ok {
		return algorithms.Policy{}, fmt.Errorf("--limit %q: want requests/window, such as 100/1m", s)
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil {
		return algorithms.Policy{}, fmt.Errorf("--limit %q: %q is not a whole number", s, n)
	}
	window, err := time.ParseDuration(strings.TrimSpace(w))
	if err != nil {
		return algorithms.Policy{}, fmt.Errorf("--limit %q: window: %w", s, err)
	}
	p := algorithms.Policy{Limit: limit, Window: window}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("--limit %q: %w", s, err)
	}
	return p, nil
}

// edgeConfig checks every flag; nothing is listened on or sent before it succeeds.
func edgeConfig(opts edgeOptions) (edge.GatewayConfig, *redis.UniversalOptions, error) {
	var cfg edge.GatewayConfig
	off := opts.Limit == "off"
	limit := opts.Limit
	if off {
		limit = "1/1s" // unused: nothing is decided
	}
	p, err := parseLimit(limit)
	if err != nil {
		return cfg, nil, &usageError{err}
	}
	info, ok := algorithms.Lookup(opts.Algorithm)
	if !ok || !info.Algorithm {
		return cfg, nil, usagef("--algorithm %q: want one of %s", opts.Algorithm, strings.Join(algorithms.Algorithms(), ", "))
	}
	keyBy, err := edge.ParseKeyBy(opts.KeyBy, opts.TrustedProxies)
	if err != nil {
		return cfg, nil, usagef("--key-by/--trusted-proxies: %w", err)
	}
	onErr := edge.OnError(opts.OnRedisError)
	if onErr != edge.FailOpen && onErr != edge.FailClosed {
		return cfg, nil, usagef("--on-redis-error %q: want open or closed", opts.OnRedisError)
	}
	headers := edge.Headers(opts.Headers)
	if headers != edge.HeadersDraft && headers != edge.HeadersLegacy && headers != edge.HeadersBoth {
		return cfg, nil, usagef("--headers %q: want draft, legacy or both", opts.Headers)
	}
	if opts.RedisTimeout <= 0 || opts.RedisTimeout > time.Minute {
		return cfg, nil, usagef("--redis-timeout must be between 1ms and 1m (got %s)", opts.RedisTimeout)
	}
	if opts.RedisPool < 1 {
		return cfg, nil, usagef("--redis-pool must be at least 1 (got %d)", opts.RedisPool)
	}
	if opts.Upstream == "" {
		return cfg, nil, usagef("--upstream is required: a URL, or builtin")
	}
	if opts.Engine != "go" && opts.Engine != "openresty" {
		return cfg, nil, usagef("--engine %q: want go or openresty", opts.Engine)
	}
	clock, err := algorithms.ParseClock(opts.Clock)
	if err != nil {
		return cfg, nil, usagef("--clock: %w", err)
	}
	ropts, err := redisOptions(opts.Redis, opts.Cluster)
	if err != nil {
		return cfg, nil, err
	}
	cfg = edge.GatewayConfig{
		Off:      off,
		Listen:   opts.Listen,
		Admin:    opts.Admin,
		Upstream: opts.Upstream,
		Limit: edge.Config{Algorithm: opts.Algorithm, Policy: p, Clock: clock, KeyBy: keyBy, OnError: onErr,
			Timeout: opts.RedisTimeout, Headers: headers, DenyCache: opts.DenyCache, Shadow: opts.Shadow},
		Log: opts.Stderr,
	}
	return cfg, ropts, nil
}

func runEdge(ctx context.Context, opts edgeOptions) error {
	cfg, ropts, err := edgeConfig(opts)
	if err != nil {
		return err
	}
	if opts.Engine == "openresty" {
		return runOpenResty(ctx, opts, cfg, ropts)
	}
	if cfg.Off {
		g, err := edge.NewGateway(cfg)
		if err != nil {
			return err
		}
		return g.Serve(ctx)
	}
	tgt, err := openTarget(ctx, ropts, opts.Stderr)
	if err != nil {
		return err
	}
	defer tgt.close()
	if tgt.info.Mode != "external" {
		fmt.Fprintf(opts.Stderr, "ratelab edge: limiting in a private Redis (%s at %s): its counts are lost when ratelab stops; "+
			"pass --redis to share them\n", tgt.info.Mode, tgt.info.Addr)
	}
	client := redis.NewUniversalClient(edge.RedisOptions(*tgt.opts, opts.RedisTimeout, opts.RedisPool))
	defer client.Close()
	lim, err := algorithms.New(opts.Algorithm, client, cfg.Limit.Policy, algorithms.WithClock(cfg.Limit.Clock))
	if err != nil {
		return err
	}
	if l, ok := lim.(algorithms.Loader); ok {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.Load(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot load the limiter's script into Redis at %s: %w", tgt.info.Addr, err)
		}
	}
	cfg.Limit.Limiter = lim
	g, err := edge.NewGateway(cfg)
	if err != nil {
		return err
	}
	return g.Serve(ctx)
}
