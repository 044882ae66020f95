package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/rules"
)

// Engines that can serve the limiter.
const (
	// EngineGo serves it in this process: the middleware and a gateway.
	EngineGo = "go"
	// EngineOpenResty renders edge/openresty's nginx.conf and runs nginx
	// with the Lua module.
	EngineOpenResty = "openresty"
)

// Options are what ratelab edge serves: an engine running the limiter in
// front of an upstream.
type Options struct {
	// Engine is EngineGo or EngineOpenResty.
	Engine string
	// Listen and Admin are the addresses of the gateway and of its admin
	// endpoints (none when Admin is empty).
	Listen, Admin string
	// Upstream is an http:// or https:// URL, or "builtin".
	Upstream string
	// Off serves the upstream with no limiter.
	Off bool
	// Policy is the limit; Algorithm the registry name of the algorithm
	// (one of algorithms.Algorithms()); Clock where it takes the time from.
	// Limits or RulesFile, when given, replace Policy.
	Policy    algorithms.Policy
	Algorithm string
	Clock     algorithms.Clock
	// Limits are limits on the one identity KeyBy names, each LIMIT/WINDOW
	// or LIMIT/WINDOW:ALGORITHM (Algorithm for those that name none), as in
	// rules.Shorthand. A lone limit is Policy; several are decided together,
	// as rules.
	Limits []string
	// RulesFile is a rules file (docs/rules.md) that decides every request
	// instead of Policy or Limits. It reloads on SIGHUP and whenever the file
	// changes; a version that does not validate is refused and logged, and
	// the rules serving stay.
	RulesFile string
	// KeyBy is "ip" or "header:NAME"; TrustedProxies are the CIDRs whose
	// X-Forwarded-For is believed. With RulesFile, the file says who a
	// request is from, and KeyBy only labels the built-in upstream's counts.
	KeyBy          string
	TrustedProxies []string
	// OnError is "open", "closed" or "local" (the go engine only);
	// Headers "draft", "legacy" or "both".
	OnError, Headers string
	// Nodes is the number of gateways sharing the limit, for OnError
	// "local": each limits alone to Limit / Nodes while Redis fails. At
	// least 1.
	Nodes int
	// BreakerFailures opens the circuit after this many Redis failures in a
	// row (see Config); 0: never.
	BreakerFailures int
	// Timeout bounds one decision; Pool the Redis connections.
	Timeout time.Duration
	Pool    int
	// Batch is the most decisions sent to Redis in one round trip (the go
	// engine): concurrent decisions' EVALSHAs go out together as one
	// pipeline (internal/batch). 0 or 1: one call per decision.
	Batch int
	// DenyCache and Shadow: see Config.
	DenyCache, Shadow bool
	// Log receives the start-up and shutdown lines.
	Log io.Writer
}

// Validate checks o before anything listens or is sent. Errors are
// *field.Error naming the fields of Options.
func (o Options) Validate() error {
	if _, err := o.config(); err != nil {
		return err
	}
	if o.Engine != EngineOpenResty {
		return nil
	}
	o, set, _ := o.resolve()
	switch {
	case o.Off:
		return nil
	case set == nil && o.Algorithm != "sliding-log":
		return field.Errorf("Engine", "openresty runs the sliding log only (got {Algorithm} %s)", o.Algorithm)
	case o.Shadow:
		return field.Errorf("Shadow", "is not in the openresty engine")
	case o.Batch > 1:
		return field.Errorf("Batch", "is not in the openresty engine: nginx's cosockets cannot share a connection between requests")
	case o.OnError == string(FailLocal):
		return field.Errorf("OnError", "local is not in the openresty engine: its workers keep no limiter of their own")
	case len(o.TrustedProxies) > 0:
		return field.Errorf("TrustedProxies", "is not in the openresty engine: use nginx's realip module (set_real_ip_from)")
	case set != nil:
		if _, err := RenderRules(set); err != nil {
			return field.Errorf(rulesField(o), ": %v", err)
		}
	}
	return nil
}

// CheckRedis says whether the engine can use a Redis reached with r (nil
// for a private server). Errors are *field.Error naming Redis.
func (o Options) CheckRedis(r *redis.UniversalOptions) error {
	if o.Engine != EngineOpenResty || o.Off || r == nil {
		return nil
	}
	switch {
	case r.IsClusterMode || len(r.Addrs) > 1 || r.MasterName != "" || r.Dialer != nil || r.TLSConfig != nil:
		return field.Errorf("Redis", ": the openresty engine reaches one Redis over plain TCP: no Cluster, Sentinel, unix socket or TLS")
	case r.DB != 0 || r.Username != "":
		return field.Errorf("Redis", ": the openresty engine uses database 0 and password-only AUTH: drop the database and user")
	}
	return nil
}

// resolve reads Limits or RulesFile: it returns o with Policy and
// Algorithm set from a lone limit, or the rules of several.
func (o Options) resolve() (Options, *rules.Set, error) {
	switch {
	case o.Off:
		return o, nil, nil
	case o.RulesFile != "" && len(o.Limits) > 0:
		return o, nil, field.Errorf("RulesFile", "and {Limits} are two ways to give the limits: give one")
	case o.RulesFile != "":
		set, err := LoadRules(o.RulesFile, o.ruleOptions()...)
		if err != nil {
			return o, nil, field.Errorf("RulesFile", ": %v", err)
		}
		return o, set, nil
	case len(o.Limits) == 0:
		return o, nil, nil
	case len(o.Limits) == 1:
		pol, alg, named := strings.Cut(o.Limits[0], ":")
		p, err := algorithms.ParsePolicy(pol)
		if err != nil {
			return o, nil, field.Errorf("Limits", "%v", err)
		}
		if !named {
			alg = o.Algorithm
		}
		// The nginx module's single limit is the sliding log; any other
		// algorithm it runs as a rule.
		if o.Engine != EngineOpenResty || alg == "sliding-log" {
			o.Policy, o.Algorithm = p, alg
			return o, nil, nil
		}
	}
	set, err := rules.Shorthand{Limits: o.Limits, KeyBy: o.KeyBy, Algorithm: o.Algorithm}.Set()
	if err != nil {
		var re *rules.Error
		if errors.As(err, &re) {
			return o, nil, field.Errorf(re.Field, "%s", re.Message)
		}
		return o, nil, field.Errorf("Limits", ": %v", err)
	}
	return o, set, nil
}

// rulesField is the field that gave o's rules: RulesFile or Limits.
func rulesField(o Options) string {
	if o.RulesFile != "" {
		return "RulesFile"
	}
	return "Limits"
}

// ruleOptions are Parse's options for a rules file of o.
func (o Options) ruleOptions() []rules.Option {
	opts := []rules.Option{rules.ForGateway()}
	if o.Algorithm != "" {
		opts = append(opts, rules.WithDefaultAlgorithm(o.Algorithm))
	}
	return opts
}

// checkRules refuses a set that o cannot serve: with --on-redis-error
// local, a limit below the number of nodes has no share.
func (o Options) checkRules(set *rules.Set) error {
	if OnError(o.OnError) != FailLocal {
		return nil
	}
	for _, l := range set.Limits() {
		if !l.Unlimited && int64(o.Nodes) > l.Policy.Limit {
			return field.Errorf("Nodes", "must be at most every limit with local: each node's share is the limit over the nodes "+
				"(got %d nodes, limit %s of %d)", o.Nodes, l.ID, l.Policy.Limit)
		}
	}
	return nil
}

// config builds the gateway's configuration from o.
func (o Options) config() (GatewayConfig, error) {
	var cfg GatewayConfig
	o, set, err := o.resolve()
	if err != nil {
		return cfg, err
	}
	switch {
	case o.Engine != EngineGo && o.Engine != EngineOpenResty:
		return cfg, field.Errorf("Engine", "%q: want go or openresty", o.Engine)
	case o.Upstream == "":
		return cfg, field.Errorf("Upstream", "is required: a URL, or builtin")
	case o.Upstream != "builtin" && !httpURL(o.Upstream):
		return cfg, field.Errorf("Upstream", "%q: want an http:// or https:// URL, or builtin", o.Upstream)
	case o.Timeout <= 0 || o.Timeout > time.Minute:
		return cfg, field.Errorf("Timeout", "must be between 1ms and 1m (got %s)", o.Timeout)
	case o.Pool < 1:
		return cfg, field.Errorf("Pool", "must be at least 1 (got %d)", o.Pool)
	case o.Batch < 0 || o.Batch > maxBatch:
		return cfg, field.Errorf("Batch", "must be between 1 and %d (got %d)", maxBatch, o.Batch)
	case o.Nodes < 1 || o.Nodes > 10_000:
		return cfg, field.Errorf("Nodes", "must be between 1 and 10000 (got %d)", o.Nodes)
	case o.BreakerFailures < 0 || o.BreakerFailures > 1_000_000:
		return cfg, field.Errorf("BreakerFailures", "must be between 0 (no circuit breaker) and 1000000 (got %d)", o.BreakerFailures)
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return cfg, field.Errorf("Listen", "%q: want host:port or :port", o.Listen)
	}
	if o.Admin != "" {
		if _, _, err := net.SplitHostPort(o.Admin); err != nil {
			return cfg, field.Errorf("Admin", "%q: want host:port or :port, or empty for none", o.Admin)
		}
	}
	if !o.Off && set == nil {
		if err := o.Policy.Validate(); err != nil {
			return cfg, err
		}
		if info, ok := algorithms.Lookup(o.Algorithm); !ok || !info.Algorithm {
			return cfg, field.Errorf("Algorithm", "%q: want one of %s", o.Algorithm, strings.Join(algorithms.Algorithms(), ", "))
		}
	}
	keyBy, err := ParseKeyBy(o.KeyBy, o.TrustedProxies)
	if err != nil {
		return cfg, field.Errorf("KeyBy", ": %v", err)
	}
	onErr := OnError(o.OnError)
	if onErr != FailOpen && onErr != FailClosed && onErr != FailLocal {
		return cfg, field.Errorf("OnError", "%q: want open, closed or local", o.OnError)
	}
	if onErr == FailLocal && !o.Off && set == nil && int64(o.Nodes) > o.Policy.Limit {
		return cfg, field.Errorf("Nodes", "must be at most {Limit} with local: each node's share is the limit over the nodes (got %d nodes, limit %d)",
			o.Nodes, o.Policy.Limit)
	}
	headers := Headers(o.Headers)
	if !slices.Contains([]Headers{HeadersDraft, HeadersLegacy, HeadersBoth}, headers) {
		return cfg, field.Errorf("Headers", "%q: want draft, legacy or both", o.Headers)
	}
	cfg = GatewayConfig{Off: o.Off, Listen: o.Listen, Admin: o.Admin, Upstream: o.Upstream, Log: o.Log,
		Limit: Config{Algorithm: o.Algorithm, Policy: o.Policy, Clock: o.Clock, KeyBy: keyBy, OnError: onErr,
			Timeout: o.Timeout, Headers: headers, DenyCache: o.DenyCache, Shadow: o.Shadow,
			BreakerFailures: o.BreakerFailures, Log: o.Log}}
	if set != nil {
		if err := o.checkRules(set); err != nil {
			return cfg, err
		}
		cfg.Limit.Rules = NewRules(set, RulesConfig{File: o.RulesFile, Options: o.ruleOptions(), Check: o.checkRules, Log: o.Log})
	}
	return cfg, nil
}

// maxBatch bounds Options.Batch: deeper pipelines save no more round trips
// than Redis can serve, and delay the first reply of each.
const maxBatch = 1024

// batchFlushers is how many pipelines of batched decisions are always
// ready to go out, each on its own connection: one in Redis while the next
// gathers. A decision that has waited batch.Options.Wait while both are
// out starts another, up to as many as the pool allows
// (batch.Options.MaxPipelines).
const batchFlushers = 2

// redisClient is the go engine's Redis client, its EVALSHAs batched when
// o.Batch is over 1 and its round trips counted in m; closeClient stops
// the batcher, then the client.
func (o Options) redisClient(r *redis.UniversalOptions, m *Metrics) (client redis.UniversalClient, closeClient func()) {
	return newRedisClient(r, o.Timeout, o.Pool, o.Batch, m)
}

// newRedisClient is a Redis client of pool connections for decisions
// bounded by timeout, their EVALSHAs batched up to batchMax per round trip
// when that is over 1 and their round trips counted in m; closeClient
// stops the batcher, then the client.
func newRedisClient(r *redis.UniversalOptions, timeout time.Duration, pool, batchMax int, m *Metrics) (client redis.UniversalClient, closeClient func()) {
	plain := redis.NewUniversalClient(RedisOptions(*r, timeout, pool))
	m.CountRedis(plain)
	if batchMax <= 1 {
		return plain, func() { plain.Close() }
	}
	b := batch.New(plain, batch.Options{Max: batchMax, Flushers: batchFlushers, MaxPipelines: pool, Timeout: timeout})
	return b.Wrap(plain), func() {
		b.Close()
		plain.Close()
	}
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Serve runs the engine o names until ctx is done, deciding in the Redis
// that r reaches (addr names it in messages). With Off, r may be nil.
func Serve(ctx context.Context, o Options, r *redis.UniversalOptions, addr string) error {
	o, _, err := o.resolve()
	if err != nil {
		return err
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if o.Engine == EngineOpenResty {
		return serveOpenResty(ctx, o, cfg, r, addr)
	}
	cfg.Limit.Metrics = NewMetrics()
	if !o.Off && cfg.Limit.Rules != nil {
		client, closeClient := o.redisClient(r, cfg.Limit.Metrics)
		defer closeClient()
		d := algorithms.NewDecider(client, algorithms.DecideClock(o.Clock), algorithms.DecideOnCluster(redisrun.IsCluster(r)))
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.Load(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot load the decision's script into Redis at %s: %w", addr, err)
		}
		cfg.Limit.Decider = d
		if cfg.Limit.OnError == FailLocal {
			local, err := NewLocalRules(o.Nodes)
			if err != nil {
				return err
			}
			defer local.Close()
			cfg.Limit.Local = local
		}
	} else if !o.Off {
		client, closeClient := o.redisClient(r, cfg.Limit.Metrics)
		defer closeClient()
		lim, err := algorithms.New(o.Algorithm, client, o.Policy, algorithms.WithClock(o.Clock))
		if err != nil {
			return err
		}
		if l, ok := lim.(algorithms.Loader); ok {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := l.Load(lctx)
			cancel()
			if err != nil {
				return fmt.Errorf("cannot load the limiter's script into Redis at %s: %w", addr, err)
			}
		}
		cfg.Limit.Limiter = lim
		if cfg.Limit.OnError == FailLocal {
			local, err := NewLocalLimiter(o.Algorithm, o.Policy, o.Nodes)
			if err != nil {
				return err
			}
			defer local.Close()
			cfg.Limit.Local = local
		}
	}
	g, err := NewGateway(cfg)
	if err != nil {
		return err
	}
	return g.Serve(ctx)
}

// serveOpenResty renders edge/openresty/nginx.conf for o and runs nginx
// with the module until ctx is done.
func serveOpenResty(ctx context.Context, o Options, cfg GatewayConfig, r *redis.UniversalOptions, addr string) error {
	_, _, err := FindNginx()
	if err != nil {
		return err
	}
	nc := NginxConfig{
		Listen: hostPort(o.Listen), Upstream: o.Upstream,
		Policy: o.Policy, Clock: o.Clock.String(), Timeout: o.Timeout,
		KeyBy: o.KeyBy, OnError: o.OnError, Headers: o.Headers,
		DenyCache: o.DenyCache, Workers: 2, Off: o.Off, BreakerFailures: o.BreakerFailures,
	}
	if o.Admin != "" {
		nc.Admin = hostPort(o.Admin)
	}
	rs := cfg.Limit.Rules
	if rs != nil {
		if nc.Rules, err = RenderRules(rs.Current().Set); err != nil {
			return err
		}
	}
	if !o.Off {
		host, portText, err := net.SplitHostPort(r.Addrs[0])
		if err != nil {
			return err
		}
		// nginx resolves nothing without a resolver line: give it an address.
		if _, err := netip.ParseAddr(host); err != nil {
			addrs, err := net.DefaultResolver.LookupHost(ctx, host)
			if err != nil || len(addrs) == 0 {
				return fmt.Errorf("redis host %s: %v", host, err)
			}
			host = addrs[0]
		}
		nc.RedisHost, nc.RedisPassword = host, r.Password
		nc.RedisPort, _ = strconv.Atoi(portText)
	}
	// What it will serve is said first: clients may reach nginx a moment
	// before StartNginx sees it accept.
	if o.Log != nil && !o.Off && rs != nil {
		set := rs.Current().Set
		fmt.Fprintf(o.Log, "ratelab edge: rules %s (domain %s, version %s): %s; %s's clock; Redis %s, timeout %s; on a Redis error: fail %s\n",
			set.File, set.Domain, set.Version, limitsText(set), clockOwner(o.Clock), addr, o.Timeout, o.OnError)
	} else if o.Log != nil && !o.Off {
		fmt.Fprintf(o.Log, "ratelab edge: sliding-log, %d per %s, by %s, on %s's clock; Redis %s, timeout %s; on a Redis error: fail %s\n",
			o.Policy.Limit, o.Policy.Window, o.KeyBy, clockOwner(o.Clock), addr, o.Timeout, o.OnError)
	}
	n, err := StartNginx(ctx, nc)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // stopped before nginx was ready: StartNginx has stopped it
	case err != nil:
		return err
	}
	defer n.Stop()
	if o.Log != nil {
		fmt.Fprintf(o.Log, "ratelab edge: nginx with edge/openresty/ratelimit.lua listening on %s, upstream %s, admin %s (config in %s)\n",
			nc.Listen, o.Upstream, orNone(nc.Admin), n.Dir())
	}
	if rs != nil && o.RulesFile != "" {
		// A new version is rendered and nginx reloaded: its new workers
		// decide by it, the old ones finish their requests.
		watched := NewRules(rs.Current().Set, RulesConfig{File: o.RulesFile, Options: o.ruleOptions(), Log: o.Log,
			Check: func(set *rules.Set) error {
				if err := o.checkRules(set); err != nil {
					return err
				}
				_, err := RenderRules(set)
				return err
			},
			Apply: func(set *rules.Set) error {
				text, err := RenderRules(set)
				if err != nil {
					return err
				}
				return n.ReloadRules(text)
			}})
		wctx, stop := context.WithCancel(ctx)
		watching := make(chan struct{})
		go func() {
			defer close(watching)
			if err := watched.Watch(wctx); err != nil && o.Log != nil {
				fmt.Fprintf(o.Log, "ratelab edge: rules do not reload when the file changes: %v\n", err)
			}
		}()
		defer func() { stop(); <-watching }()
	}
	select {
	case <-ctx.Done():
		if o.Log != nil {
			fmt.Fprintln(o.Log, "ratelab edge: stopping nginx")
		}
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
