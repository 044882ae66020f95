package drill

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// rlsDomain is the domain of the rate limit service's configuration in a
// drill; each consumer is a descriptor (consumer, consumer-N) of it.
const (
	rlsDomain = "drill"
	rlsKey    = "consumer"
)

// rlsConfig is the service's configuration file: cfg's limit on every
// consumer.
func rlsConfig(cfg Config) string {
	burst := ""
	if cfg.Policy.Burst > 0 {
		burst = ", burst: " + strconv.FormatInt(cfg.Policy.Burst, 10)
	}
	return "domain: " + rlsDomain + "\ndescriptors:\n  - key: " + rlsKey + "\n    rate_limit: {window: " +
		strconv.FormatInt(cfg.Policy.Window.Milliseconds(), 10) + "ms, requests_per_unit: " +
		strconv.FormatInt(cfg.Policy.Limit, 10) + ", algorithm: " + cfg.Algorithm + burst + "}\n"
}

// rlsService serves ratelab rls (rls.Serve) with r's mode and cfg's
// batch in front of s, on a free loopback port, until ctx is done; it returns its gRPC
// address once it listens, with a function that stops it and reports how
// it ended.
func rlsService(ctx context.Context, cfg Config, r run, s *stage) (string, func() error, error) {
	dir, err := os.MkdirTemp("", "ratelab-drill-rls-")
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "drill.yaml"), []byte(rlsConfig(cfg)), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	ready := make(chan string, 1)
	o := rls.Options{GRPC: "127.0.0.1:0", ConfigDir: dir, Timeout: cfg.Timeout, Pool: 64, OnError: limiter.OnError(r.mode),
		BreakerFailures: max(cfg.BreakerFailures, 0), DenyCache: true, Clock: algorithms.ClockRedis, Batch: cfg.Batch,
		Ready: func(grpcAddr, _ string) { ready <- grpcAddr }}
	if err := o.Validate(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rls.Serve(sctx, o, s.reach, s.addr) }()
	stop := func() error {
		cancel()
		err := <-done
		os.RemoveAll(dir)
		return err
	}
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	select {
	case addr := <-ready:
		return addr, stop, nil
	case err := <-done:
		cancel()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("the rls service ended before it listened: %v", err)
	case <-timer.C:
		return "", nil, fmt.Errorf("the rls service does not listen after 15 s: %w", stop())
	}
}

// rlsCallTimeout bounds one ShouldRateLimit call, as the HTTP load bounds
// one request.
const rlsCallTimeout = 5 * time.Second

// rlsLoad sends the service at addr cfg's load for d, in the open model:
// call k is due k/rate after the start, from consumer k mod Consumers,
// each of a few workers sending every workers-th call in turn, at once
// when it is late; latency counts from when a call was due. A call is
// "admitted" (200) when OK, refused (429) when OVER_LIMIT, and decided by
// Redis (Limited) when its status carries the limit applied: the service
// answers by its fail mode with no current_limit.
func rlsLoad(ctx context.Context, cfg Config, addr string, d time.Duration) ([]bench.Response, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("rls client: %w", err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	rate := cfg.rate()
	calls := int(rate * d.Seconds())
	workers := min(max(int(rate/20), 8), 256)
	interval := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	var out []bench.Response
	g, gctx := errgroup.WithContext(ctx)
	began := time.Now()
	for w := range workers {
		g.Go(func() error {
			var mine []bench.Response
			for k := w; k < calls; k += workers {
				due := began.Add(time.Duration(k) * interval)
				if !sleepUntil(gctx, due) {
					break
				}
				mine = append(mine, rlsCall(gctx, client, k%cfg.Consumers, due))
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	return out, ctx.Err()
}

// rlsCall sends consumer's call, due at due, and says what came back.
func rlsCall(ctx context.Context, client pb.RateLimitServiceClient, consumer int, due time.Time) bench.Response {
	req := &pb.RateLimitRequest{Domain: rlsDomain, Descriptors: []*rlpb.RateLimitDescriptor{{
		Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: rlsKey, Value: "consumer-" + strconv.Itoa(consumer)}}}}}
	cctx, cancel := context.WithTimeout(ctx, rlsCallTimeout)
	defer cancel()
	r := bench.Response{Consumer: consumer, Due: due, Sent: time.Now()}
	resp, err := client.ShouldRateLimit(cctx, req)
	r.Done = time.Now()
	if err != nil {
		r.Error = rlsErrorKind(err)
		return r
	}
	r.Status = 200
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		r.Status = 429
	}
	st := resp.GetStatuses()
	r.Limited = len(st) > 0 && st[0].GetCurrentLimit() != nil
	return r
}

// rlsErrorKind names a failed call as bench names a transport error.
func rlsErrorKind(err error) string {
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return "timeout"
	case codes.Unavailable:
		return "refused"
	case codes.Canceled:
		return "canceled"
	default:
		return "other"
	}
}
