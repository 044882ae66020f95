package rls_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// TestRLSBatchSequence: the same sequence of calls, sent to a service whose
// decisions go through internal/batch and to one that sends each alone,
// gets the same responses, field for field.
func TestRLSBatchSequence(t *testing.T) {
	file := "domain: " + testDomain + "d\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
		"  - key: org\n    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}\n" +
		"  - key: slow\n    rate_limit: {window: 30s, requests_per_unit: 2, algorithm: sliding-log}\n"
	plain := redistest.Client(t, srv)
	b := batch.New(plain, batch.Options{Max: 16, Flushers: 2, Timeout: 5 * time.Second})
	t.Cleanup(func() { b.Close() })
	now := func() time.Time { return rlsFixed }
	batched := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{ResponseHeaders: true,
		Config: limiter.Config{Decider: algorithms.NewDecider(b.Wrap(plain), algorithms.DecideClock(algorithms.ClockCaller), algorithms.DecideNow(now))}})
	alone := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{ResponseHeaders: true})
	calls := []struct {
		hits  uint32
		descs func() []*rlpb.RateLimitDescriptor
	}{
		{0, descs(desc("user", "u1"), desc("org", "o1"))},
		{2, descs(desc("user", "u1"), desc("org", "o1"))},
		{0, descs(desc("user", "u1"), desc("org", "o1"))},
		{0, descs(addend(desc("org", "o1"), 0))},
		{1, descs(desc("slow", "s"), desc("slow", "s"))},
		{1, descs(desc("slow", "s"))},
		{5, descs(desc("org", "o2"), desc("user", "u2"))},
		{0, descs(desc("other", "x"))},
	}
	for i, c := range calls {
		a, w := batched.call(t, "d", c.hits, c.descs()...), alone.call(t, "d", c.hits, c.descs()...)
		if !proto.Equal(a, w) {
			t.Errorf("call %d: batched %v\nalone %v", i, a, w)
		}
	}
}

// serveRLS serves rls.Serve itself, as ratelab rls does, on the test Redis
// (or the Redis of r, when given) with the configuration dir, and dials it
// over gRPC.
func serveRLS(t *testing.T, dir string, o rls.Options, r ...*redis.UniversalOptions) pb.RateLimitServiceClient {
	t.Helper()
	target := &redis.UniversalOptions{Addrs: []string{srv.Addr}, Protocol: 2}
	if len(r) > 0 {
		target = r[0]
	}
	ready := make(chan string, 1)
	also := o.Ready
	o.GRPC, o.ConfigDir, o.Ready = "127.0.0.1:0", dir, func(g, h string) {
		if also != nil {
			also(g, h)
		}
		ready <- g
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- rls.Serve(ctx, o, target, target.Addrs[0])
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return pb.NewRateLimitServiceClient(conn)
}

// TestRLSBatchBurst: 200 concurrent calls for one descriptor with a limit
// of 50 an hour, to ratelab rls's own assembly with --redis-batch 16 and
// with 1: each admits exactly 50, whatever the batches held.
func TestRLSBatchBurst(t *testing.T) {
	const (
		limit = 50
		calls = 200
	)
	for _, alg := range []string{"sliding-log", "gcra", "token-bucket"} {
		for _, n := range []int{1, 16} {
			t.Run(alg+"/"+map[int]string{1: "batch 1", 16: "batch 16"}[n], func(t *testing.T) {
				prefix := redistest.Prefix(t)
				dir := t.TempDir()
				file := "domain: " + prefix + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: " + alg + "}\n"
				if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(file), 0o644); err != nil {
					t.Fatal(err)
				}
				client := serveRLS(t, dir, rls.Options{Timeout: 5 * time.Second, Pool: 32, Batch: n,
					OnError: limiter.FailClosed, Clock: algorithms.ClockRedis})
				var wg sync.WaitGroup
				var mu sync.Mutex
				admitted, failed := 0, 0
				start := make(chan struct{})
				for range calls {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: prefix, Descriptors: []*rlpb.RateLimitDescriptor{desc("user", "u")}})
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err != nil:
							failed++
						case resp.GetOverallCode() == pb.RateLimitResponse_OK:
							admitted++
						}
					}()
				}
				close(start)
				wg.Wait()
				if admitted != limit || failed != 0 {
					t.Errorf("%d of %d concurrent calls admitted, %d failed; want exactly %d, none failed", admitted, calls, failed, limit)
				}
			})
		}
	}
}

// TestRLSClusterNotAskedIsNotDenied: on a Redis Cluster at the default
// batch, a call whose descriptors meet a consumer's limit and a global cap
// (two hash tags, two script calls) and which the consumer's limit refuses
// never puts the global cap to Redis: the cap's descriptor answers OK, not
// OVER_LIMIT with nothing remaining as it did, and is counted not decided.
func TestRLSClusterNotAskedIsNotDenied(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t, srv)
	prefix := redistest.Prefix(t)
	dir := t.TempDir()
	file := "domain: " + prefix + "\ndescriptors:\n  - key: user\n    rate_limit: {name: per-user, unit: minute, requests_per_unit: 1, algorithm: sliding-log}\n" +
		"  - key: generic_key\n    value: global\n    rate_limit: {name: global, unit: minute, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := make(chan string, 1)
	client := serveRLS(t, dir, rls.Options{Timeout: 5 * time.Second, Pool: 8, Batch: 16, OnError: limiter.FailClosed, Clock: algorithms.ClockRedis,
		HTTP: "127.0.0.1:0", Ready: func(_, h string) { httpAddr <- h }}, &redis.UniversalOptions{Addrs: cl.Addrs(), Protocol: 2})
	call := func() *pb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: prefix,
			Descriptors: []*rlpb.RateLimitDescriptor{desc("user", "alice"), desc("generic_key", "global")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := call(); resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("first call: %v", resp)
	}
	resp := call()
	st := resp.GetStatuses()
	if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || st[0].GetCode() != pb.RateLimitResponse_OVER_LIMIT ||
		st[1].GetCode() != pb.RateLimitResponse_OK || st[1].GetCurrentLimit().GetRequestsPerUnit() != 1000 {
		t.Fatalf("second call: %v; want OVER_LIMIT by per-user, the global cap not asked and OK", resp)
	}
	notDecided := map[string]float64{}
	for _, m := range scrape(t, <-httpAddr)["ratelab_edge_limit_decisions_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["domain"] == prefix && labels["outcome"] == limiter.LimitNotDecided {
			notDecided[labels["limit"]] = m.GetCounter().GetValue()
		}
	}
	if notDecided["global"] != 1 || notDecided["per-user"] != 0 {
		t.Fatalf("not decided: %v; want global once", notDecided)
	}
}
