package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/limiter"
)

// edgeOptions are the flags of ratelab edge; edge.Options holds the rest.
type edgeOptions struct {
	edge.Options
	limits   []string
	clock    string
	limitSet bool // --limit was given
	keyBySet bool // --key-by was given
	batchSet bool // --redis-batch was given
	leaseSet bool // --in-flight-lease was given
	redis    redisFlags
}

// edgeNames are the flags that set edge.Options' fields.
// defaultBatch is --redis-batch's default, chosen by ONLY=sweep
// scripts/bench-batch.sh: of 1, 4, 8, 16, 32 and 64 at 50 connections and
// 1,000 consumers, 16 took the least cpu per request (gateway and Redis),
// at 0.09 round trips per decision; 8 and 32 were within the noise.
const defaultBatch = 16

var edgeNames = flagNames{"Engine": "--engine", "Listen": "--listen", "Admin": "--admin", "Upstream": "--upstream",
	"Algorithm": "--algorithm", "KeyBy": "--key-by", "TrustedProxies": "--trusted-proxies", "OnError": "--on-redis-error",
	"Headers": "--headers", "Timeout": "--redis-timeout", "Pool": "--redis-pool", "Batch": "--redis-batch", "Shadow": "--shadow", "Redis": "--redis",
	"Limit": "--limit", "Window": "--limit", "Limits": "--limit", "RulesFile": "--rules", "Nodes": "--nodes", "BreakerFailures": "--breaker-failures",
	"Bounds.Length": "--max-value-length", "InFlight": "--in-flight", "InFlightLease": "--in-flight-lease", "Lease": "--in-flight-lease",
	"UpstreamDelay": "--upstream-delay"}

func newEdgeCmd(io *ioStreams) *cobra.Command {
	var opts edgeOptions
	cmd := &cobra.Command{
		Use:   "edge",
		Short: "Run the production limiter as a gateway in front of an upstream",
		Long: `edge serves the limiter in front of --upstream: every request is decided in Redis
before it is proxied; clients over the limit get 429 with an honest Retry-After, and every
response carries RateLimit-Policy/RateLimit (the IETF draft) and RateLimit-Limit/Remaining/Reset.
--admin serves /metrics (Prometheus: decisions by outcome, Redis errors by kind, whether Redis
answers and whether the circuit is open, deny-cache hits and decision latency, with the Go
runtime's and the process's metrics), /healthz (ok, or since when and why Redis fails) and, with
--upstream builtin, the counts the built-in upstream received at /__ratelab/forwarded. With
--engine openresty it serves /healthz and /__ratelab/forwarded: the nginx module keeps no
metrics (edge/openresty/README.md). SIGINT or SIGTERM shuts it down gracefully.

--limit is repeatable: --limit 5/1s --limit 12/10s:gcra limits each identity to both, decided
together in one Redis call (a request is admitted, and counted, only if every limit admits it).
--rules FILE takes a rules file instead (docs/rules.md: limits per route, plan, consumer, a
global cap); it reloads on SIGHUP and whenever the file changes, and a version that does not
validate is logged and refused while the old rules keep serving. /healthz and /metrics show the
version serving and when it was loaded. With several limits RateLimit-Policy lists every one
by name, and RateLimit and the legacy fields describe the one closest to exhaustion (on a 429,
the one that admits again last: Retry-After).

--in-flight N bounds each identity's requests in flight at once, beside --limit or alone: the
slot is a lease in a Redis sorted set, taken in the same call as the rate limits (a request a
rate limit denies takes no slot; one refused a slot consumes no rate) and released once the
response completes or the client goes away. A slot never released, its gateway killed, comes
back after --in-flight-lease. RateLimit-Policy gives it as qu="concurrent-requests".

--key-by header:NAME trusts the header as sent: use it only behind something that
authenticates it. --key-by ip uses the peer's address, and X-Forwarded-For only from
--trusted-proxies.

When Redis fails (a timeout, a full Redis refusing with OOM, a refused or reset connection)
the gateway fails --on-redis-error: open, closed (503 naming the cause), or local (limits
alone to its share, --limit / --nodes); answers decided without Redis carry no RateLimit
fields, and the log says what happened, one line per kind of failure per 10 s. After
--breaker-failures failures in a row the circuit opens: requests no longer wait
--redis-timeout while Redis is asked in the background. --redis-sentinel follows a primary
through failovers. ratelab drill measures all of this.

--clock redis (the default) has the script read Redis's TIME, so that any number of
gateways and nginx nodes on hosts whose clocks disagree can share one Redis; with
--clock caller each passes its own host's time, and a host ahead of the others prunes
their requests early and over-admits (ratelab skew measures by how much).`,
		Example: `  ratelab edge --listen :8080 --upstream http://127.0.0.1:9000 --limit 100/1m --key-by header:X-Consumer-Id
  ratelab edge --upstream builtin --limit 10/1s --on-redis-error closed --redis redis://127.0.0.1:6379
  ratelab edge --engine openresty --upstream builtin --limit 100/1m
  ratelab edge --upstream builtin --limit 5/1s --limit 12/10s --key-by header:X-Consumer-Id
  ratelab edge --upstream http://127.0.0.1:9000 --rules rules.yaml
  ratelab edge --upstream builtin --upstream-delay 200ms --in-flight 5 --key-by header:X-Consumer-Id`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.limitSet, opts.keyBySet = cmd.Flags().Changed("limit"), cmd.Flags().Changed("key-by")
			opts.batchSet = cmd.Flags().Changed("redis-batch")
			opts.leaseSet = cmd.Flags().Changed("in-flight-lease")
			return runEdge(cmd.Context(), io, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", ":8080", "address clients connect to")
	f.StringVar(&opts.Admin, "admin", "127.0.0.1:9090", "address of /metrics, /healthz and /__ratelab/forwarded; with --engine openresty, of /healthz and /__ratelab/forwarded (empty: none)")
	f.StringVar(&opts.Upstream, "upstream", "", "URL to proxy to, or builtin (a 200 responder that counts per consumer)")
	f.StringArrayVar(&opts.limits, "limit", []string{"100/1m"}, "a limit: requests/window, such as 100/1m or 10/1s, optionally :ALGORITHM (5/1s:gcra) and, for token-bucket and gcra, "+
		":burst=N, the most admitted at once (10/1s:gcra:burst=6, nginx's rate=10r/s burst=5); "+
		"repeatable, every limit on the identity --key-by, decided together; off serves with no limiter")
	f.Int64Var(&opts.InFlight, "in-flight", 0, "the most requests of one identity (--key-by) in flight at once, beside --limit (alone when --limit is not given): "+
		"a slot is taken in the same Redis call as the rate limits and released when the response completes or the client goes away (0: none)")
	f.DurationVar(&opts.InFlightLease, "in-flight-lease", 30*time.Second, "the longest an in-flight slot is held: a slot never released "+
		"(a gateway killed mid-request) comes back once its lease runs out")
	f.DurationVar(&opts.UpstreamDelay, "upstream-delay", 0, "with --upstream builtin, hold each request this long before answering "+
		"(ending early when the client goes away), as a slow upstream would")
	f.StringVar(&opts.RulesFile, "rules", "", "a rules file (docs/rules.md) instead of --limit and --key-by; it reloads on SIGHUP and when the file changes")
	f.StringVar(&opts.Algorithm, "algorithm", "sliding-log", "the algorithm: "+strings.Join(algorithms.Algorithms(), ", "))
	f.StringVar(&opts.KeyBy, "key-by", "ip", "who a request is from: ip, or header:NAME")
	f.StringSliceVar(&opts.TrustedProxies, "trusted-proxies", nil, "CIDRs whose X-Forwarded-For is believed (with --key-by ip)")
	f.StringVar(&opts.OnError, "on-redis-error", "open", "when Redis fails: open (let through, counted), closed (503), "+
		"or local (each gateway limits alone to --limit / --nodes; go engine)")
	f.IntVar(&opts.Nodes, "nodes", 1, "gateways sharing the limit: with --on-redis-error local each limits to its share while Redis fails")
	f.IntVar(&opts.BreakerFailures, "breaker-failures", 5, "Redis failures in a row that open the circuit: decisions then skip Redis, "+
		"which is asked every 100ms until it answers (0: no circuit breaker)")
	f.DurationVar(&opts.Timeout, "redis-timeout", 200*time.Millisecond, "bound on one decision in Redis")
	f.IntVar(&opts.Pool, "redis-pool", 256, "Redis connections at most")
	f.IntVar(&opts.Batch, "redis-batch", defaultBatch, "most decisions per Redis round trip: concurrent decisions go out as one pipeline "+
		"(go engine; 1: one call per decision). The default took the least cpu per request of 1, 4, 8, 16, 32 and 64 at 50 connections "+
		"and 1,000 consumers: 0.09 round trips per decision and half the cpu of 1 (docs/measurements.md)")
	f.StringVar(&opts.Headers, "headers", "both", "rate-limit headers: draft, legacy or both")
	f.BoolVar(&opts.DenyCache, "deny-cache", true, "answer a denied consumer from memory until its retry-after has passed")
	f.BoolVar(&opts.Shadow, "shadow", false, "decide and add headers but never block (counts what would have been blocked)")
	f.IntVar(&opts.Bounds.Length, "max-value-length", limiter.DefaultBounds.Length, "longest value, in bytes, of a request attribute the rules read "+
		"(a header, a query parameter, the path): a request with a longer one gets 400 and is never decided (go engine)")
	f.StringVar(&opts.Engine, "engine", edge.EngineGo, "go (this process), or openresty (render nginx.conf for edge/openresty and run nginx)")
	f.StringVar(&opts.clock, "clock", "redis", "where the limiter takes the time from: redis (TIME, shared by every node) or caller (this host's)")
	opts.redis.bind(f, false)
	complete(cmd, "clock", "redis", "caller")
	complete(cmd, "engine", edge.EngineGo, edge.EngineOpenResty)
	complete(cmd, "algorithm", algorithms.Algorithms()...)
	return cmd
}

// edgeConfig checks every flag: nothing listens, starts or is sent before
// it succeeds.
func edgeConfig(io *ioStreams, opts edgeOptions) (edge.Options, redisrun.TargetConfig, error) {
	o := opts.Options
	o.Log = io.err
	switch {
	case opts.RulesFile != "" && opts.limitSet:
		return o, redisrun.TargetConfig{}, usagef("--rules and --limit are two ways to give the limits: give one")
	case opts.RulesFile != "" && opts.keyBySet:
		return o, redisrun.TargetConfig{}, usagef("--key-by is for --limit: with --rules, the file says who a request is from")
	case opts.InFlight < 0:
		return o, redisrun.TargetConfig{}, usagef("--in-flight must be at least 1, or 0 for none (got %d)", opts.InFlight)
	case opts.InFlightLease <= 0:
		return o, redisrun.TargetConfig{}, usagef("--in-flight-lease must be positive (got %s)", opts.InFlightLease)
	case opts.leaseSet && opts.InFlight == 0:
		return o, redisrun.TargetConfig{}, usagef("--in-flight-lease is for --in-flight: give the most in flight at once")
	case opts.RulesFile == "" && opts.InFlight > 0 && !opts.limitSet:
		o.Limits = nil // the in-flight limit alone
	case opts.RulesFile == "" && len(opts.limits) == 1 && opts.limits[0] == "off":
		o.Off = true
	case opts.RulesFile == "":
		if slices.Contains(opts.limits, "off") {
			return o, redisrun.TargetConfig{}, usagef("--limit off serves with no limiter: give it alone")
		}
		o.Limits = opts.limits
	}
	if o.Engine == edge.EngineOpenResty && !opts.batchSet {
		o.Batch = 1 // nginx's workers cannot batch: the default is the go engine's
	}
	clock, err := algorithms.ParseClock(opts.clock)
	if err != nil {
		return o, redisrun.TargetConfig{}, usagef("--clock: %w", err)
	}
	o.Clock = clock
	if err := o.Validate(); err != nil {
		return o, redisrun.TargetConfig{}, flagError(err, edgeNames)
	}
	if o.Engine == edge.EngineOpenResty {
		if _, _, err := edge.FindNginx(); err != nil {
			return o, redisrun.TargetConfig{}, usagef("--engine openresty needs nginx with its lua module: %v", err)
		}
	}
	target, err := opts.redis.config(io)
	if err != nil {
		return o, target, err
	}
	// nginx runs its script in a real Redis, never the embedded one.
	target.NoEmbedded = o.Engine == edge.EngineOpenResty
	ro, err := target.ClientOptions()
	if err != nil {
		return o, target, flagError(err, edgeNames)
	}
	if err := o.CheckRedis(ro); err != nil {
		return o, target, flagError(err, edgeNames)
	}
	return o, target, nil
}

func runEdge(ctx context.Context, io *ioStreams, opts edgeOptions) error {
	o, target, err := edgeConfig(io, opts)
	if err != nil {
		return err
	}
	if o.Off {
		return edge.Serve(ctx, o, nil, "")
	}
	t, err := openTarget(ctx, io, target, "edge")
	if err != nil {
		return err
	}
	defer t.Close()
	if t.Mode != string(redisrun.External) {
		io.notef("edge limits in a private Redis: its counts are lost when ratelab stops; pass --redis to share them")
	}
	return edge.Serve(ctx, o, t.Options, t.Addr)
}
