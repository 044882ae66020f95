package rls_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/reload/reloadtest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// rlsFixed is the caller's time the service's tests decide at: the middle
// of a day, so that no window of theirs (a second to a day) ends while
// they run.
var rlsFixed = time.Date(2026, 3, 4, 12, 0, 0, 500_000_000, time.UTC)

// rlsServer is a served rate limit service and a gRPC client of it.
type rlsServer struct {
	client  pb.RateLimitServiceClient
	conn    *grpc.ClientConn
	http    string
	dir     string
	log     *lockedBuffer
	metrics *limiter.Metrics
	domain  func(string) string
}

// lockedBuffer is a log written by the service and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// testDomain begins each domain of a test's files: startRLS replaces it
// with a prefix of the test's own, so that tests sharing Redis never share a
// counter.
const testDomain = "@test@-"

// envoyReadme reads one of envoyproxy/ratelimit's README files, unchanged
// but for its domain, which the test's prefix makes its own.
func envoyReadme(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "rules", "testdata", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(b), "domain: ", "domain: "+testDomain, 1)
}

// startRLS serves files (name → content) from a directory of their own
// on the test Redis, deciding at cfg.Now (rlsFixed when nil), and dials it
// over gRPC.
func startRLS(t *testing.T, files map[string]string, cfg rls.Config) *rlsServer {
	t.Helper()
	dir := t.TempDir()
	prefix := redistest.Prefix(t)
	for name, src := range files {
		src = strings.ReplaceAll(src, testDomain, prefix+"-")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := &lockedBuffer{}
	served, err := limiter.LoadRules(context.Background(), rls.Options{ConfigDir: dir, Log: log}.RulesConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := redistest.Client(t, srv)
	cfg.Rules = served
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return rlsFixed }
	}
	if cfg.Decider == nil {
		cfg.Decider = algorithms.NewDecider(client, algorithms.DecideClock(algorithms.ClockCaller), algorithms.DecideNow(cfg.Now))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.OnError == "" {
		cfg.OnError = limiter.FailOpen
	}
	cfg.Metrics, cfg.Log = limiter.NewMetrics(), log
	svc := rls.New(cfg)
	ready := make(chan [2]string, 1)
	o := rls.Options{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", ConfigDir: dir, Timeout: cfg.Timeout, Pool: 8, OnError: cfg.OnError,
		Log: log, Ready: func(g, h string) { ready <- [2]string{g, h} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, o) }()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		svc.Close()
	})
	return &rlsServer{client: pb.NewRateLimitServiceClient(conn), conn: conn, http: addrs[1], dir: dir, log: log, metrics: cfg.Metrics,
		domain: func(d string) string { return prefix + "-" + d }}
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// addend sets a descriptor's own hits_addend.
func addend(d *rlpb.RateLimitDescriptor, n uint64) *rlpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (s *rlsServer) call(t *testing.T, domain string, hits uint32, descs ...*rlpb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: s.domain(domain), Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// st is a descriptor status as the tests expect it: its code, its limit
// (0: none), its remaining.
type st struct {
	over      bool
	limit     uint32
	unit      pb.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

func checkResp(t *testing.T, resp *pb.RateLimitResponse, over bool, want ...st) {
	t.Helper()
	if got := resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT; got != over || resp.GetOverallCode() == pb.RateLimitResponse_UNKNOWN {
		t.Errorf("overall %v, want over limit %v", resp.GetOverallCode(), over)
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("%d statuses, want %d: %v", len(resp.GetStatuses()), len(want), resp)
	}
	for i, w := range want {
		s := resp.GetStatuses()[i]
		got := st{over: s.GetCode() == pb.RateLimitResponse_OVER_LIMIT, limit: s.GetCurrentLimit().GetRequestsPerUnit(),
			unit: s.GetCurrentLimit().GetUnit(), remaining: s.GetLimitRemaining()}
		if w.limit > 0 && w.unit == 0 {
			w.unit = pb.RateLimitResponse_RateLimit_SECOND
		}
		if got != w {
			t.Errorf("status %d: %+v, want %+v", i, got, w)
		}
		if w.limit > 0 && s.GetDurationUntilReset() == nil {
			t.Errorf("status %d: no duration_until_reset", i)
		}
	}
}

// TestRLSReadmeExamples: the configuration examples of envoyproxy/ratelimit's
// README decide, through a gRPC client on real Redis, as that README says.
func TestRLSReadmeExamples(t *testing.T) {
	const (
		minute = pb.RateLimitResponse_RateLimit_MINUTE
		day    = pb.RateLimitResponse_RateLimit_DAY
	)
	unlimited := st{remaining: math.MaxUint32}
	t.Run("1: descriptors", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-1.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "mongo_cps", 500, desc("database", "users")), false, st{limit: 500})
		checkResp(t, s.call(t, "mongo_cps", 0, desc("database", "users")), true, st{over: true, limit: 500})
		checkResp(t, s.call(t, "mongo_cps", 0, desc("database", "default")), false, st{limit: 500, remaining: 499})
		checkResp(t, s.call(t, "mongo_cps", 0, desc("database", "orders")), false, st{})
	})
	t.Run("2: nested", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-2.yaml")}, rls.Config{})
		mk := func(n string) *rlpb.RateLimitDescriptor { return desc("message_type", "marketing", "to_number", n) }
		checkResp(t, s.call(t, "messaging", 5, mk("2061111111")), false, st{limit: 5, unit: day})
		checkResp(t, s.call(t, "messaging", 0, mk("2061111111")), true, st{over: true, limit: 5, unit: day})
		// Each number gets its own 5 a day, and its own 100 a day.
		checkResp(t, s.call(t, "messaging", 0, mk("2062222222")), false, st{limit: 5, unit: day, remaining: 4})
		checkResp(t, s.call(t, "messaging", 0, desc("to_number", "2061111111")), false, st{limit: 100, unit: day, remaining: 99})
		checkResp(t, s.call(t, "messaging", 0, desc("message_type", "marketing")), false, st{})
	})
	t.Run("3: blocked address, requests_per_unit 0", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-3.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5")), true, st{over: true, unit: pb.RateLimitResponse_RateLimit_SECOND})
		checkResp(t, s.call(t, "edge_proxy_per_ip", 10, desc("remote_address", "50.0.0.1")), false, st{limit: 10})
		checkResp(t, s.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1")), true, st{over: true, limit: 10})
		// hits_addend 0 asks whether one more would be admitted: never.
		checkResp(t, s.call(t, "edge_proxy_per_ip", 0, addend(desc("remote_address", "50.0.0.5"), 0)), true, st{over: true, unit: pb.RateLimitResponse_RateLimit_SECOND})
	})
	t.Run("4: depth", func(t *testing.T) {
		s := startRLS(t, map[string]string{"a.yaml": envoyReadme(t, "readme-example-4a.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "example4", 0, desc("key", "value", "subkey", "subvalue")), false, st{})
		s = startRLS(t, map[string]string{"b.yaml": envoyReadme(t, "readme-example-4b.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "example4", 0, desc("key", "value", "subkey", "subvalue")), false, st{limit: 300, remaining: 299})
	})
	t.Run("5: unlimited", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-5.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "internal", 1000, desc("ldap", "x")), false, unlimited)
		checkResp(t, s.call(t, "internal", 0, desc("azure", "x")), false, st{limit: 100, unit: minute, remaining: 99})
	})
	t.Run("6: shadow mode", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-6.yaml")}, rls.Config{})
		a := func() *rlpb.RateLimitDescriptor { return desc("service", "auth", "user", "user-a") }
		b := func() *rlpb.RateLimitDescriptor { return desc("service", "auth", "user", "user-b") }
		checkResp(t, s.call(t, "example6", 10, a()), false, st{limit: 10})
		// Over user-a's limit, in shadow mode: OK, with nothing remaining.
		checkResp(t, s.call(t, "example6", 0, a()), false, st{limit: 10})
		checkResp(t, s.call(t, "example6", 20, b()), false, st{limit: 20})
		checkResp(t, s.call(t, "example6", 0, b()), true, st{over: true, limit: 20})
	})
	t.Run("7: replaces", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-7.yaml")}, rls.Config{})
		one := func() *rlpb.RateLimitDescriptor { return desc("key_1", "value_1", "user", "bkthomps") }
		two := func() *rlpb.RateLimitDescriptor { return desc("key_2", "value_2", "user", "bkthomps") }
		checkResp(t, s.call(t, "example7", 5, one()), false, st{limit: 5})
		// Met with the limit that replaces it, specific_limit no longer applies.
		checkResp(t, s.call(t, "example7", 0, one(), two()), false, st{}, st{limit: 10, remaining: 9})
		checkResp(t, s.call(t, "example7", 0, one()), true, st{over: true, limit: 5})
	})
	t.Run("8: key and key+value", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-8.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "example8", 0, desc("key1", "value1")), false, st{limit: 20, unit: minute, remaining: 19})
		checkResp(t, s.call(t, "example8", 0, desc("key1", "other")), false, st{limit: 10, unit: minute, remaining: 9})
	})
	t.Run("9: wildcards", func(t *testing.T) {
		s := startRLS(t, map[string]string{"c.yaml": envoyReadme(t, "readme-example-9.yaml")}, rls.Config{})
		checkResp(t, s.call(t, "example9", 0, desc("key1", "value_1")), false, st{limit: 20, unit: minute, remaining: 19})
		checkResp(t, s.call(t, "example9", 0, desc("key1", "value_2")), false, st{limit: 20, unit: minute, remaining: 19})
		checkResp(t, s.call(t, "example9", 0, desc("key1", "other")), false, st{})
	})
}

// TestRLSCall: a call's descriptors are decided together (OVER_LIMIT if
// any is, and then nothing is consumed), hits_addend 0 checks without
// consuming, a descriptor's limit overrides the configuration's, and the
// draft-10 fields are added when asked for.
func TestRLSCall(t *testing.T) {
	file := "domain: " + testDomain + "d\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
		"  - key: org\n    rate_limit: {unit: hour, requests_per_unit: 10}\n" +
		"  - key: slow\n    rate_limit: {window: 30s, requests_per_unit: 2, algorithm: sliding-log}\n"
	s := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{ResponseHeaders: true})
	const (
		minute = pb.RateLimitResponse_RateLimit_MINUTE
		hour   = pb.RateLimitResponse_RateLimit_HOUR
	)
	checkResp(t, s.call(t, "d", 0, desc("user", "u1"), desc("org", "o1")), false, st{limit: 3, unit: minute, remaining: 2}, st{limit: 10, unit: hour, remaining: 9})
	checkResp(t, s.call(t, "d", 2, desc("user", "u1"), desc("org", "o1")), false, st{limit: 3, unit: minute}, st{limit: 10, unit: hour, remaining: 7})
	// Over user's limit: nothing consumed from org's.
	checkResp(t, s.call(t, "d", 0, desc("user", "u1"), desc("org", "o1")), true, st{over: true, limit: 3, unit: minute}, st{limit: 10, unit: hour, remaining: 7})
	// hits_addend 0 checks: twice, and nothing is taken.
	for range 2 {
		checkResp(t, s.call(t, "d", 0, addend(desc("org", "o1"), 0)), false, st{limit: 10, unit: hour, remaining: 7})
	}
	// More hits than the limit: over it, whatever is left.
	checkResp(t, s.call(t, "d", 11, desc("org", "o2")), true, st{over: true, limit: 10, unit: hour})
	// The descriptor's own limit instead of the configuration's.
	o := desc("user", "u2")
	o.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_DAY}
	checkResp(t, s.call(t, "d", 0, o), false, st{limit: 1, unit: pb.RateLimitResponse_RateLimit_DAY})
	checkResp(t, s.call(t, "d", 0, o), true, st{over: true, limit: 1, unit: pb.RateLimitResponse_RateLimit_DAY})
	// ratelab's extension: sliding-log on a 30 s window, reported as 30 seconds.
	resp := s.call(t, "d", 0, desc("slow", "x"))
	checkResp(t, resp, false, st{limit: 2, remaining: 1})
	if m := resp.GetStatuses()[0].GetCurrentLimit().GetUnitMultiplier().GetValue(); m != 30 {
		t.Errorf("unit_multiplier %d, want 30", m)
	}
	h := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	if h["RateLimit-Policy"] != `"slow";q=2;w=30` || h["RateLimit"] != `"slow";r=1;t=30` {
		t.Errorf("response_headers_to_add %v", h)
	}
	// One descriptor twice in a call: one counter, both hits on it.
	checkResp(t, s.call(t, "d", 0, desc("user", "u3"), desc("user", "u3")), false, st{limit: 3, unit: minute, remaining: 2}, st{limit: 3, unit: minute, remaining: 1})
	checkResp(t, s.call(t, "d", 0, desc("user", "u3"), desc("user", "u3")), true, st{over: true, limit: 3, unit: minute}, st{over: true, limit: 3, unit: minute})
	// An unknown domain limits nothing.
	checkResp(t, s.call(t, "nowhere", 0, desc("user", "u1")), false, st{})
}

// TestRLSBadRequests: a malformed call gets InvalidArgument, from gRPC and
// from /json (400), never an admission.
func TestRLSBadRequests(t *testing.T) {
	file := "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
	s := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{})
	good := []*rlpb.RateLimitDescriptor{desc("user", "u")}
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
	}{
		{"no domain", &pb.RateLimitRequest{Descriptors: good}},
		{"no descriptors", &pb.RateLimitRequest{Domain: s.domain("d")}},
		{"a descriptor without entries", &pb.RateLimitRequest{Domain: s.domain("d"), Descriptors: []*rlpb.RateLimitDescriptor{{}}}},
		{"an empty key", &pb.RateLimitRequest{Domain: s.domain("d"), Descriptors: []*rlpb.RateLimitDescriptor{desc("", "u")}}},
		{"an override without a unit", &pb.RateLimitRequest{Domain: s.domain("d"), Descriptors: []*rlpb.RateLimitDescriptor{
			{Entries: good[0].Entries, Limit: &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}}}}},
		{"nil entry", &pb.RateLimitRequest{Domain: s.domain("d"), Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{nil}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := s.client.ShouldRateLimit(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("got %v, %v; want InvalidArgument", resp, err)
			}
		})
	}
	for _, body := range []string{`{"domain":"","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`, `{"domain":`, `{"nope":1}`} {
		resp, err := http.Post("http://"+s.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/json %s: %d, want 400", body, resp.StatusCode)
		}
	}
	// Nothing was counted: the user still has the whole limit.
	checkResp(t, s.call(t, "d", 0, desc("user", "u")), false, st{limit: 3, unit: pb.RateLimitResponse_RateLimit_MINUTE, remaining: 2})
}

// TestRLSJSONAndHealth: /json answers as envoyproxy/ratelimit's (429 when
// over the limit), and grpc.health.v1 says the service is serving.
func TestRLSJSONAndHealth(t *testing.T) {
	file := "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	s := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{})
	body := `{"domain":"` + s.domain("d") + `","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`
	var codes []int
	var last string
	for range 2 {
		resp, err := http.Post("http://"+s.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = b.String()
	}
	if codes[0] != 200 || codes[1] != 429 || !strings.Contains(last, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("/json: %v, last %s", codes, last)
	}
	for _, service := range []string{"", pb.RateLimitService_ServiceDesc.ServiceName} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", service, resp, err)
		}
	}
}

// TestRLSReload: a rewritten file is served without a restart; a file that
// does not parse is refused, naming its file, line and field, and the
// configuration serving keeps serving.
func TestRLSReload(t *testing.T) {
	version := func(n string) string {
		return "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + n + "}\n"
	}
	s := startRLS(t, map[string]string{"d.yaml": version("5")}, rls.Config{})
	limit := func() uint32 {
		return s.call(t, "d", 0, addend(desc("user", "r"), 0)).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	file := filepath.Join(s.dir, "d.yaml")
	write := func(src string) {
		src = strings.ReplaceAll(src, testDomain, s.domain(""))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		write(version("7")) // until seen: the watch starts a moment after the service serves
		return limit() == 7, "the new version is not served:\n" + s.log.String()
	})
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		write(version("fortnight"))
		return strings.Contains(s.log.String(), "d.yaml:4: descriptors[0].rate_limit.requests_per_unit"),
			"the bad file is not refused naming its line and field:\n" + s.log.String()
	})
	if got := limit(); got != 7 {
		t.Errorf("after the bad file the limit is %d, want 7 still", got)
	}
}

// TestRLSSkippedFiles: the files of the directory that are not read (not
// YAML) are logged, once; the hidden ones are not.
func TestRLSSkippedFiles(t *testing.T) {
	d := "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	s := startRLS(t, map[string]string{"d.yaml": d, "README.md": "r", ".d.yaml.swp": "h"}, rls.Config{})
	want := "ratelab rls: config " + s.dir + ": skipped README.md: only *.yaml and *.yml files are read\n"
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(s.log.String(), want), "no line " + want + "in the log:\n" + s.log.String()
	})
	if n := strings.Count(s.log.String(), "skipped"); n != 1 {
		t.Errorf("%d lines of skipped files, want 1:\n%s", n, s.log.String())
	}
}

// TestRLSReloadConfigMap: ratelab rls serving a directory that is a
// ConfigMap volume, updated as the kubelet updates it (no event names a
// file: a new ..data link is renamed over the old), serves the new limit
// within 5 s.
func TestRLSReloadConfigMap(t *testing.T) {
	domain := redistest.Prefix(t)
	version := func(n int) map[string]string {
		return map[string]string{"config.yaml": fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", domain, n)}
	}
	cm := reloadtest.NewConfigMap(t, t.TempDir(), version(2))
	client := serveRLS(t, cm.Dir, rls.Options{Timeout: 5 * time.Second, Pool: 8, Batch: 1, OnError: limiter.FailClosed, Clock: algorithms.ClockRedis})
	limit := func() uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{addend(desc("user", "r"), 0)}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limit(); got != 2 {
		t.Fatalf("limit %d, want the first version's 2", got)
	}
	cm.Update(version(50))
	testwait.Eventually(t, 5*time.Second, func() (bool, string) {
		got := limit()
		return got == 50, fmt.Sprintf("limit %d, want the new version's 50", got)
	})
}

// TestRLSRedisFails: when Redis does not answer, a call is answered by the
// fail mode, open (OK) or closed (OVER_LIMIT), and /metrics counts it.
func TestRLSRedisFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there: every call is refused
	file := "domain: " + testDomain + "d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
	for _, tc := range []struct {
		mode    limiter.OnError
		over    bool
		outcome string
	}{
		{limiter.FailOpen, false, limiter.OutcomeErrorOpen},
		{limiter.FailClosed, true, limiter.OutcomeErrorClosed},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
			t.Cleanup(func() { client.Close() })
			s := startRLS(t, map[string]string{"d.yaml": file}, rls.Config{Config: limiter.Config{OnError: tc.mode, Decider: algorithms.NewDecider(client)}})
			resp := s.call(t, "d", 0, desc("user", "u"))
			if got := resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT; got != tc.over {
				t.Errorf("overall %v, want over limit %v", resp.GetOverallCode(), tc.over)
			}
			if n := s.metrics.Decisions(tc.outcome); n != 1 {
				t.Errorf("%d decisions %s, want 1", n, tc.outcome)
			}
		})
	}
}

// TestRLSHostileCalls: calls that no limit may decide (a descriptor's own
// limit of 300000 a year, whose count no script holds exactly; 20,000
// descriptors; an entry longer than the bound) are refused, InvalidArgument
// over gRPC and 400 on /json, counted by reason, and never reach Redis; so
// they never open the circuit, and another user is still held to 5 a
// second in the same second, with the breaker at 2 failures and failing
// open. Counted as Redis failures, two such calls switched the limiter off
// for everyone.
func TestRLSHostileCalls(t *testing.T) {
	t.Parallel()
	file := "domain: " + testDomain + "h\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	counter := &countingDecider{d: algorithms.NewDecider(redistest.Client(t, srv), algorithms.DecideClock(algorithms.ClockCaller),
		algorithms.DecideNow(func() time.Time { return rlsFixed }))}
	s := startRLS(t, map[string]string{"h.yaml": file}, rls.Config{Config: limiter.Config{Decider: counter, BreakerFailures: 2,
		OnError: limiter.FailOpen}})
	yearly := desc("user", "mallory")
	yearly.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 300000, Unit: typev3.RateLimitUnit_YEAR}
	many := make([]*rlpb.RateLimitDescriptor, 20000)
	for i := range many {
		many[i] = desc("user", "mallory")
	}
	negative := desc("user", "mallory")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		name   string
		descs  []*rlpb.RateLimitDescriptor
		reason string
	}{
		{"an override no script counts exactly", []*rlpb.RateLimitDescriptor{yearly}, limiter.InvalidOverride},
		{"20,000 descriptors", many, limiter.InvalidDescriptors},
		{"a value over the bound", []*rlpb.RateLimitDescriptor{desc("user", strings.Repeat("m", limiter.DefaultBounds.Length+1))}, limiter.InvalidLength},
		{"17 entries", []*rlpb.RateLimitDescriptor{desc(slices.Repeat([]string{"k", "v"}, 17)...)}, limiter.InvalidEntries},
		{"negative hits", []*rlpb.RateLimitDescriptor{negative}, limiter.InvalidHits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &pb.RateLimitRequest{Domain: s.domain("h"), Descriptors: tc.descs}
			for range 3 {
				_, err := s.client.ShouldRateLimit(context.Background(), req)
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("gRPC: %v, want InvalidArgument", err)
				}
				body, err := protojson.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := http.Post("http://"+s.http+"/json", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("/json: %d %s, want 400", resp.StatusCode, msg)
				}
			}
			if n := s.metrics.InvalidRequests(tc.reason); n != 6 {
				t.Fatalf("%d refusals counted as %s, want 6", n, tc.reason)
			}
		})
	}
	if n := counter.calls.Load(); n != 0 {
		t.Fatalf("%d hostile calls reached Redis, want none", n)
	}
	var ok int
	for range 8 {
		if s.call(t, "h", 0, desc("user", "alice")).GetOverallCode() == pb.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != 5 || s.metrics.Decisions(limiter.OutcomeErrorOpen) != 0 {
		t.Fatalf("alice got %d of 8 through a limit of 5 a second (%d failed open), want 5 and none",
			ok, s.metrics.Decisions(limiter.OutcomeErrorOpen))
	}
}

// TestConfigCost: a limit's cost in the configuration is what each hit
// takes of it: cost 0 checks without consuming, cost 5 takes 5 a hit; a
// call whose hits would take more than the limit is over it and takes
// nothing.
func TestConfigCost(t *testing.T) {
	t.Parallel()
	file := "domain: " + testDomain + "c\ndescriptors:\n" +
		"  - key: free\n    rate_limit: {unit: minute, requests_per_unit: 3, cost: 0}\n" +
		"  - key: dear\n    rate_limit: {unit: minute, requests_per_unit: 12, cost: 5}\n"
	s := startRLS(t, map[string]string{"c.yaml": file}, rls.Config{})
	for range 5 {
		checkResp(t, s.call(t, "c", 0, desc("free", "a")), false, st{limit: 3, unit: pb.RateLimitResponse_RateLimit_MINUTE, remaining: 3})
	}
	dear := func(remaining uint32, over bool) st {
		return st{over: over, limit: 12, unit: pb.RateLimitResponse_RateLimit_MINUTE, remaining: remaining}
	}
	checkResp(t, s.call(t, "c", 0, desc("dear", "a")), false, dear(7, false))
	checkResp(t, s.call(t, "c", 3, desc("dear", "a")), true, dear(0, true)) // 15 over 12: takes nothing
	checkResp(t, s.call(t, "c", 0, desc("dear", "a")), false, dear(2, false))
	checkResp(t, s.call(t, "c", 0, desc("dear", "a")), true, dear(0, true))
}

// TestRLSUnknownDomain: a domain the configuration does not have is not
// limited, as envoyproxy/ratelimit: not even by a descriptor's own limit.
func TestRLSUnknownDomain(t *testing.T) {
	t.Parallel()
	file := "domain: " + testDomain + "k\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	s := startRLS(t, map[string]string{"k.yaml": file}, rls.Config{})
	own := desc("user", "a")
	own.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	for range 3 {
		checkResp(t, s.call(t, "elsewhere", 0, own), false, st{})
	}
}

// TestRLSReplacedUnlimited: an unlimited limit that another descriptor's
// limit replaces still answers OK with 4294967295 remaining, as
// envoyproxy/ratelimit marks a limit unlimited before it applies replaces.
func TestRLSReplacedUnlimited(t *testing.T) {
	t.Parallel()
	file := "domain: " + testDomain + "u\ndescriptors:\n" +
		"  - key: internal\n    rate_limit: {name: internal, unlimited: true}\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 9, replaces: [{name: internal}]}\n"
	s := startRLS(t, map[string]string{"u.yaml": file}, rls.Config{})
	checkResp(t, s.call(t, "u", 0, desc("internal", "x"), desc("user", "a")), false,
		st{remaining: math.MaxUint32}, st{limit: 9, unit: pb.RateLimitResponse_RateLimit_MINUTE, remaining: 8})
}

// TestRLSRunning: what an operator of the rate limit service sees. The
// health check answers at /healthz and at envoyproxy/ratelimit's
// /healthcheck; /metrics gives the configuration's version, when it was
// loaded and the reloads by result, and counts each limit's decisions by
// domain, limit and outcome. After two reloads the version and the time
// are the new configuration's (they were not kept up at all before).
func TestRLSRunning(t *testing.T) {
	version := func(n string) string {
		return "domain: " + testDomain + "m\ndescriptors:\n  - key: user\n    rate_limit: {name: per-user, unit: minute, requests_per_unit: " + n + "}\n"
	}
	s := startRLS(t, map[string]string{"m.yaml": version("5")}, rls.Config{})
	for _, path := range []string{"/healthz", "/healthcheck"} {
		resp, err := http.Get("http://" + s.http + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Errorf("%s: %d %q, want 200 ok", path, resp.StatusCode, body)
		}
	}
	s.call(t, "m", 0, desc("user", "a"))
	loaded := func() (string, float64) {
		families := scrape(t, s.http)
		var v string
		for _, m := range families["ratelab_edge_rules_info"].GetMetric() {
			v = m.GetLabel()[0].GetValue()
		}
		return v, families["ratelab_edge_rules_loaded_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue()
	}
	first, at := loaded()
	if first == "" || at <= 0 {
		t.Fatalf("version %q loaded at %v, want the configuration's", first, at)
	}
	if n := s.metrics.LimitDecisions(s.domain("m"), "per-user", limiter.LimitAllowed); n != 1 {
		t.Fatalf("per-user allowed %d times, want 1", n)
	}
	file := filepath.Join(s.dir, "m.yaml")
	for i, n := range []string{"6", "7"} {
		src := strings.ReplaceAll(version(n), testDomain, s.domain(""))
		testwait.Eventually(t, 15*time.Second, func() (bool, string) {
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			return s.metrics.RulesReloads("applied") == int64(i+1), "not reloaded:\n" + s.log.String()
		})
	}
	last, lastAt := loaded()
	if last == first || lastAt < at {
		t.Fatalf("after two reloads: version %q loaded at %v; first %q at %v", last, lastAt, first, at)
	}
	if !strings.Contains(s.log.String(), "ratelab rls: config "+s.dir+" reloaded") {
		t.Errorf("the reloads are not logged:\n%s", s.log.String())
	}
}

// TestRLSBlockedIsAlwaysOverLimit: a descriptor of requests_per_unit 0 is
// OVER_LIMIT whatever Redis says or fails to say: beside another
// descriptor while Redis does not answer (failing open, the call was OK),
// and beside a descriptor the deny cache answers (its status was OK).
func TestRLSBlockedIsAlwaysOverLimit(t *testing.T) {
	file := "domain: " + testDomain + "b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n" +
		"  - key: blocked\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"
	blocked := st{over: true, limit: 0, unit: pb.RateLimitResponse_RateLimit_MINUTE}
	t.Run("redis failing open", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		l.Close() // nothing listens there: every call is refused
		client := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { client.Close() })
		s := startRLS(t, map[string]string{"b.yaml": file}, rls.Config{Config: limiter.Config{OnError: limiter.FailOpen, Decider: algorithms.NewDecider(client)}})
		checkResp(t, s.call(t, "b", 0, desc("blocked", "x")), true, blocked)
		resp := s.call(t, "b", 0, desc("user", "u"), desc("blocked", "x"))
		checkResp(t, resp, true, st{limit: 1, unit: pb.RateLimitResponse_RateLimit_MINUTE}, blocked)
	})
	t.Run("deny cache", func(t *testing.T) {
		s := startRLS(t, map[string]string{"b.yaml": file}, rls.Config{Config: limiter.Config{DenyCache: true}})
		u := st{limit: 1, unit: pb.RateLimitResponse_RateLimit_MINUTE}
		checkResp(t, s.call(t, "b", 0, desc("user", "u")), false, u)
		u.over = true
		checkResp(t, s.call(t, "b", 0, desc("user", "u")), true, u)
		checkResp(t, s.call(t, "b", 0, desc("user", "u"), desc("blocked", "x")), true, u, blocked)
		if n := s.metrics.DenyCacheHits(); n != 1 {
			t.Errorf("%d deny cache hits, want the last call's", n)
		}
	})
}

// TestRLSTwoOverridesOfOneDescriptor: two descriptors of one call with the
// same entries and their own limits of 100 and 1 a minute are two limits:
// the second call is over the one of 1 (merged into one counter under the
// first's policy, it was admitted).
func TestRLSTwoOverridesOfOneDescriptor(t *testing.T) {
	t.Parallel()
	file := "domain: " + testDomain + "o\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 50}\n"
	s := startRLS(t, map[string]string{"o.yaml": file}, rls.Config{})
	own := func(n uint32) *rlpb.RateLimitDescriptor {
		d := desc("user", "a")
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	minute := pb.RateLimitResponse_RateLimit_MINUTE
	checkResp(t, s.call(t, "o", 0, own(100), own(1)), false, st{limit: 100, unit: minute, remaining: 99}, st{limit: 1, unit: minute, remaining: 0})
	checkResp(t, s.call(t, "o", 0, own(100), own(1)), true, st{limit: 100, unit: minute, remaining: 99}, st{over: true, limit: 1, unit: minute})
}
