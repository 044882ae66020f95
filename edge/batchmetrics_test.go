package edge_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/limiter"
)

// tripCounts are what the gateway's /metrics and Redis's INFO commandstats
// say about the round trips of decisions.
type tripCounts struct {
	roundTrips, batches, batched, allowed float64 // the gateway's
	evalsha                               int64   // Redis's calls of EVALSHA
}

func (a tripCounts) minus(b tripCounts) tripCounts {
	return tripCounts{a.roundTrips - b.roundTrips, a.batches - b.batches, a.batched - b.batched, a.allowed - b.allowed, a.evalsha - b.evalsha}
}

func readTrips(t *testing.T, adminAddr string, c *redis.Client) tripCounts {
	t.Helper()
	f := scrape(t, adminAddr)
	for _, name := range []string{"ratelab_edge_redis_round_trips_total", "ratelab_edge_redis_batch_decisions", "ratelab_edge_decisions_total"} {
		if f[name] == nil {
			t.Fatalf("/metrics has no %s", name)
		}
	}
	h := f["ratelab_edge_redis_batch_decisions"].GetMetric()[0].GetHistogram()
	return tripCounts{
		roundTrips: f["ratelab_edge_redis_round_trips_total"].GetMetric()[0].GetCounter().GetValue(),
		batches:    float64(h.GetSampleCount()),
		batched:    h.GetSampleSum(),
		allowed:    byLabel(t, f["ratelab_edge_decisions_total"], "outcome")[limiter.OutcomeAllowed],
		evalsha:    commandCalls(t, c, "evalsha"),
	}
}

// commandCalls is the calls of command in Redis's INFO commandstats; 0
// when it has none.
func commandCalls(t *testing.T, c *redis.Client, command string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		return n
	}
	return 0
}

// TestBatchMetrics: after concurrent decisions through a gateway served by
// edge.Serve on a redis-server of its own, the gateway's count of decisions
// sent in batches equals its count of admissions; every round trip that
// carried scripts was a batch, and Redis ran one EVALSHA a batch (the
// decisions of one shape go out joined in one call); with --redis-batch 1
// each decision is a round trip of its own, and with 16 no batch holds more
// than 16, so there are at least a sixteenth as many.
func TestBatchMetrics(t *testing.T) {
	t.Parallel()
	r, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, Protocol: 2, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { rc.Close() })
	for _, tc := range []struct {
		name   string
		batch  int
		limits []string
	}{
		{"one call per decision", 1, []string{"1000000/1h"}},
		{"batches of 16", 16, []string{"1000000/1h"}},
		{"batches of 16, two limits", 16, []string{"1000000/1h", "2000000/2h:gcra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen, admin := freeAddr(t), freeAddr(t)
			o := edge.Options{Engine: edge.EngineGo, Listen: listen, Admin: admin, Upstream: "builtin",
				Limits: tc.limits, Algorithm: "sliding-log", Clock: algorithms.ClockRedis, KeyBy: "header:X-Consumer-Id",
				OnError: "closed", Headers: "both", Nodes: 1, Timeout: 5 * time.Second, Pool: 64, Batch: tc.batch}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- edge.Serve(ctx, o, &redis.UniversalOptions{Addrs: []string{r.Addr}, Protocol: 2}, r.Addr)
			}()
			t.Cleanup(func() {
				httpClient.CloseIdleConnections()
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve: %v", err)
				}
			})
			url := "http://" + listen + "/"
			testwait.Eventually(t, 10*time.Second, func() (bool, string) {
				resp, _, err := fetch(url, map[string]string{"X-Consumer-Id": "ready"})
				if err != nil {
					return false, fmt.Sprintf("gateway not serving: %v", err)
				}
				return resp.StatusCode == http.StatusOK, fmt.Sprintf("gateway answered %d", resp.StatusCode)
			})
			before := readTrips(t, admin, rc)
			const requests, workers = 400, 50
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range requests / workers {
						resp, _, err := fetch(url, map[string]string{"X-Consumer-Id": "c" + strconv.Itoa((w*requests/workers+i)%100)})
						if err != nil {
							t.Error(err)
							return
						}
						if resp.StatusCode != http.StatusOK {
							t.Errorf("answered %d, want 200", resp.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			d := readTrips(t, admin, rc).minus(before)
			t.Logf("%d decisions: %v round trips, %v batches of %v decisions, %d evalsha calls in Redis", requests, d.roundTrips, d.batches, d.batched, d.evalsha)
			if d.allowed != requests || d.batched != requests {
				t.Errorf("admitted %v, sent %v decisions in batches: want %d each", d.allowed, d.batched, requests)
			}
			if float64(d.evalsha) != d.batches {
				t.Errorf("Redis ran %d EVALSHAs for %v batches: want one each", d.evalsha, d.batches)
			}
			if d.roundTrips != d.batches {
				t.Errorf("%v round trips carried scripts and %v batches: want as many", d.roundTrips, d.batches)
			}
			if low := float64((requests + tc.batch - 1) / tc.batch); d.batches < low || d.batches > requests {
				t.Errorf("%v batches, want between %v and %d", d.batches, low, requests)
			}
		})
	}
}

// TestBatchMetricsCluster: on a Redis Cluster of 3 masters a batch is
// split into one pipeline per node, and the metrics count each as a round
// trip: after concurrent decisions on consumers whose keys fall on every
// node, the decisions in batches equal the evalsha calls of the three
// nodes together, there is a batch per round trip, and at least one per
// node.
func TestBatchMetricsCluster(t *testing.T) {
	t.Parallel()
	cl, err := redisrun.StartCluster(context.Background(), 3, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	ctx := context.Background()
	client := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: cl.Addrs(), Protocol: 2}, 5*time.Second, 64))
	t.Cleanup(func() { client.Close() })
	m := limiter.NewMetrics()
	m.CountRedis(client)
	b := batch.New(client, batch.Options{Max: 64, Flushers: 2, Timeout: 5 * time.Second})
	t.Cleanup(func() { b.Close() })
	lim, err := algorithms.New("sliding-log", b.Wrap(client), algorithms.Policy{Limit: 1000, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.(algorithms.Loader).Load(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for i := range 30 {
		node, err := client.(*redis.ClusterClient).MasterForKey(ctx, algorithms.Key("c"+strconv.Itoa(i), "sliding-log"))
		if err != nil {
			t.Fatal(err)
		}
		nodes[node.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("the consumers' keys fall on %d nodes, want 3", len(nodes))
	}
	evalsha := func() int64 {
		var n int64
		for _, addr := range cl.Addrs() {
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			n += commandCalls(t, c, "evalsha")
			c.Close()
		}
		return n
	}
	trips0, e0 := m.RedisRoundTrips(), evalsha()
	batches0, decisions0 := m.RedisBatches()
	const decisions = 90
	var wg sync.WaitGroup
	for i := range decisions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := lim.Allow(ctx, "c"+strconv.Itoa(i%30))
			if err != nil || !d.Allowed {
				t.Errorf("decision %d: %+v, %v; want admitted", i, d, err)
			}
		}()
	}
	wg.Wait()
	batches, sent := m.RedisBatches()
	batches, sent = batches-batches0, sent-decisions0
	trips, calls := m.RedisRoundTrips()-trips0, evalsha()-e0
	t.Logf("%d decisions: %d round trips, %d batches of %d decisions, %d evalsha calls on the nodes", decisions, trips, batches, sent, calls)
	if sent != decisions || calls != decisions {
		t.Errorf("sent %d decisions in batches, the nodes ran %d EVALSHAs: want %d each", sent, calls, decisions)
	}
	if trips != batches || batches < 3 || batches > decisions {
		t.Errorf("%d round trips, %d batches: want as many, between 3 (one per node) and %d", trips, batches, decisions)
	}
}
