package drill

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/limiter"
)

// consumerHeader carries the consumers' identities.
const consumerHeader = "X-Consumer-Id"

// stage is the Redis side of one run: the servers, what the gateway is
// given to reach them, and the fault.
type stage struct {
	primary  *redisrun.Server
	replica  *redisrun.Server
	sentinel *redisrun.Server
	proxy    *toxiproxy.Proxy
	reach    *redis.UniversalOptions // what the gateways are given
	addr     string
}

func (s *stage) stop() {
	if s.proxy != nil {
		s.proxy.Stop()
	}
	for _, srv := range []*redisrun.Server{s.sentinel, s.replica, s.primary} {
		if srv != nil {
			srv.Kill()
		}
	}
}

// admin is a client for the drill's own commands to a server: CONFIG,
// SCRIPT FLUSH, the filler, SENTINEL; every call bounded.
func admin(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: -1, PoolSize: 2})
}

// setUp starts what fault needs.
func setUp(ctx context.Context, cfg Config, fault string) (*stage, error) {
	s := &stage{}
	var err error
	if s.primary, err = redisrun.Start(ctx, redisrun.Options{}); err != nil {
		return nil, err
	}
	s.addr = s.primary.Addr
	switch fault {
	case Failover:
		if s.replica, err = redisrun.StartReplica(ctx, s.primary.Addr, redisrun.Options{}); err != nil {
			s.stop()
			return nil, err
		}
		if s.sentinel, err = redisrun.StartSentinel(ctx, redisrun.SentinelOptions{Name: "drill", Primary: s.primary.Addr,
			DownAfter: cfg.DownAfter}); err != nil {
			s.stop()
			return nil, err
		}
		if err := waitReplicaKnown(ctx, s.sentinel.Addr); err != nil {
			s.stop()
			return nil, err
		}
		s.reach = &redis.UniversalOptions{MasterName: "drill", Addrs: []string{s.sentinel.Addr}, Protocol: 2}
		s.addr = "drill@" + s.sentinel.Addr
		return s, nil
	case Latency, Reset:
		server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		s.proxy = toxiproxy.NewProxy(server, "redis", "127.0.0.1:0", s.primary.Addr)
		if err := s.proxy.Start(); err != nil {
			s.stop()
			return nil, fmt.Errorf("toxiproxy: %w", err)
		}
		s.addr = s.proxy.Listen
	}
	s.reach = &redis.UniversalOptions{Addrs: []string{s.addr}, Protocol: 2}
	return s, nil
}

// waitReplicaKnown waits until the sentinel lists a replica it could
// promote, for at most 15 seconds.
func waitReplicaKnown(ctx context.Context, sentinel string) error {
	c := admin(sentinel)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		reps, err := c.Do(ctx, "SENTINEL", "REPLICAS", "drill").Slice()
		if err == nil && len(reps) > 0 && !strings.Contains(fmt.Sprint(reps), "s_down") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sentinel lists no replica of drill: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// window is when a fault lasted, and what the failover took.
type window struct {
	start, end time.Time
	failover   time.Duration // 0: no failover, or it did not happen
}

// inject applies fault to s at the right moment of a run that began at
// began, holds it cfg.FaultDuration, and clears it.
func inject(ctx context.Context, cfg Config, r run, s *stage, began time.Time) (window, error) {
	var w window
	if !sleepUntil(ctx, began.Add(cfg.Steady)) {
		return w, ctx.Err()
	}
	c := admin(s.primary.Addr)
	defer c.Close()
	w.start = time.Now()
	end := w.start.Add(cfg.FaultDuration)
	switch r.fault {
	case Hang:
		if err := s.primary.Pause(); err != nil {
			return w, err
		}
		sleepUntil(ctx, end)
		if err := s.primary.Resume(); err != nil {
			return w, err
		}
	case Restart:
		port := s.primary.Port()
		s.primary.Kill()
		sleepUntil(ctx, end)
		srv, err := redisrun.Start(context.WithoutCancel(ctx), redisrun.Options{Port: port})
		if err != nil {
			return w, fmt.Errorf("restart: %w", err)
		}
		s.primary = srv
	case Latency, Reset:
		toxic := fmt.Sprintf(`{"name":"fault","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, r.latency.Milliseconds())
		if r.fault == Reset {
			toxic = `{"name":"fault","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`
		}
		if _, err := s.proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return w, fmt.Errorf("toxiproxy: %w", err)
		}
		sleepUntil(ctx, end)
		if err := s.proxy.Toxics.RemoveToxic(context.WithoutCancel(ctx), "fault"); err != nil {
			return w, fmt.Errorf("toxiproxy: %w", err)
		}
	case ScriptFlush:
		for t := time.Now(); t.Before(end); t = time.Now() {
			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.ScriptFlush(fctx).Err()
			cancel()
			if err != nil {
				return w, fmt.Errorf("script flush: %w", err)
			}
			if !sleepUntil(ctx, t.Add(250*time.Millisecond)) {
				break
			}
		}
	case OOM:
		if err := fill(ctx, c); err != nil {
			return w, err
		}
		sleepUntil(ctx, end)
		if err := c.ConfigSet(context.WithoutCancel(ctx), "maxmemory", "0").Err(); err != nil {
			return w, fmt.Errorf("oom: %w", err)
		}
	case Failover:
		old := s.primary.Addr
		s.primary.Kill()
		promoted, err := waitPromoted(ctx, s.sentinel.Addr, old, cfg.FaultDuration+cfg.After)
		if err != nil {
			return w, err
		}
		if !promoted.IsZero() {
			w.failover = promoted.Sub(w.start)
			end = promoted
		}
	}
	w.end = time.Now()
	if r.fault == Failover {
		w.end = end
	}
	return w, nil
}

// fill sets Redis's maxmemory just above what it uses (noeviction) and
// writes values, smaller and smaller, until even a small one is refused:
// a full Redis. At most 3,000 writes and 10 seconds.
func fill(ctx context.Context, c *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	used, err := usedMemory(ctx, c)
	if err != nil {
		return err
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+(1<<20), 10)).Err(); err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	// A large value's own query buffer counts while it is refused: go on
	// with smaller ones until a 16-byte value is refused too.
	n := 0
	for _, size := range []int{16 << 10, 1 << 10, 16} {
		value := strings.Repeat("x", size)
		for ; n < 3000; n++ {
			err := c.Set(ctx, "ratelab-drill-fill:"+strconv.Itoa(n), value, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM") {
				break
			}
			if err != nil {
				return fmt.Errorf("oom: fill: %w", err)
			}
		}
	}
	if n >= 3000 {
		return errors.New("oom: Redis took 3,000 writes over its maxmemory without refusing one")
	}
	// Clients' buffers come and go (a gateway that closes its connections
	// on an error frees theirs): hold the full server well over its
	// maxmemory, half of what it uses, so that no write slips in.
	used, err = usedMemory(ctx, c)
	if err != nil {
		return err
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	return nil
}

// usedMemory is INFO's used_memory.
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("oom: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("oom: INFO memory has no used_memory")
}

// waitPromoted asks the sentinel for the primary until it names another
// than old, for at most limit, and says when; the zero time when it did
// not.
func waitPromoted(ctx context.Context, sentinel, old string, limit time.Duration) (time.Time, error) {
	c := admin(sentinel)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "drill").StringSlice()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) != old {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sleepUntil waits until t, and reports false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// gateway serves the limiter with r's engine and mode in front of s, on
// a free loopback port, until ctx is done; it returns once it accepts
// connections, with a function that stops it and reports how it ended.
// A port found free may be taken before the gateway binds it (by another
// program's outgoing connection): then it tries another, twice at most.
func gateway(ctx context.Context, cfg Config, r run, s *stage) (string, func() error, error) {
	for attempt := 1; ; attempt++ {
		addr, stop, err := gatewayOnce(ctx, cfg, r, s)
		if err == nil || attempt == 3 || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			return addr, stop, err
		}
	}
}

func gatewayOnce(ctx context.Context, cfg Config, r run, s *stage) (string, func() error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	o := edge.Options{Engine: r.engine, Listen: addr, Upstream: "builtin", Policy: cfg.Policy, Algorithm: cfg.Algorithm,
		KeyBy: "header:" + consumerHeader, OnError: r.mode, Headers: string(limiter.HeadersBoth), Timeout: cfg.Timeout,
		Pool: 64, Nodes: cfg.Nodes, BreakerFailures: max(cfg.BreakerFailures, 0), DenyCache: true, Clock: algorithms.ClockRedis}
	if r.engine == edge.EngineGo {
		o.Batch = cfg.Batch
	}
	if err := o.Validate(); err != nil {
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- edge.Serve(sctx, o, s.reach, s.addr) }()
	stop := func() error {
		cancel()
		return <-done
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return addr, stop, nil
		}
		select {
		case err := <-done:
			cancel()
			return "", nil, fmt.Errorf("the %s gateway ended before it listened: %v", r.engine, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", nil, errors.Join(fmt.Errorf("the %s gateway does not listen on %s after 15 s", r.engine, addr), stop())
		}
	}
}

// httpLoad sends the gateway at addr cfg's load for d with bench's HTTP
// engine, and returns every request it sent.
func httpLoad(ctx context.Context, cfg Config, addr string, d time.Duration) ([]bench.Response, error) {
	res, err := bench.RunHTTP(ctx, bench.HTTPConfig{Target: "http://" + addr + "/", Method: http.MethodGet,
		Rate: cfg.rate(), Connections: min(max(int(cfg.rate()/20), 8), 256), Duration: d,
		Consumers: cfg.Consumers, ConsumerHeader: consumerHeader, Timeout: 5 * time.Second, KeepResponses: true})
	return res.Responses(), err
}

// runOne runs r: the servers, the gateways (or rate limit services), the
// load and the fault; and judges what came back.
func runOne(ctx context.Context, cfg Config, r run) (Row, string, error) {
	s, err := setUp(ctx, cfg, r.fault)
	if err != nil {
		return Row{}, "", err
	}
	defer s.stop()
	version := s.primary.Version
	var addrs []string
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			_ = stop()
		}
	}()
	serve, load := gateway, httpLoad
	if r.engine == EngineRLS {
		serve, load = rlsService, rlsLoad
	}
	for range cfg.Nodes {
		addr, stop, err := serve(ctx, cfg, r, s)
		if err != nil {
			return Row{}, version, err
		}
		addrs, stops = append(addrs, addr), append(stops, stop)
	}
	total := cfg.Steady + cfg.FaultDuration + cfg.After
	var mu sync.Mutex
	var responses []bench.Response
	var w window
	g, gctx := errgroup.WithContext(ctx)
	began := time.Now()
	for _, addr := range addrs {
		g.Go(func() error {
			rs, err := load(gctx, cfg, addr, total)
			mu.Lock()
			responses = append(responses, rs...)
			mu.Unlock()
			return err
		})
	}
	g.Go(func() error {
		var err error
		w, err = inject(gctx, cfg, r, s, began)
		return err
	})
	if err := g.Wait(); err != nil {
		return Row{}, version, err
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			return Row{}, version, fmt.Errorf("gateway: %w", err)
		}
	}
	stops = nil
	row := judge(cfg, responses, w)
	row.Fault, row.Engine, row.OnRedisError, row.LatencyMillis = r.fault, r.engine, r.mode, r.latency.Milliseconds()
	return row, version, nil
}
