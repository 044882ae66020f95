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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/limiter"
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
	// Policy is the limit, when neither Limits nor RulesFile is given;
	// Algorithm the registry name of the algorithm of the limits that name
	// none (one of algorithms.Algorithms()); Clock where the decisions
	// take the time from.
	Policy    algorithms.Policy
	Algorithm string
	Clock     algorithms.Clock
	// Limits are limits on the one identity KeyBy names, each LIMIT/WINDOW
	// or LIMIT/WINDOW:ALGORITHM (Algorithm for those that name none): one
	// rule (rules.Shorthand), whose limits are decided together.
	Limits []string
	// InFlight, when above 0, adds to Limits an in-flight limit on the
	// same identity: at most InFlight of its requests in flight at once,
	// each slot held until its response completes or the client goes
	// away, or at most InFlightLease (rules.DefaultLease when 0).
	InFlight      int64
	InFlightLease time.Duration
	// UpstreamDelay holds each request the built-in upstream serves for
	// this long, ending early when the client goes away.
	UpstreamDelay time.Duration
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
	// Bounds.Length is the longest value of a request attribute the rules
	// read (the go engine; limiter.DefaultBounds when zero): see Config.
	Bounds limiter.Bounds
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
	case o.Shadow:
		return field.Errorf("Shadow", "is not in the openresty engine")
	case o.Batch > 1:
		return field.Errorf("Batch", "is not in the openresty engine: nginx's cosockets cannot share a connection between requests")
	case o.OnError == string(limiter.FailLocal):
		return field.Errorf("OnError", "local is not in the openresty engine: its workers keep no limiter of their own")
	case len(o.TrustedProxies) > 0:
		return field.Errorf("TrustedProxies", "is not in the openresty engine: use nginx's realip module (set_real_ip_from)")
	}
	if _, err := RenderRules(set); err != nil {
		return field.Errorf(rulesField(o), ": %v", err)
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

// resolve reads the limits: RulesFile, or the one-rule form of Limits (of
// Policy and Algorithm when there are none).
func (o Options) resolve() (Options, *rules.Set, error) {
	switch {
	case o.Off:
		return o, nil, nil
	case o.RulesFile != "" && o.InFlight > 0:
		return o, nil, field.Errorf("RulesFile", "and {InFlight} are two ways to give the limits: give an in-flight limit in the file (in_flight: N)")
	case o.RulesFile != "" && len(o.Limits) > 0:
		return o, nil, field.Errorf("RulesFile", "and {Limits} are two ways to give the limits: give one")
	case o.RulesFile != "":
		served, _, err := limiter.ReadRules(context.Background(), o.rulesConfig())
		if err != nil {
			return o, nil, field.Errorf("RulesFile", ": %v", err)
		}
		return o, served.Set(), nil
	case len(o.Limits) == 0 && o.InFlight > 0 && o.Policy == (algorithms.Policy{}):
	case len(o.Limits) == 0:
		if err := o.Policy.Validate(); err != nil {
			return o, nil, err
		}
		o.Limits = []string{o.Policy.String()}
	}
	set, err := rules.Shorthand{Limits: o.Limits, KeyBy: o.KeyBy, Algorithm: o.Algorithm, InFlight: o.InFlight, Lease: o.InFlightLease}.Set()
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
	if o.InFlight > 0 && len(o.Limits) == 0 {
		return "InFlight"
	}
	return "Limits"
}

// rulesConfig is where o's rules file is read from, and how it is checked.
func (o Options) rulesConfig() limiter.RulesConfig {
	opts := []rules.Option{rules.ForGateway()}
	if o.Algorithm != "" {
		opts = append(opts, rules.WithDefaultAlgorithm(o.Algorithm))
	}
	return limiter.RulesConfig{Path: o.RulesFile, Options: opts, Log: o.Log, Name: "ratelab edge",
		Check: func(s *limiter.Served) error { return o.checkRules(s.Set()) }}
}

// checkRules refuses a set that o cannot serve: with --on-redis-error
// local, a limit below the number of nodes has no share.
func (o Options) checkRules(set *rules.Set) error {
	if limiter.OnError(o.OnError) != limiter.FailLocal {
		return nil
	}
	for _, l := range set.Limits() {
		if !l.Unlimited && !l.InFlight && int64(o.Nodes) > l.Policy.Limit { // in-flight limits are not shared out
			return field.Errorf("Nodes", "must be at most each limit with local, whose share for each node is the limit over the nodes "+
				"(got %d nodes; limit %q is %s)", o.Nodes, l.ID, l.Policy)
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
	case o.Batch < 0 || o.Batch > limiter.MaxBatch:
		return cfg, field.Errorf("Batch", "must be between 1 and %d (got %d)", limiter.MaxBatch, o.Batch)
	case o.Nodes < 1 || o.Nodes > 10_000:
		return cfg, field.Errorf("Nodes", "must be between 1 and 10000 (got %d)", o.Nodes)
	case o.UpstreamDelay < 0 || o.UpstreamDelay > time.Hour:
		return cfg, field.Errorf("UpstreamDelay", "must be between 0 and 1h (got %s)", o.UpstreamDelay)
	case o.UpstreamDelay > 0 && o.Upstream != "builtin":
		return cfg, field.Errorf("UpstreamDelay", "is for --upstream builtin: a proxied upstream takes the time it takes")
	case o.BreakerFailures < 0 || o.BreakerFailures > 1_000_000:
		return cfg, field.Errorf("BreakerFailures", "must be between 0 (no circuit breaker) and 1000000 (got %d)", o.BreakerFailures)
	}
	if !listenAddr(o.Listen) {
		return cfg, field.Errorf("Listen", "%q: want host:port or :port, the port from 0 (any free one) to 65535", o.Listen)
	}
	if o.Admin != "" && !listenAddr(o.Admin) {
		return cfg, field.Errorf("Admin", "%q: want host:port or :port, the port from 0 (any free one) to 65535, or empty for none", o.Admin)
	}
	keyBy, err := ParseKeyBy(o.KeyBy, o.TrustedProxies)
	if err != nil {
		return cfg, field.Errorf("KeyBy", ": %v", err)
	}
	onErr := limiter.OnError(o.OnError)
	if onErr != limiter.FailOpen && onErr != limiter.FailClosed && onErr != limiter.FailLocal {
		return cfg, field.Errorf("OnError", "%q: want open, closed or local", o.OnError)
	}
	headers := limiter.Headers(o.Headers)
	if !slices.Contains([]limiter.Headers{limiter.HeadersDraft, limiter.HeadersLegacy, limiter.HeadersBoth}, headers) {
		return cfg, field.Errorf("Headers", "%q: want draft, legacy or both", o.Headers)
	}
	if err := o.Bounds.Validate(); err != nil {
		return cfg, field.Within("Bounds", err)
	}
	cfg = GatewayConfig{Off: o.Off, Listen: o.Listen, Admin: o.Admin, Upstream: o.Upstream, UpstreamDelay: o.UpstreamDelay, Log: o.Log,
		Limit: Config{Clock: o.Clock, KeyBy: keyBy, Headers: headers, Shadow: o.Shadow, Bounds: o.Bounds,
			Config: limiter.Config{OnError: onErr, Timeout: o.Timeout, DenyCache: o.DenyCache,
				BreakerFailures: o.BreakerFailures, Log: o.Log}}}
	if set != nil {
		if err := o.checkRules(set); err != nil {
			return cfg, err
		}
		cfg.Limit.Rules = limiter.FixedRules(set)
	}
	return cfg, nil
}

// listenAddr reports whether addr is an address to listen on: host:port
// or :port, the port a number or a service's name, within range.
func listenAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = net.LookupPort("tcp", port)
	return err == nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	port, err := strconv.Atoi(u.Port())
	return u.Port() == "" || err == nil && port >= 1 && port <= 65535
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
	if !o.Off {
		if o.RulesFile != "" {
			if cfg.Limit.Rules, err = limiter.LoadRules(ctx, o.rulesConfig()); err != nil {
				return err
			}
		}
		cfg.Limit.Metrics = limiter.NewMetrics()
		d, closeClient := limiter.OpenDecider(limiter.RedisConfig{Options: r, Timeout: o.Timeout, Pool: o.Pool, Batch: o.Batch,
			Clock: o.Clock, Metrics: cfg.Limit.Metrics})
		defer closeClient()
		if err := limiter.LoadScript(ctx, d, 5*time.Second, addr); err != nil {
			return err
		}
		cfg.Limit.Decider = d
		if cfg.Limit.OnError == limiter.FailLocal {
			local, err := limiter.NewLocalLimiter(o.Nodes)
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
		Clock: o.Clock.String(), Timeout: o.Timeout,
		KeyBy: o.KeyBy, OnError: o.OnError, Headers: o.Headers,
		DenyCache: o.DenyCache, Workers: 2, Off: o.Off, BreakerFailures: o.BreakerFailures, ShowRules: o.RulesFile != "",
		UpstreamDelay: o.UpstreamDelay,
	}
	if o.Admin != "" {
		nc.Admin = hostPort(o.Admin)
	}
	rs := cfg.Limit.Rules
	var n *Nginx // Apply's nginx, running before any reload
	if o.RulesFile != "" {
		// The rules nginx starts with are the version the reloader serves,
		// read once: a change while nginx starts is a reload.
		rc := o.rulesConfig()
		rc.Check = func(s *limiter.Served) error {
			if err := o.checkRules(s.Set()); err != nil {
				return err
			}
			_, err := RenderRules(s.Set())
			return err
		}
		rc.Apply = func(s *limiter.Served) error {
			text, err := RenderRules(s.Set())
			if err != nil {
				return err
			}
			return n.ReloadRules(text)
		}
		if rs, err = limiter.LoadRules(ctx, rc); err != nil {
			return err
		}
	}
	if rs != nil {
		if nc.Rules, err = RenderRules(rs.Current().Set()); err != nil {
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
	if o.Log != nil && rs != nil {
		fmt.Fprintf(o.Log, "ratelab edge: %s; %s's clock; Redis %s, timeout %s; on a Redis error: fail %s\n",
			rulesText(rs.Current().Set()), o.Clock.Owner(), addr, o.Timeout, o.OnError)
	}
	n, err = StartNginx(ctx, nc)
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
	if o.RulesFile != "" {
		// A new version is rendered and nginx reloaded: its new workers
		// decide by it, the old ones finish their requests.
		wctx, stop := context.WithCancel(ctx)
		watching := make(chan struct{})
		go func() {
			defer close(watching)
			if err := rs.Watch(wctx); err != nil && o.Log != nil {
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
