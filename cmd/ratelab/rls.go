package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// rlsOptions are the flags of ratelab rls.
type rlsOptions struct {
	rls.Options
	onError string
	clock   string
	redis   redisFlags
}

// rlsNames are the flags that set rls.Options' fields.
var rlsNames = flagNames{"GRPC": "--grpc", "HTTP": "--http", "ConfigDir": "--config", "Timeout": "--redis-timeout",
	"Pool": "--redis-pool", "Batch": "--redis-batch", "OnError": "--on-redis-error", "BreakerFailures": "--breaker-failures",
	"TLSCertFile": "--grpc-tls-cert", "TLSKeyFile": "--grpc-tls-key", "TLSClientCAFile": "--grpc-tls-client-ca",
	"Bounds.Descriptors": "--max-descriptors", "Bounds.Entries": "--max-entries", "Bounds.Length": "--max-value-length"}

func newRLSCmd(io *ioStreams) *cobra.Command {
	var opts rlsOptions
	cmd := &cobra.Command{
		Use:   "rls",
		Short: "Serve Envoy's global rate limit service (envoy.service.ratelimit.v3) on ratelab's limiter",
		Long: `rls serves envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC (with
grpc.health.v1), and envoyproxy/ratelimit's HTTP /json endpoint, /healthz and /metrics on --http:
a drop-in replacement for envoyproxy/ratelimit behind Envoy, Istio, Contour, Emissary or Gloo.

--config is a directory of envoyproxy/ratelimit's YAML files, unchanged, one domain each. A
descriptor meets the limit envoyproxy/ratelimit's lookup finds; a call is OVER_LIMIT when any of
its descriptors is, and all their limits are decided together in one Redis round trip (a call
over any limit consumes nothing). A limit with no algorithm is a fixed window aligned to its
unit, as envoyproxy/ratelimit's; ratelab's extensions (docs/rules.md) add algorithm:
sliding-log, sliding-counter, token-bucket or gcra, any window (window: 30s) and several limits
on a descriptor. The directory reloads on SIGHUP and when a file changes; a file that does not
parse is logged, naming its line and field, and the configuration serving keeps serving.

--deny-cache (on by default) answers a call over a limit Redis refused, until that limit admits
again, from memory without Redis. When Redis fails, or the circuit is open after
--breaker-failures failures in a row, a call is answered --on-redis-error: open (OK, no limit)
or closed (OVER_LIMIT).

--grpc-tls-cert and --grpc-tls-key serve the gRPC service over TLS (1.2 or later), and
--grpc-tls-client-ca then asks every client for a certificate signed by those CAs (mutual TLS).
The files are read once, at start. /json, /healthz and /metrics on --http stay plaintext.

docs/envoy.md has an Envoy configuration that uses it, and envoyproxy/ratelimit's settings
mapped to these flags.`,
		Example: `  ratelab rls --config ./ratelimit/config --redis redis://127.0.0.1:6379
  ratelab rls --config ./config --grpc :8081 --http :8080 --response-headers --on-redis-error closed
  ratelab rls --config ./config --grpc-tls-cert rls.pem --grpc-tls-key rls-key.pem --grpc-tls-client-ca clients-ca.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRLS(cmd.Context(), io, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.GRPC, "grpc", ":8081", "address of the gRPC service (envoyproxy/ratelimit's GRPC_PORT)")
	f.StringVar(&opts.HTTP, "http", ":8080", "address of /json, /healthz and /metrics (envoyproxy/ratelimit's PORT; empty: none)")
	f.StringVar(&opts.TLSCertFile, "grpc-tls-cert", "", "PEM file of the certificate (and chain) to serve gRPC over TLS with, "+
		"with --grpc-tls-key (envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT; default: plaintext)")
	f.StringVar(&opts.TLSKeyFile, "grpc-tls-key", "", "PEM file of --grpc-tls-cert's key (GRPC_SERVER_TLS_KEY)")
	f.StringVar(&opts.TLSClientCAFile, "grpc-tls-client-ca", "", "PEM file of the CAs that sign the clients' certificates: "+
		"require and verify one from every gRPC client, mutual TLS (GRPC_CLIENT_TLS_CACERT)")
	f.StringVar(&opts.ConfigDir, "config", "", "directory of envoyproxy/ratelimit YAML files, one domain each (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config)")
	f.BoolVar(&opts.MergeDomains, "merge-domains", false, "merge the files of one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); "+
		"without it a domain in two files is refused")
	f.BoolVar(&opts.ResponseHeaders, "response-headers", false, "add the draft-10 RateLimit and RateLimit-Policy fields to response_headers_to_add "+
		"(envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	f.BoolVar(&opts.DenyCache, "deny-cache", true, "answer a call over a limit known to refuse it from memory, without Redis, until that limit admits again")
	f.StringVar(&opts.onError, "on-redis-error", "open", "when Redis fails: open (OK) or closed (OVER_LIMIT)")
	f.IntVar(&opts.BreakerFailures, "breaker-failures", 5, "Redis failures in a row that open the circuit: calls then skip Redis, "+
		"which is asked every 100ms until it answers (0: no circuit breaker)")
	f.DurationVar(&opts.Timeout, "redis-timeout", 200*time.Millisecond, "bound on one decision in Redis")
	f.IntVar(&opts.Pool, "redis-pool", 256, "Redis connections at most (envoyproxy/ratelimit's REDIS_POOL_SIZE)")
	f.IntVar(&opts.Batch, "redis-batch", 16, "most decisions per Redis round trip: concurrent calls go out as one pipeline "+
		"(1: one call per decision)")
	f.IntVar(&opts.Bounds.Descriptors, "max-descriptors", limiter.DefaultBounds.Descriptors, "most descriptors in one call: "+
		"a call with more is refused (InvalidArgument, 400 on /json) and never reaches Redis")
	f.IntVar(&opts.Bounds.Entries, "max-entries", limiter.DefaultBounds.Entries, "most entries in one descriptor: a call with more is refused")
	f.IntVar(&opts.Bounds.Length, "max-value-length", limiter.DefaultBounds.Length, "longest key or value of an entry, in bytes: "+
		"a call with a longer one is refused")
	f.StringVar(&opts.clock, "clock", "redis", "where the limiter takes the time from: redis (TIME, shared by every node) or caller (this host's)")
	opts.redis.bind(f, false)
	complete(cmd, "clock", "redis", "caller")
	complete(cmd, "on-redis-error", "open", "closed")
	return cmd
}

// rlsConfig checks every flag and reads the configuration: nothing
// listens, starts or is sent before it succeeds.
func rlsConfig(io *ioStreams, opts rlsOptions) (rls.Options, redisrun.TargetConfig, error) {
	o := opts.Options
	o.Log = io.err
	o.OnError = limiter.OnError(opts.onError)
	clock, err := algorithms.ParseClock(opts.clock)
	if err != nil {
		return o, redisrun.TargetConfig{}, usagef("--clock: %w", err)
	}
	o.Clock = clock
	if err := o.Validate(); err != nil {
		return o, redisrun.TargetConfig{}, flagError(err, rlsNames)
	}
	if o.TLS, err = o.GRPCTLS(); err != nil {
		return o, redisrun.TargetConfig{}, flagError(err, rlsNames)
	}
	if _, _, err := limiter.ReadRules(context.Background(), o.RulesConfig()); err != nil {
		return o, redisrun.TargetConfig{}, usagef("--config: %w", err)
	}
	target, err := opts.redis.config(io)
	if err != nil {
		return o, target, err
	}
	if _, err := target.ClientOptions(); err != nil {
		return o, target, flagError(err, rlsNames)
	}
	return o, target, nil
}

func runRLS(ctx context.Context, io *ioStreams, opts rlsOptions) error {
	o, target, err := rlsConfig(io, opts)
	if err != nil {
		return err
	}
	t, err := openTarget(ctx, io, target, "rls")
	if err != nil {
		return err
	}
	defer t.Close()
	if t.Mode != string(redisrun.External) {
		io.notef("rls limits in a private Redis: its counts are lost when ratelab stops; pass --redis to share them")
	}
	return rls.Serve(ctx, o, t.Options, t.Addr)
}
