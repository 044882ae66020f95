package rls

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
)

// strictDecider admits every call, after checking that each check it is
// asked is one Redis's script could be asked: a key, an algorithm, a valid
// policy, a cost within the limit.
type strictDecider struct{ t *testing.T }

func (d strictDecider) Allow(context.Context, string) (algorithms.Decision, error) {
	return algorithms.Decision{}, fmt.Errorf("Allow is not the service's")
}

func (d strictDecider) Decide(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	out := algorithms.Outcome{Allowed: true, Checks: make([]algorithms.Decision, len(checks)), Calls: 1}
	for i, c := range checks {
		if err := c.Validate(); err != nil {
			d.t.Errorf("check %d sent to Redis: %+v: %v", i, c, err)
		}
		out.Checks[i] = algorithms.Decision{Allowed: true, Limit: c.Policy.Limit, Remaining: c.Policy.Limit - c.Cost}
	}
	return out, nil
}

// fuzzConfig has every kind of descriptor the config format has.
const fuzzConfig = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding-log}
  - key: org
    descriptors:
      - key: plan
        rate_limit: {unit: day, requests_per_unit: 7, algorithm: gcra}
      - key: free
        rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token-bucket}
  - key: window
    rate_limit: {requests_per_unit: 9, window: 30s, algorithm: sliding-counter}
  - key: first
    rate_limit: {name: first, unit: second, requests_per_unit: 2}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 3, replaces: [{name: first}]}
`

// FuzzShouldRateLimit: any request the wire can carry gets InvalidArgument
// or a response with one status per descriptor and an overall code of OK or
// OVER_LIMIT, never a panic, and nothing but valid checks reach Redis.
func FuzzShouldRateLimit(f *testing.F) {
	seed := func(req *pb.RateLimitRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	entry := func(k, v string) *rlpb.RateLimitDescriptor_Entry {
		return &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	seed(&pb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("user", "alice")}}}})
	seed(&pb.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("user", "vip")}},
		{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("org", "o"), entry("plan", "p")}},
		{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("first", "x")}},
		{Entries: []*rlpb.RateLimitDescriptor_Entry{entry("second", "y")}, HitsAddend: wrapperspb.UInt64(0)},
	}})
	seed(&pb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{{
		Entries: []*rlpb.RateLimitDescriptor_Entry{entry("path", "/api/v1")},
		Limit:   &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_YEAR},
	}}})
	seed(&pb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{{
		Entries: []*rlpb.RateLimitDescriptor_Entry{entry("window", "w")}, HitsAddend: wrapperspb.UInt64(1 << 63)}}})

	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(fuzzConfig), 0o644); err != nil {
		f.Fatal(err)
	}
	served, err := limiter.LoadRules(context.Background(), Options{ConfigDir: dir}.RulesConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &pb.RateLimitRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		svc := New(Config{Rules: served,
			Config: limiter.Config{Decider: strictDecider{t}, Timeout: time.Second, OnError: limiter.FailClosed, DenyCache: true}})
		defer svc.Close()
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v, want InvalidArgument or an answer", err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		if c := resp.GetOverallCode(); c != pb.RateLimitResponse_OK && c != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("overall code %v", c)
		}
	})
}
