package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// The in-flight drill kills a gateway while it holds slots and restarts
// it: what the dead gateway held is never released. A lease comes back
// when it runs out; a counter semaphore (INCR, then DECR when the request
// ends) keeps the dead gateway's slots until someone deletes its key.
//
// A kill is the gateway's Redis connections cut at once (an in-process
// toxiproxy between it and Redis is stopped), then the gateway stopped: no
// release it sends after the cut reaches Redis, as none of a killed
// process's would. The restarted gateway reaches Redis directly.

// Semaphore kinds of the in-flight drill's rows.
const (
	// KindLease is the gateway's own in-flight limit (edge's --in-flight):
	// a sorted set of leases, each ending after the lease.
	KindLease = "lease"
	// KindCounter is a counter semaphore (algorithms' semaphore-incr)
	// served by a gateway the drill runs in process, the go engine's way.
	KindCounter = "counter"
)

// InFlightConfig is an in-flight drill. RunInFlight gives zero fields the
// defaults below.
type InFlightConfig struct {
	// Engines are edge.EngineGo and edge.EngineOpenResty; by default both,
	// the second only when nginx with the Lua module is found. The counter
	// semaphore is run once, by the go engine's row.
	Engines []string
	// InFlight is each consumer's most requests in flight at once; 5 by
	// default.
	InFlight int64
	// Lease is how long a lease lives when it is never released; 2s by
	// default.
	Lease time.Duration
	// Hold is how long the upstream holds each request it serves; 300ms
	// by default. It must be shorter than the lease.
	Hold time.Duration
	// Consumers is the number of consumers, each keeping InFlight requests
	// outstanding; 4 by default.
	Consumers int
	// Steady is the load before the kill; 1s by default.
	Steady time.Duration
	// Watch is how long the drill watches after the restart, polling
	// Redis every 50ms; the lease and 2s by default.
	Watch time.Duration
	// Progress, when set, is called before each run with its number, the
	// number of runs and its name.
	Progress func(run, runs int, name string)
}

// Bounds of an in-flight drill.
const (
	MaxInFlight      = 1000
	MaxInFlightTotal = 2000 // Consumers × InFlight: requests outstanding
	MaxLease         = 10 * time.Minute
)

func (c InFlightConfig) withDefaults() InFlightConfig {
	if c.InFlight == 0 {
		c.InFlight = 5
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Hold == 0 {
		c.Hold = 300 * time.Millisecond
	}
	if c.Consumers == 0 {
		c.Consumers = 4
	}
	if c.Steady == 0 {
		c.Steady = time.Second
	}
	if c.Watch == 0 {
		c.Watch = c.Lease + 2*time.Second
	}
	return c
}

// Validate checks c before anything starts; RunInFlight fills zero fields
// with the defaults first, Validate does not. Errors are *field.Error
// naming the fields of InFlightConfig.
func (c InFlightConfig) Validate() error {
	for _, e := range c.Engines {
		if e != edge.EngineGo && e != edge.EngineOpenResty {
			return field.Errorf("Engines", ": %q: want go or openresty (the rls service has no in-flight limit)", e)
		}
	}
	switch {
	case c.InFlight < 1 || c.InFlight > MaxInFlight:
		return field.Errorf("InFlight", "must be between 1 and %d (got %d)", MaxInFlight, c.InFlight)
	case c.Lease < 100*time.Millisecond || c.Lease > MaxLease || c.Lease%time.Millisecond != 0:
		return field.Errorf("Lease", "must be a whole number of milliseconds between 100ms and %s (got %s)", MaxLease, c.Lease)
	case c.Hold < time.Millisecond || c.Hold >= c.Lease:
		return field.Errorf("Hold", "must be at least 1ms and shorter than {Lease} (got %s)", c.Hold)
	case c.Consumers < 1 || int64(c.Consumers)*c.InFlight > MaxInFlightTotal:
		return field.Errorf("Consumers", "× {InFlight} must be between 1 and %d requests outstanding (got %d consumers)", MaxInFlightTotal, c.Consumers)
	case c.Steady < 100*time.Millisecond || c.Steady > MaxPhase:
		return field.Errorf("Steady", "must be between 100ms and %s (got %s)", MaxPhase, c.Steady)
	case c.Watch < 100*time.Millisecond || c.Watch > MaxPhase:
		return field.Errorf("Watch", "must be between 100ms and %s (got %s)", MaxPhase, c.Watch)
	}
	return nil
}

// InFlightSettings is the configuration as reports show it; durations in ms.
type InFlightSettings struct {
	Engines      []string `json:"engines"`
	InFlight     int64    `json:"in_flight"`
	LeaseMillis  int64    `json:"lease_ms"`
	HoldMillis   int64    `json:"hold_ms"`
	Consumers    int      `json:"consumers"`
	SteadyMillis int64    `json:"steady_ms"`
	WatchMillis  int64    `json:"watch_ms"`
}

// InFlightReport is a whole in-flight drill.
type InFlightReport struct {
	// Command is "drill".
	Command      string           `json:"command"`
	RedisVersion string           `json:"redis_version"`
	Config       InFlightSettings `json:"config"`
	// Results has one row per engine and semaphore kind.
	Results []InFlightRow `json:"results"`
	// Skipped lists what could not run here, and why.
	Skipped       []Skip `json:"skipped"`
	ElapsedMillis int64  `json:"elapsed_ms"`
}

// InFlightRow is one gateway killed while it held slots, and restarted.
type InFlightRow struct {
	Engine string `json:"engine"`
	// Kind is KindLease or KindCounter.
	Kind string `json:"kind"`
	// HeldAtKill counts the slots Redis counted, over every consumer, once
	// the killed gateway had stopped: all held by no one.
	HeldAtKill int64 `json:"held_at_kill"`
	// LeakedAtEnd counts the slots Redis still counted once the watch had
	// ended, the load had stopped and every request had ended: held by no
	// one.
	LeakedAtEnd int64 `json:"leaked_at_end"`
	// RecoverMillis is from the kill to the first poll at which Redis
	// counted none of the dead gateway's slots; null when it still did
	// when the watch ended.
	RecoverMillis *int64 `json:"recover_ms"`
	// WatchMillis is how long the drill watched after the kill.
	WatchMillis int64 `json:"watch_ms"`
	// Admitted and Refused count the answers (2xx and 429) of the
	// restarted gateway.
	Admitted int64 `json:"admitted"`
	Refused  int64 `json:"refused"`
}

// Name names the row: "go, lease".
func (r InFlightRow) Name() string { return r.Engine + ", " + r.Kind }

// Leaked lists the rows that still counted a dead gateway's slots at the
// end.
func (r InFlightReport) Leaked() []string {
	var names []string
	for _, row := range r.Results {
		if row.LeakedAtEnd > 0 {
			names = append(names, fmt.Sprintf("%s: %d slots leaked", row.Name(), row.LeakedAtEnd))
		}
	}
	return names
}

// inflightRun is one row to run.
type inflightRun struct{ engine, kind string }

// RunInFlight runs the in-flight drill: on each engine, a gateway whose
// in-flight limit is a lease is killed mid-load and restarted; on the go
// engine, a counter semaphore's gateway too.
func RunInFlight(ctx context.Context, cfg InFlightConfig) (InFlightReport, error) {
	began := time.Now()
	explicit := len(cfg.Engines) > 0
	cfg = cfg.withDefaults()
	if !explicit {
		cfg.Engines = []string{edge.EngineGo, edge.EngineOpenResty}
	}
	if err := cfg.Validate(); err != nil {
		return InFlightReport{}, err
	}
	_, _, nginx := edge.FindNginx()
	if nginx != nil && explicit && slices.Contains(cfg.Engines, edge.EngineOpenResty) {
		return InFlightReport{}, fmt.Errorf("drill: the openresty engine: %w", nginx)
	}
	rep := InFlightReport{Command: "drill", Results: []InFlightRow{}, Skipped: []Skip{},
		Config: InFlightSettings{Engines: slices.Clone(cfg.Engines), InFlight: cfg.InFlight, LeaseMillis: cfg.Lease.Milliseconds(),
			HoldMillis: cfg.Hold.Milliseconds(), Consumers: cfg.Consumers, SteadyMillis: cfg.Steady.Milliseconds(),
			WatchMillis: cfg.Watch.Milliseconds()}}
	var runs []inflightRun
	for _, e := range cfg.Engines {
		if e == edge.EngineOpenResty && nginx != nil {
			rep.Skipped = append(rep.Skipped, Skip{Engine: e, Fault: "gateway-kill", Reason: nginx.Error()})
			continue
		}
		runs = append(runs, inflightRun{engine: e, kind: KindLease})
		if e == edge.EngineGo {
			runs = append(runs, inflightRun{engine: e, kind: KindCounter})
		}
	}
	for i, r := range runs {
		name := InFlightRow{Engine: r.engine, Kind: r.kind}.Name()
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(runs), name)
		}
		row, version, err := runInFlight(ctx, cfg, r)
		if err != nil {
			return rep, fmt.Errorf("drill: %s: %w", name, err)
		}
		rep.RedisVersion = version
		rep.Results = append(rep.Results, row)
	}
	rep.ElapsedMillis = time.Since(began).Milliseconds()
	return rep, nil
}

// runInFlight runs one row: Redis, the gateway behind a proxy, the load,
// the kill, the restarted gateway, the watch.
func runInFlight(ctx context.Context, cfg InFlightConfig, r inflightRun) (InFlightRow, string, error) {
	row := InFlightRow{Engine: r.engine, Kind: r.kind}
	srv, err := redisrun.Start(ctx, redisrun.Options{})
	if err != nil {
		return row, "", err
	}
	defer srv.Kill()
	version := srv.Version
	c := admin(srv.Addr)
	defer c.Close()
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"redis", "127.0.0.1:0", srv.Addr)
	if err := proxy.Start(); err != nil {
		return row, version, fmt.Errorf("toxiproxy: %w", err)
	}
	defer proxy.Stop()

	// The first gateway, reached through the proxy.
	first, err := slotGateway(ctx, cfg, r, proxy.Listen)
	if err != nil {
		return row, version, err
	}
	defer first.stop()
	load := newHolders(cfg)
	load.target.Store(&first.addr)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var g errgroup.Group
	g.Go(func() error { return load.run(lctx) })

	// Wait for the steady period, and until the gateway holds slots.
	if !sleepUntil(ctx, time.Now().Add(cfg.Steady)) {
		return row, version, ctx.Err()
	}
	if err := load.waitAdmitted(ctx); err != nil {
		return row, version, err
	}
	if err := waitHeld(ctx, c, r.kind); err != nil {
		return row, version, err
	}

	// The kill: Redis unreachable to it, then the gateway gone.
	killed := time.Now()
	proxy.Stop()
	if err := first.stop(); err != nil {
		return row, version, fmt.Errorf("the killed gateway: %w", err)
	}
	dead, err := countedSlots(ctx, c, r.kind)
	if err != nil {
		return row, version, err
	}
	for _, n := range dead {
		row.HeldAtKill += n.count
	}

	// The restart, on Redis directly.
	second, err := slotGateway(ctx, cfg, r, srv.Addr)
	if err != nil {
		return row, version, err
	}
	defer second.stop()
	load.restarted(&second.addr)

	// The watch: the dead gateway's slots Redis still counts.
	end := killed.Add(cfg.Watch)
	for {
		left, err := deadLeft(ctx, c, r.kind, dead, second)
		if err != nil {
			return row, version, err
		}
		if left == 0 && row.RecoverMillis == nil {
			ms := time.Since(killed).Milliseconds()
			row.RecoverMillis = &ms
		}
		if !time.Now().Before(end) || !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			break
		}
	}
	row.WatchMillis = time.Since(killed).Milliseconds()
	stopLoad()
	if err := g.Wait(); err != nil {
		return row, version, err
	}
	if err := second.stop(); err != nil {
		return row, version, fmt.Errorf("the restarted gateway: %w", err)
	}
	row.Admitted, row.Refused = load.admitted.Load(), load.refused.Load()
	// Every request has ended and every release of the restarted gateway
	// is done: what Redis counts now is held by no one.
	after, err := countedSlots(ctx, c, r.kind)
	if err != nil {
		return row, version, err
	}
	for _, n := range after {
		row.LeakedAtEnd += n.count
	}
	if ctx.Err() != nil {
		return row, version, ctx.Err()
	}
	return row, version, nil
}

// waitHeld waits until Redis counts a slot held, for at most 15 seconds:
// the kill comes while the gateway holds some.
func waitHeld(ctx context.Context, c *redis.Client, kind string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		counted, err := countedSlots(ctx, c, kind)
		if err != nil {
			return err
		}
		for _, n := range counted {
			if n.count > 0 {
				return nil
			}
		}
		if !sleepUntil(ctx, time.Now().Add(5*time.Millisecond)) {
			return fmt.Errorf("no slot held in Redis: %w", ctx.Err())
		}
	}
}

// slots is what Redis counts at one key: the count, and for leases the
// members that count (their lease not run out).
type slots struct {
	count   int64
	members []string
}

// countedSlots reads the slots Redis counts at every key of the drill's
// own server: the live leases of each sorted set, or each counter.
func countedSlots(ctx context.Context, c *redis.Client, kind string) (map[string]slots, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now, err := c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("time: %w", err)
	}
	live := "(" + strconv.FormatInt(now.UnixMilli(), 10)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	out := map[string]slots{}
	want := "zset"
	if kind == KindCounter {
		want = "string"
	}
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			return nil, fmt.Errorf("type of %s: %w", k, err)
		}
		if typ != want {
			continue
		}
		switch kind {
		case KindLease:
			ms, err := c.ZRangeByScore(ctx, k, &redis.ZRangeBy{Min: live, Max: "+inf"}).Result()
			if err != nil {
				return nil, fmt.Errorf("leases at %s: %w", k, err)
			}
			out[k] = slots{count: int64(len(ms)), members: ms}
		default:
			n, err := c.Get(ctx, k).Int64()
			if err != nil {
				return nil, fmt.Errorf("counter at %s: %w", k, err)
			}
			out[k] = slots{count: n}
		}
	}
	return out, nil
}

// deadLeft is how many of the dead gateway's slots Redis still counts: its
// leases that have not run out, or what a counter counts beyond the
// restarted gateway's holders.
func deadLeft(ctx context.Context, c *redis.Client, kind string, dead map[string]slots, g *slotServer) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var left int64
	if kind == KindCounter {
		// The counter gateway holds its lock over each INCR and DECR and
		// the holders they change: read under it, the two agree.
		g.counter.mu.Lock()
		defer g.counter.mu.Unlock()
		var held int64
		for _, n := range g.counter.holders {
			held += n
		}
		for k := range dead {
			n, err := c.Get(ctx, k).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return 0, fmt.Errorf("counter at %s: %w", k, err)
			}
			left += n
		}
		return max(left-held, 0), nil
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("time: %w", err)
	}
	for k, s := range dead {
		for _, m := range s.members {
			score, err := c.ZScore(ctx, k, m).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("lease at %s: %w", k, err)
			}
			if int64(score) > now.UnixMilli() {
				left++
			}
		}
	}
	return left, nil
}
