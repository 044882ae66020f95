// Package skew measures what clock skew between edge nodes costs each
// rate-limiting algorithm. Simulated edge nodes, each with its own clock
// offset, share one real Redis and decide a seeded Poisson stream of many
// clients near their limit, once with every node passing its own clock to
// the script and once with the script reading Redis's TIME. Every decision
// is judged on the true time (this process's clock) by the algorithm's own
// guarantee and by an exact sliding window. The offsets live only inside the
// process: no host clock is touched. It returns plain results and never
// prints.
package skew

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// Config is one skew run. Run gives zero fields the defaults below.
type Config struct {
	// Redis says how to reach the server.
	Redis *redis.UniversalOptions
	// Algorithms are registry names of production algorithms; all five by default.
	Algorithms []string
	// Clocks are the clocks each algorithm is run with; the caller's and Redis's by default.
	Clocks []algorithms.Clock
	// Skews holds one clock offset per simulated node, whole milliseconds
	// each, at most MaxSkew either way; DefaultSkews by default.
	Skews []time.Duration
	// Policy is what every client is limited to; 5 per 2s by default.
	Policy algorithms.Policy
	// Clients is the number of clients per algorithm, clock and skew level; 40 by default.
	Clients int
	// Duration is how long the stream runs; 10s by default.
	Duration time.Duration
	// Load is each client's mean rate as a multiple of its limit (each
	// client draws its own from 0.8 to 1.2 times it); 1.2 by default.
	Load float64
	// Seed makes the stream (arrivals and the node each request goes
	// through) repeatable; 1 by default.
	Seed uint64
	// Connections is the number of requests in flight at most; 64 by default.
	Connections int
	// Timeout bounds one decision; 1s by default.
	Timeout time.Duration
	// Consumer prefixes the consumer part of every key; a random "skew-…" by default.
	Consumer string
	// Progress, when set, is called about every 100 ms with the decisions
	// made and the decisions in the stream.
	Progress func(done, total int)
}

// Bounds on a run, so that every run is bounded.
const (
	// MaxNodes bounds the number of simulated nodes (offsets in Skews).
	MaxNodes = 64
	// MaxSkew bounds each node's offset, either way.
	MaxSkew = time.Hour
	// MaxRequests bounds the stream's expected number of decisions.
	MaxRequests = 2_000_000
)

// DefaultSkews are the nodes' clock offsets when none are given: four nodes.
func DefaultSkews() []time.Duration {
	return []time.Duration{0, 50 * time.Millisecond, -200 * time.Millisecond, time.Second}
}

// withDefaults fills the zero fields.
func (cfg Config) withDefaults() Config {
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = algorithms.Algorithms()
	}
	if len(cfg.Clocks) == 0 {
		cfg.Clocks = []algorithms.Clock{algorithms.ClockCaller, algorithms.ClockRedis}
	}
	if len(cfg.Skews) == 0 {
		cfg.Skews = DefaultSkews()
	}
	if cfg.Policy == (algorithms.Policy{}) {
		cfg.Policy = algorithms.Policy{Limit: 5, Window: 2 * time.Second}
	}
	if cfg.Clients == 0 {
		cfg.Clients = 40
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Load == 0 {
		cfg.Load = 1.2
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Connections == 0 {
		cfg.Connections = 64
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	return cfg
}

// Validate checks cfg before anything is sent; Run fills zero fields with
// the defaults first, Validate does not. Errors are *field.Error, naming the
// fields of Config (Limit and Window for the policy's).
func (cfg Config) Validate() error {
	if len(cfg.Algorithms) == 0 {
		return field.Errorf("Algorithms", "names no algorithm")
	}
	if len(cfg.Clocks) == 0 {
		return field.Errorf("Clocks", "names no clock")
	}
	if len(cfg.Skews) == 0 {
		return field.Errorf("Skews", "names no node")
	}
	for _, name := range cfg.Algorithms {
		info, ok := algorithms.Lookup(name)
		if !ok || !info.Algorithm {
			return field.Errorf("Algorithms", ": %q is not one of %s", name, strings.Join(algorithms.Algorithms(), ", "))
		}
	}
	for _, c := range cfg.Clocks {
		if c != algorithms.ClockCaller && c != algorithms.ClockRedis {
			return field.Errorf("Clocks", ": unknown clock %d", c)
		}
	}
	if len(cfg.Skews) > MaxNodes {
		return field.Errorf("Skews", "must name at most %d nodes (got %d)", MaxNodes, len(cfg.Skews))
	}
	for _, s := range cfg.Skews {
		if s%time.Millisecond != 0 || s.Abs() > MaxSkew {
			return field.Errorf("Skews", ": each offset must be a whole number of milliseconds within ±%s (got %s)", MaxSkew, s)
		}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case cfg.Clients < 1:
		return field.Errorf("Clients", "must be at least 1 (got %d)", cfg.Clients)
	case cfg.Duration < time.Millisecond || cfg.Duration > 10*time.Minute:
		return field.Errorf("Duration", "must be between 1ms and 10m (got %s)", cfg.Duration)
	case !(cfg.Load > 0 && cfg.Load <= 100):
		return field.Errorf("Load", "must be above 0 and at most 100 (got %g)", cfg.Load)
	case cfg.Connections < 1 || cfg.Connections > 10_000:
		return field.Errorf("Connections", "must be between 1 and 10000 (got %d)", cfg.Connections)
	case cfg.Timeout < time.Millisecond || cfg.Timeout > time.Minute:
		return field.Errorf("Timeout", "must be between 1ms and 1m (got %s)", cfg.Timeout)
	}
	if n := cfg.expectedRequests(); n > MaxRequests {
		return field.Errorf("Clients", ": the stream would make about %.0f decisions, more than %d: lower {Clients}, {Duration} or {Load}", n, MaxRequests)
	}
	return nil
}

// expectedRequests is the stream's expected size.
func (cfg Config) expectedRequests() float64 {
	cells := float64(len(cfg.Algorithms) * len(cfg.Clocks) * len(levels(cfg.Skews)))
	perClient := cfg.Load * float64(cfg.Policy.Limit) * cfg.Duration.Seconds() / cfg.Policy.Window.Seconds()
	return cells * float64(cfg.Clients) * perClient
}

// Settings is the configuration as reports show it; see Config for each
// field. Durations are in ms, the skews one per node.
type Settings struct {
	Algorithms    []string `json:"algorithms"`
	Clocks        []string `json:"clocks"`
	SkewsMillis   []int64  `json:"skews_ms"`
	Limit         int64    `json:"limit"`
	WindowMillis  int64    `json:"window_ms"`
	Clients       int      `json:"clients"`
	DurationMilli int64    `json:"duration_ms"`
	Load          float64  `json:"load"`
	Seed          uint64   `json:"seed"`
	Connections   int      `json:"connections"`
	TimeoutMillis int64    `json:"timeout_ms"`
}

// Offset is how far Redis's clock is ahead of this process's, as measured
// with TIME: somewhere between Lo and Hi, in µs.
type Offset struct {
	Lo int64 `json:"lo"`
	Hi int64 `json:"hi"`
}

// Report is a whole run.
type Report struct {
	// Command is "skew".
	Command string `json:"command"`
	// Redis is the server the run was measured on.
	Redis redisrun.Info `json:"redis"`
	// Config is what was run.
	Config Settings `json:"config"`
	// RedisClockOffsetMicros is Redis's clock against this process's.
	RedisClockOffsetMicros Offset `json:"redis_clock_offset_us"`
	// SendLagMicros is how late the stream's requests left after they were
	// due, in µs; its count is the requests of the whole stream.
	SendLagMicros hdr.Percentiles `json:"send_lag_us"`
	// Rows has one row per algorithm, clock and skew level.
	Rows []Row `json:"rows"`
	// ElapsedMillis is the run's wall time.
	ElapsedMillis int64 `json:"elapsed_ms"`
}

// Row is one algorithm on one clock at one skew level: the nodes' offsets
// are Config.Skews scaled by one of Fractions.
type Row struct {
	// Algorithm is the registry name.
	Algorithm string `json:"algorithm"`
	// Clock is "caller" (each node passes its own clock) or "redis" (TIME).
	Clock string `json:"clock"`
	// MaxSkewMillis is the largest gap between two nodes' clocks, in ms.
	MaxSkewMillis int64 `json:"max_skew_ms"`
	// Decisions counts the decisions made, failed ones included.
	Decisions int64 `json:"decisions"`
	// OverAdmitted counts admissions beyond the algorithm's guarantee on
	// the true time: an admission is counted when, with the client's earlier
	// admissions that were not, some span holding their whole flights (send
	// to reply) holds more than the guarantee allows. A correct limiter on
	// one clock is never counted, whatever the latency.
	OverAdmitted int64 `json:"over_admitted"`
	// FalseDenied counts denials that an exact sliding window on the true
	// time would have admitted for certain: fewer than the limit of the
	// client's admissions (and failed decisions) could lie in the window
	// before any moment of the denial's flight.
	FalseDenied int64 `json:"false_denied"`
	// Admitted counts the admissions.
	Admitted int64 `json:"admitted"`
	// Errors counts decisions that failed; they are never counted as over
	// the guarantee, and count as possible admissions for FalseDenied.
	Errors int64 `json:"errors"`
	// OffsetsMillis are the nodes' clock offsets, in ms.
	OffsetsMillis []int64 `json:"offsets_ms"`
	// Guarantee is the rule the algorithm was judged by, in words.
	Guarantee string `json:"guarantee"`
	// WorstClient is the client with the most over-admitted (then the most
	// falsely denied), and WorstClientOverAdmitted and
	// WorstClientFalseDenied its counts; empty when none had either.
	WorstClient             string `json:"worst_client"`
	WorstClientOverAdmitted int64  `json:"worst_client_over_admitted"`
	WorstClientFalseDenied  int64  `json:"worst_client_false_denied"`
}

// Fractions are the skew levels run: every node's offset scaled by each,
// from all clocks true to the offsets given.
func Fractions() []float64 { return []float64{0, 0.25, 0.5, 1} }

// levels are the offset vectors run: the offsets scaled by each of
// Fractions, rounded to whole milliseconds, skipping repeats.
func levels(skews []time.Duration) [][]time.Duration {
	var out [][]time.Duration
	for _, f := range Fractions() {
		v := make([]time.Duration, len(skews))
		for i, s := range skews {
			v[i] = (time.Duration(float64(s)*f) + time.Millisecond/2).Truncate(time.Millisecond)
			if s < 0 {
				v[i] = -(time.Duration(float64(-s)*f) + time.Millisecond/2).Truncate(time.Millisecond)
			}
		}
		if len(out) == 0 || !slices.Equal(out[len(out)-1], v) {
			out = append(out, v)
		}
	}
	return out
}

// spread is the largest gap between two offsets.
func spread(offsets []time.Duration) time.Duration {
	if len(offsets) == 0 {
		return 0
	}
	return slices.Max(offsets) - slices.Min(offsets)
}

// cell is one algorithm on one clock at one skew level.
type cell struct {
	algorithm string
	info      algorithms.Info
	clock     algorithms.Clock
	offsets   []time.Duration
	phase     time.Duration // when its stream starts, after the run's start
	nodes     []algorithms.Limiter
	keys      []string // one per client
}

// request is one decision of the stream, and what came of it.
type request struct {
	due    time.Duration // after the run's start
	cell   int32
	client int32
	node   int32

	send, reply time.Time
	allowed     bool
	failed      bool
}

// Run runs the stream and judges it.
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.Redis == nil {
		return Report{}, errors.New("skew: no Redis options")
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "skew-" + randid.Hex(4)
	}
	rep := Report{Command: "skew", Config: settings(cfg)}
	client, err := open(ctx, cfg.Redis, cfg.Connections)
	if err != nil {
		return rep, err
	}
	defer client.Close()
	offset, err := redisOffset(ctx, client)
	if err != nil {
		return rep, err
	}
	rep.RedisClockOffsetMicros = offset

	cells, err := buildCells(ctx, client, cfg)
	if err != nil {
		return rep, err
	}
	defer cleanup(client, cells)
	reqs := schedule(cfg, cells)
	lag, err := drive(ctx, cfg, cells, reqs)
	if err != nil {
		return rep, err
	}
	rep.SendLagMicros = lag
	for i, c := range cells {
		rep.Rows = append(rep.Rows, judge(cfg, c, i, reqs, offset))
	}
	rep.ElapsedMillis = time.Since(start).Milliseconds()
	return rep, nil
}

func settings(cfg Config) Settings {
	s := Settings{
		Algorithms: slices.Clone(cfg.Algorithms), Limit: cfg.Policy.Limit, WindowMillis: cfg.Policy.Window.Milliseconds(),
		Clients: cfg.Clients, DurationMilli: cfg.Duration.Milliseconds(), Load: cfg.Load, Seed: cfg.Seed,
		Connections: cfg.Connections, TimeoutMillis: cfg.Timeout.Milliseconds(),
	}
	for _, c := range cfg.Clocks {
		s.Clocks = append(s.Clocks, c.String())
	}
	for _, o := range cfg.Skews {
		s.SkewsMillis = append(s.SkewsMillis, o.Milliseconds())
	}
	return s
}

// open checks on one connection that the server answers, so that an
// unreachable address fails once, quickly, before the pool dials it; then it
// connects a pool of n connections, opened before the stream starts, with no
// retries (a retried decision could count twice).
func open(ctx context.Context, base *redis.UniversalOptions, n int) (redis.UniversalClient, error) {
	if _, err := redisrun.Ping(ctx, base); err != nil {
		return nil, fmt.Errorf("skew: %w", err)
	}
	opts := *base
	opts.PoolSize = n + 4
	opts.MinIdleConns = n
	opts.MaxRetries = -1
	return redis.NewUniversalClient(&opts), nil
}

// redisOffset measures Redis's clock against this process's with TIME: of
// five calls (on every master of a Cluster), the offset lies between the
// server's time less the reply's arrival and less the request's sending.
func redisOffset(ctx context.Context, client redis.UniversalClient) (Offset, error) {
	var mu sync.Mutex
	off := Offset{Lo: 1 << 62, Hi: -1 << 62}
	measure := func(ctx context.Context, c redis.Cmdable) error {
		var best Offset
		for i := range 5 {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			sent := time.Now()
			t, err := c.Time(ctx).Result()
			got := time.Now()
			cancel()
			if err != nil {
				return fmt.Errorf("skew: time: %w", err)
			}
			if o := (Offset{Lo: t.Sub(got).Microseconds() - 1, Hi: t.Sub(sent).Microseconds() + 1}); i == 0 || o.Hi-o.Lo < best.Hi-best.Lo {
				best = o
			}
		}
		mu.Lock()
		defer mu.Unlock()
		off.Lo, off.Hi = min(off.Lo, best.Lo), max(off.Hi, best.Hi)
		return nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return measure(ctx, n) })
		return off, err
	}
	return off, measure(ctx, client)
}

// buildCells makes every algorithm, clock and skew level, a limiter per
// node, and loads the scripts.
func buildCells(ctx context.Context, client redis.UniversalClient, cfg Config) ([]*cell, error) {
	var cells []*cell
	lv := levels(cfg.Skews)
	for _, name := range cfg.Algorithms {
		info, _ := algorithms.Lookup(name)
		for _, clock := range cfg.Clocks {
			for li, offsets := range lv {
				c := &cell{algorithm: name, info: info, clock: clock, offsets: offsets}
				for _, off := range offsets {
					now := func() time.Time { return time.Now().Add(off) }
					lim, err := algorithms.New(name, client, cfg.Policy, algorithms.WithClock(clock), algorithms.WithNow(now))
					if err != nil {
						return nil, fmt.Errorf("skew: %s: %w", name, err)
					}
					c.nodes = append(c.nodes, lim)
				}
				for k := range cfg.Clients {
					c.keys = append(c.keys, algorithms.Key(fmt.Sprintf("%s-%s-%s-%d-c%d", cfg.Consumer, name, clock, li, k), name))
				}
				cells = append(cells, c)
			}
		}
		if l, ok := cells[len(cells)-1].nodes[0].(algorithms.Loader); ok {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := l.Load(lctx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("skew: %w", err)
			}
		}
	}
	// Stagger the cells' streams over one window, so that they do not all
	// send at the same instants.
	for i, c := range cells {
		c.phase = cfg.Policy.Window * time.Duration(i) / time.Duration(len(cells))
	}
	return cells, nil
}

// schedule draws the stream: every client of every cell has the same
// seeded Poisson arrivals and nodes (client k's are the same in every cell,
// shifted by the cell's phase), so that rows differ only by what they vary.
func schedule(cfg Config, cells []*cell) []request {
	type arrival struct {
		at   time.Duration
		node int32
	}
	streams := make([][]arrival, cfg.Clients)
	for k := range streams {
		rng := mrand.New(mrand.NewPCG(cfg.Seed, uint64(k)))
		mean := float64(cfg.Policy.Window) / (cfg.Load * (0.8 + 0.4*rng.Float64()) * float64(cfg.Policy.Limit)) // ns between requests
		for t := time.Duration(rng.ExpFloat64() * mean); t < cfg.Duration; t += time.Duration(rng.ExpFloat64() * mean) {
			streams[k] = append(streams[k], arrival{t, int32(rng.IntN(len(cfg.Skews)))})
		}
	}
	var reqs []request
	for ci, c := range cells {
		for k, s := range streams {
			for _, a := range s {
				reqs = append(reqs, request{due: c.phase + a.at, cell: int32(ci), client: int32(k), node: a.node})
			}
		}
	}
	slices.SortStableFunc(reqs, func(a, b request) int { return int(a.due - b.due) })
	return reqs
}

// drive sends the stream at its due times from a pool of workers and
// records every decision's flight; it returns how late requests left.
func drive(ctx context.Context, cfg Config, cells []*cell, reqs []request) (hdr.Percentiles, error) {
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan int, cfg.Connections)
	var done atomic.Int64
	begin := time.Now().Add(50 * time.Millisecond)
	lags := make([]*hdrhistogram.Histogram, cfg.Connections)
	for w := range cfg.Connections {
		lags[w] = hdr.New()
		g.Go(func() error {
			for i := range jobs {
				r := &reqs[i]
				c := cells[r.cell]
				dctx, cancel := context.WithTimeout(gctx, cfg.Timeout)
				r.send = time.Now()
				d, err := c.nodes[r.node].Allow(dctx, c.keys[r.client])
				r.reply = time.Now()
				cancel()
				hdr.Record(lags[w], r.send.Sub(begin.Add(r.due)).Microseconds())
				switch {
				case gctx.Err() != nil:
					return gctx.Err()
				case err != nil:
					r.failed = true
				default:
					r.allowed = d.Allowed
				}
				done.Add(1)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(jobs)
		tick := time.Now()
		for i := range reqs {
			if wait := time.Until(begin.Add(reqs[i].due)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			select {
			case jobs <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
			if cfg.Progress != nil && time.Since(tick) >= 100*time.Millisecond {
				tick = time.Now()
				cfg.Progress(int(done.Load()), len(reqs))
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return hdr.Percentiles{}, err
	}
	all := hdr.New()
	for _, h := range lags {
		all.Merge(h)
	}
	return hdr.PercentilesOf(all), nil
}

// cleanup deletes every client's keys, one UNLINK per key so that a Cluster
// routes each to its slot.
func cleanup(client redis.UniversalClient, cells []*cell) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pipe := client.Pipeline()
	for _, c := range cells {
		for _, key := range c.keys {
			for _, k := range algorithms.KeysOf(c.nodes[0], key) {
				pipe.Unlink(ctx, k)
			}
		}
	}
	_, _ = pipe.Exec(ctx)
}

// clientName is how rows name client k.
func clientName(k int) string { return "client-" + strconv.Itoa(k) }
