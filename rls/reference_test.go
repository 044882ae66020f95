package rls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/envoyref"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// startReference runs envoyproxy/ratelimit on the test Redis with the files
// of dir, and dials its gRPC port.
func startReference(t *testing.T, bin string, files map[string]string) pb.RateLimitServiceClient {
	t.Helper()
	addr, _ := envoyref.Start(t, bin, srv.Addr, files)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// refCall is one call of the sequence both services get.
type refCall struct {
	domain string
	hits   uint32
	descs  func() []*rlpb.RateLimitDescriptor
}

func descs(ds ...*rlpb.RateLimitDescriptor) func() []*rlpb.RateLimitDescriptor {
	return func() []*rlpb.RateLimitDescriptor { return ds }
}

// TestRLSSameAnswersAsReference: the same sequence of calls, sent to
// ratelab's service and to envoyproxy/ratelimit with the same files (the
// README's examples, every window made an hour so that the sequence runs
// inside one), gets the same overall codes and statuses: code, limit,
// remaining, and the reset to within a second.
func TestRLSSameAnswersAsReference(t *testing.T) {
	bin := envoyref.Bin(t)
	prefix := redistest.Prefix(t) + "-"
	files := map[string]string{}
	for _, name := range []string{"readme-example-1.yaml", "readme-example-2.yaml", "readme-example-3.yaml", "readme-example-4b.yaml",
		"readme-example-5.yaml", "readme-example-6.yaml", "readme-example-7.yaml", "readme-example-8.yaml", "readme-example-9.yaml"} {
		src := strings.ReplaceAll(envoyReadme(t, name), testDomain, prefix)
		src = strings.NewReplacer("unit: second", "unit: hour", "unit: minute", "unit: hour", "unit: day", "unit: hour").Replace(src)
		files[name] = src
	}
	files["multi.yaml"] = "domain: " + prefix + "multi\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 4}\n" +
		"  - key: org\n    rate_limit: {unit: hour, requests_per_unit: 6}\n"
	ref := startReference(t, bin, files)

	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	served, err := limiter.LoadRules(context.Background(), rls.Options{ConfigDir: dir}.RulesConfig())
	if err != nil {
		t.Fatal(err)
	}
	svc := rls.New(rls.Config{Rules: served, Config: limiter.Config{Timeout: 5 * time.Second,
		OnError: limiter.FailOpen, Decider: algorithms.NewDecider(redistest.Client(t, srv), algorithms.DecideClock(algorithms.ClockRedis))}})
	t.Cleanup(svc.Close)

	override := func(n uint32, kv ...string) *rlpb.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	seq := []refCall{
		{"mongo_cps", 499, descs(desc("database", "users"))},
		{"mongo_cps", 0, descs(desc("database", "users"))},
		{"mongo_cps", 0, descs(desc("database", "users"))},
		{"mongo_cps", 0, descs(addend(desc("database", "users"), 0))},
		{"mongo_cps", 3, descs(desc("database", "default"), desc("database", "orders"))},
		{"messaging", 0, descs(desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1"))},
		{"messaging", 4, descs(desc("message_type", "marketing", "to_number", "1"))},
		{"messaging", 1, descs(desc("message_type", "marketing", "to_number", "1"))},
		{"messaging", 0, descs(desc("message_type", "marketing", "to_number", "2"), desc("message_type", "marketing"))},
		{"edge_proxy_per_ip", 0, descs(desc("remote_address", "50.0.0.5"))},
		{"edge_proxy_per_ip", 0, descs(addend(desc("remote_address", "50.0.0.5"), 0))},
		{"edge_proxy_per_ip", 9, descs(desc("remote_address", "50.0.0.1"))},
		{"edge_proxy_per_ip", 0, descs(desc("remote_address", "50.0.0.1"))},
		{"edge_proxy_per_ip", 0, descs(desc("remote_address", "50.0.0.1"))},
		{"example4", 0, descs(desc("key", "value", "subkey", "s"), desc("key", "value"))},
		{"internal", 7, descs(desc("ldap", "x"), desc("azure", "x"))},
		{"example6", 10, descs(desc("service", "s", "user", "user-a"))},
		{"example6", 0, descs(desc("service", "s", "user", "user-a"))},
		{"example6", 20, descs(desc("service", "s", "user", "user-b"))},
		{"example6", 0, descs(desc("service", "s", "user", "user-b"))},
		{"example7", 4, descs(desc("key_1", "value_1", "user", "bkthomps"))},
		{"example7", 0, descs(desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))},
		{"example7", 0, descs(desc("key_1", "value_1", "user", "bkthomps"))},
		{"example7", 0, descs(desc("key_1", "value_1", "user", "bkthomps"))},
		{"example8", 0, descs(desc("key1", "value1"), desc("key1", "v2"), desc("key1", "v3"))},
		{"example9", 0, descs(desc("key1", "value_1"), desc("key1", "valu"), desc("key1", "value"))},
		{"multi", 2, descs(desc("user", "a"), desc("org", "o"))},
		{"multi", 2, descs(desc("user", "a"), desc("org", "o"))},
		{"multi", 0, descs(desc("user", "b"), desc("org", "o"))},
		{"multi", 0, descs(addend(desc("user", "c"), 0), addend(desc("org", "o"), 2))},
		{"multi", 0, descs(override(2, "user", "z"))},
		{"multi", 0, descs(override(2, "user", "z"))},
		{"multi", 0, descs(override(2, "user", "z"))},
		{"multi", 0, descs(override(0, "user", "y"))},
		{"multi", 0, descs(desc("user", "twice"), desc("user", "twice"))},
		{"multi", 0, descs(desc("user", "twice"), desc("user", "twice"))},
		{"nowhere", 0, descs(desc("user", "a"))},
	}
	hour := time.Now().Truncate(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, c := range seq {
		req := &pb.RateLimitRequest{Domain: prefix + c.domain, Descriptors: c.descs(), HitsAddend: c.hits}
		want, err := ref.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d to envoyproxy/ratelimit: %v", i, err)
		}
		got, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d to ratelab: %v", i, err)
		}
		if diff := compareResponses(got, want); diff != "" {
			t.Errorf("call %d (%s, hits %d, %v): %s\nratelab:   %v\nreference: %v", i, c.domain, c.hits, req.GetDescriptors(), diff, got, want)
		}
	}
	if time.Now().Truncate(time.Hour) != hour {
		t.Skip("the sequence crossed an hour's end: run again")
	}
}

// compareResponses says how got differs from want: overall code, and per
// status code, limit, remaining, and reset to within a second.
func compareResponses(got, want *pb.RateLimitResponse) string {
	var diffs []string
	if got.GetOverallCode() != want.GetOverallCode() {
		diffs = append(diffs, fmt.Sprintf("overall %v, want %v", got.GetOverallCode(), want.GetOverallCode()))
	}
	if len(got.GetStatuses()) != len(want.GetStatuses()) {
		return strings.Join(append(diffs, fmt.Sprintf("%d statuses, want %d", len(got.GetStatuses()), len(want.GetStatuses()))), "; ")
	}
	for i, g := range got.GetStatuses() {
		w := want.GetStatuses()[i]
		gl, wl := g.GetCurrentLimit(), w.GetCurrentLimit()
		switch {
		case g.GetCode() != w.GetCode():
			diffs = append(diffs, fmt.Sprintf("status %d: %v, want %v", i, g.GetCode(), w.GetCode()))
		case gl.GetRequestsPerUnit() != wl.GetRequestsPerUnit() || gl.GetUnit() != wl.GetUnit() || gl.GetName() != wl.GetName() || (gl == nil) != (wl == nil):
			diffs = append(diffs, fmt.Sprintf("status %d: limit %v, want %v", i, gl, wl))
		case g.GetLimitRemaining() != w.GetLimitRemaining():
			diffs = append(diffs, fmt.Sprintf("status %d: remaining %d, want %d", i, g.GetLimitRemaining(), w.GetLimitRemaining()))
		}
		if d := g.GetDurationUntilReset().AsDuration() - w.GetDurationUntilReset().AsDuration(); d > time.Second || d < -time.Second {
			diffs = append(diffs, fmt.Sprintf("status %d: reset %v, want %v", i, g.GetDurationUntilReset().AsDuration(), w.GetDurationUntilReset().AsDuration()))
		}
	}
	return strings.Join(diffs, "; ")
}
