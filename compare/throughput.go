package compare

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/roundtrip"
)

// MaxBatch bounds Config.Batch.
const MaxBatch = 1024

// throughput runs Connections goroutines of back-to-back decisions over Keys
// clients for Duration, on the real clock; with Batch over 1, once more
// with the decisions sent through a batch.Batcher.
func throughput(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	var before map[string]int64
	var statsErr error
	err := measure(ctx, client, cfg, e, "-tp-", func() { before, statsErr = commandStats(ctx, client) },
		func(decide func(context.Context, int) error) error {
			tctx, counter := roundtrip.With(ctx)
			ops, hist, err := drive(tctx, cfg, cfg.Duration, decide)
			if err != nil {
				return err
			}
			after, statsErr2 := commandStats(ctx, client)
			decisions := float64(hist.TotalCount())
			rt := float64(counter.Trips()) / decisions
			lat := hdr.PercentilesOf(hist)
			res.OpsPerSec, res.RoundTrips, res.LatencyMicros = &ops, &rt, &lat
			if statsErr == nil && statsErr2 == nil {
				res.RedisCommands = commandsPer(before, after, decisions)
			}
			return nil
		})
	if err != nil || cfg.Batch <= 1 {
		return err
	}
	return batched(ctx, client, cfg, e, res)
}

// commandsPer is the commands Redis ran per decision between two readings
// of INFO commandstats: the scripts' own calls, not the script commands
// themselves nor INFO, PING, SCRIPT, HELLO and CLIENT SETINFO.
func commandsPer(before, after map[string]int64, decisions float64) *float64 {
	var n int64
	for cmd, calls := range after {
		switch cmd {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "info", "ping", "script", "script|load", "client|setinfo", "hello":
			continue
		}
		n += calls - before[cmd]
	}
	per := float64(n) / decisions
	return &per
}

// Pipelines is how many pipelines the batched throughput workload may have
// in flight at once, each on its own connection: enough for every one of
// connections goroutines' decisions to be in one, batch to a pipeline.
func Pipelines(connections, batch int) int {
	return max(1, (connections+batch-1)/max(batch, 1))
}

// batched measures the throughput workload with the decisions of the
// Connections goroutines sent through a batch.Batcher: those waiting at one
// moment go out as one pipeline of at most Batch EVALSHAs, on up to
// Pipelines connections at once. Round trips are the pipelines sent per
// decision.
func batched(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, res *Result) error {
	var pipelines atomic.Int64
	b := batch.New(client, batch.Options{Max: cfg.Batch, Flushers: Pipelines(cfg.Connections, cfg.Batch),
		OnBatch: func(int, bool) { pipelines.Add(1) }})
	defer b.Close()
	var from int64
	return measure(ctx, b.Wrap(client), cfg, e, "-tpb-", func() { from = pipelines.Load() },
		func(decide func(context.Context, int) error) error {
			ops, hist, err := drive(ctx, cfg, cfg.Duration, decide)
			if err != nil {
				return err
			}
			// Every pipeline of the run was counted before its replies came
			// back, and so before drive returned.
			rt := float64(pipelines.Load()-from) / float64(hist.TotalCount())
			lat := hdr.PercentilesOf(hist)
			res.BatchedOpsPerSec, res.BatchedRoundTrips, res.BatchedLatencyMicros = &ops, &rt, &lat
			return nil
		})
}

// measure builds e's limiter on client over Keys fresh clients (their
// names marked with tag), warms it up with a short unmeasured run, calls
// ready, then run with the decision to drive; the clients' keys are deleted
// after run.
func measure(ctx context.Context, client redis.UniversalClient, cfg Config, e entrant, tag string,
	ready func(), run func(decide func(context.Context, int) error) error) error {
	lim, err := e.new(client, cfg.Policy)
	if err != nil {
		return err
	}
	if l, ok := lim.(algorithms.Loader); ok {
		if err := l.Load(ctx); err != nil {
			return err
		}
	}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = algorithms.Key(cfg.Consumer+tag+strconv.Itoa(i), e.info.Name)
	}
	defer cleanup(client, lim, keys...)
	decide := func(ctx context.Context, i int) error {
		_, err := lim.Allow(ctx, keys[i%len(keys)])
		return err
	}
	// A short unmeasured run first, so that no algorithm pays for warming up.
	if _, _, err := drive(ctx, cfg, cfg.Duration/10, decide); err != nil {
		return err
	}
	ready()
	return run(decide)
}

// drive runs cfg.Connections goroutines calling op back to back for d and
// returns operations per second and the merged latencies.
func drive(ctx context.Context, cfg Config, d time.Duration, op func(ctx context.Context, i int) error) (float64, *hdrhistogram.Histogram, error) {
	hists := make([]*hdrhistogram.Histogram, cfg.Connections)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	deadline := start.Add(d)
	for w := range hists {
		hists[w] = hdr.New()
		g.Go(func() error {
			rng := mrand.New(mrand.NewPCG(uint64(w), cfg.Seed))
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return nil
				}
				if err := op(gctx, rng.IntN(math.MaxInt32)); err != nil {
					return err
				}
				hdr.Record(hists[w], time.Since(t0).Microseconds())
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, err
	}
	elapsed := time.Since(start)
	total := hdr.New()
	for _, h := range hists {
		total.Merge(h)
	}
	return float64(total.TotalCount()) / elapsed.Seconds(), total, nil
}

// pingCeiling is the server's own ceiling on the same connections: PINGs per second.
func pingCeiling(ctx context.Context, client redis.UniversalClient, cfg Config) (float64, hdr.Percentiles, error) {
	ping := func(ctx context.Context, _ int) error { return client.Ping(ctx).Err() }
	if _, _, err := drive(ctx, cfg, cfg.Duration/10, ping); err != nil {
		return 0, hdr.Percentiles{}, err
	}
	ops, hist, err := drive(ctx, cfg, cfg.Duration, ping)
	if err != nil {
		return 0, hdr.Percentiles{}, err
	}
	return ops, hdr.PercentilesOf(hist), nil
}

// commandStats reads calls per command from INFO commandstats, summed over
// a Cluster's masters.
func commandStats(ctx context.Context, client redis.UniversalClient) (map[string]int64, error) {
	out := map[string]int64{}
	var mu sync.Mutex
	read := func(ctx context.Context, c redis.UniversalClient) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err == nil {
				out[strings.TrimPrefix(name, "cmdstat_")] += n
			}
		}
		return nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return read(ctx, c) })
		return out, err
	}
	return out, read(ctx, client)
}
