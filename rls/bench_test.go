package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
)

// BenchmarkRLS is the service's own cost per call, Redis and gRPC left
// out: one descriptor meeting a fixed window, as scripts/bench-rls.sh
// sends, with the deny cache on.
func BenchmarkRLS(b *testing.B) {
	dir := b.TempDir()
	src := "domain: bench\ndescriptors:\n  - key: consumer\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	served, err := limiter.LoadRules(context.Background(), Options{ConfigDir: dir}.RulesConfig())
	if err != nil {
		b.Fatal(err)
	}
	svc := New(Config{Rules: served,
		Config: limiter.Config{Decider: admitAll{}, Timeout: time.Second, OnError: limiter.FailOpen, DenyCache: true}})
	defer svc.Close()
	req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "consumer", Value: "consumer-7"}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
			b.Fatalf("got %v, %v", resp, err)
		}
	}
}

// admitAll admits every check without Redis: what the service costs
// around the decision.
type admitAll struct{}

func (admitAll) Decide(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	out := algorithms.Outcome{Allowed: true, Checks: make([]algorithms.Decision, len(checks)), Calls: 1}
	for i, c := range checks {
		out.Checks[i] = algorithms.Decision{Allowed: true, Limit: c.Policy.Limit, Remaining: c.Policy.Limit / 2}
	}
	return out, nil
}
