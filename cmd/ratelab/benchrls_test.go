package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/envoyref"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// startRLS serves ratelab rls in-process from a directory holding the
// config file src (its domain written in place of DOMAIN), on the test
// package's Redis, with the flags extra, and returns the gRPC address and
// the domain. The service stops when the test ends.
func startRLS(t *testing.T, src string, extra ...string) (addr, domain string) {
	t.Helper()
	redistest.Client(t, srv)
	dir := t.TempDir()
	domain = redistest.Prefix(t)
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(src, "DOMAIN", domain)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, httpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, append([]string{"rls", "--redis", srv.URL(), "--config", dir, "--grpc", addr, "--http", httpAddr,
			"--redis-timeout", "5s"}, extra...), io.Discard, &stderr)
	}()
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() {
		if code := stop(); code != exitOK {
			t.Errorf("rls exited %d: %s", code, stderr.String())
		}
	})
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK, fmt.Sprintf("rls not serving: %v\n%s", err, stderr.String())
	})
	return addr, domain
}

// TestBenchRLSMeasures: bench rls calls ratelab rls and measures every
// call: OK answers as 2xx, OVER_LIMIT as 429, each consumer's descriptor
// its own counter (5 per hour: exactly 5 OK each).
func TestBenchRLSMeasures(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--descriptor", "user={consumer}", "--consumers", "3",
		"--rate", "0", "--connections", "2", "--requests", "60", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Command      string
		Requests     int64
		Errors       int64
		StatusCounts map[string]int64 `json:"status_counts"`
		Config       struct {
			Domain      string
			Descriptors []string
		}
		Histograms map[string]string
	}
	decodeJSON(t, stdout, &res)
	if res.Command != "bench_rls" || res.Requests != 60 || res.Errors != 0 || res.StatusCounts["200"] != 15 || res.StatusCounts["429"] != 45 {
		t.Fatalf("command %q, %d requests, %d errors, statuses %v; want bench_rls, 60, 0, 15 OK and 45 over", res.Command,
			res.Requests, res.Errors, res.StatusCounts)
	}
	if res.Config.Domain != domain || len(res.Config.Descriptors) != 1 || res.Config.Descriptors[0] != "user={consumer}" || res.Histograms["all"] == "" {
		t.Fatalf("config %+v, histograms %d", res.Config, len(res.Histograms))
	}
}

// TestBenchRLSBadFlags: bad input exits 2, naming the flag, before any
// call is made (the address given accepts nothing).
func TestBenchRLSBadFlags(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	base := []string{"bench", "rls", addr, "--requests", "5", "--rate", "0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--descriptor", "user=a"}, "--domain must not be empty"},
		{[]string{"--domain", "d"}, "--descriptor must be given at least once (or --call)"},
		{[]string{"--domain", "d", "--descriptor", "=a"}, `--descriptor "=a": an entry with no key`},
		{[]string{"--domain", "d", "--descriptor", "user={user}"}, "--descriptor user={user}: unknown placeholder {user}"},
		{[]string{"--domain", "d", "--descriptor", `path=/a\x`}, `--descriptor path=/a\x: \x is not an escape: \, is a comma and \\ a backslash`},
		{[]string{"--domain", "d", "--descriptor", `path=/a\`}, `--descriptor path=/a\ ends in a lone backslash: \, is a comma and \\ a backslash`},
		{[]string{"--domain", "d", "--descriptor", "user=a", "--hits-addend", "-1"}, "--hits-addend must be between 0 and"},
		{[]string{"--domain", "d", "--descriptor", "user=a", "--rate", "-5"}, "--rate must be between 0"},
		{[]string{"--domain", "d", "--descriptor", "user=a", "--consumers", "0"}, "--consumers must be at least 1"},
		{[]string{"--domain", "d", "--descriptor", "user=a", "--shard", "2/2"}, "--shard must be I/N"},
		{[]string{"--domain", "d", "--descriptor", "user=a", "--call", "1:user=b"}, "--call and --descriptor are two ways of giving the calls"},
		{[]string{"--domain", "d", "--call", "user=a:3"}, `--call "user=a:3": want WEIGHT:DESCRIPTOR[;DESCRIPTOR…]`},
		{[]string{"--domain", "d", "--call", "0:user=a"}, "--call 0:user=a: the weight must be between 1 and 1000 (got 0)"},
		{[]string{"--domain", "d", "--call", `1:user=a;k=\x`}, `--call 1:user=a;k=\x: k=\x: \x is not an escape`},
		{[]string{"--domain", "d", "--call", "1:user=a", "--call", "2:user={user}"}, "--call user={user}: unknown placeholder {user}"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, stderr, stdout, tc.want)
			}
		})
	}
	code, _, stderr := ratelab(t, "bench", "rls", "localhost", "--domain", "d", "--descriptor", "a=b")
	if code != exitUsage || !strings.Contains(stderr, `ADDR "localhost": want the service's gRPC address, HOST:PORT`) {
		t.Fatalf("no port: exit %d, %q", code, stderr)
	}
	code, _, stderr = ratelab(t, "bench", "rls", "127.0.0.1:180810", "--domain", "d", "--descriptor", "a=b")
	if code != exitUsage || !strings.Contains(stderr, `ADDR "127.0.0.1:180810": the port "180810" is not between 1 and 65535`) {
		t.Fatalf("a port out of range: exit %d, %q", code, stderr)
	}
}

// recordingRLS is a rate limit service that admits every call and keeps
// the descriptors' entries of the first.
type recordingRLS struct {
	pb.UnimplementedRateLimitServiceServer
	mu      sync.Mutex
	entries [][][2]string
}

func (r *recordingRLS) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries == nil {
		r.entries = [][][2]string{}
		for _, d := range req.GetDescriptors() {
			var es [][2]string
			for _, e := range d.GetEntries() {
				es = append(es, [2]string{e.GetKey(), e.GetValue()})
			}
			r.entries = append(r.entries, es)
		}
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// TestBenchRLSDescriptorEscapes: \, in a --descriptor value is a comma of
// the value, and \\ a backslash: the service gets them so, and the result
// writes the descriptors as they were given.
func TestBenchRLSDescriptorEscapes(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingRLS{}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, rec)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	defer func() {
		gs.Stop()
		<-served
	}()
	descriptors := []string{`path=/a\,b`, `dir=C:\\x\,y,user={consumer}`}
	code, stdout, stderr := ratelab(t, "bench", "rls", l.Addr().String(), "--domain", "d", "--descriptor", descriptors[0],
		"--descriptor", descriptors[1], "--rate", "0", "--connections", "1", "--requests", "2", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Config struct{ Descriptors []string }
	}
	decodeJSON(t, stdout, &res)
	want := [][][2]string{{{"path", "/a,b"}}, {{"dir", `C:\x,y`}, {"user", "consumer-0"}}}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !reflect.DeepEqual(rec.entries, want) || !slices.Equal(res.Config.Descriptors, descriptors) {
		t.Fatalf("the service got %q, want %q; the result says %q, want %q", rec.entries, want, res.Config.Descriptors, descriptors)
	}
}

// refusingRLS is a rate limit service that refuses every call with
// InvalidArgument.
type refusingRLS struct {
	pb.UnimplementedRateLimitServiceServer
}

func (refusingRLS) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return nil, status.Error(codes.InvalidArgument, "no such thing")
}

// TestBenchRLSErrors: a service that cannot be reached, or that refuses
// every call with InvalidArgument, gives errors and exit 1, not a
// measurement.
func TestBenchRLSErrors(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, refusingRLS{})
	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	defer func() {
		gs.Stop()
		<-served
	}()
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"unreachable", freeAddr(t), "no request got a response: 4 of 4 failed: refused 4"},
		{"invalid argument", l.Addr().String(), "no request got a response: 4 of 4 failed: protocol 4 (first: rpc error: code = InvalidArgument desc = no such thing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := ratelab(t, "bench", "rls", tc.addr, "--domain", "d", "--descriptor", "user=a", "--rate", "0",
				"--connections", "1", "--requests", "4")
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, tc.want)
			}
		})
	}
}

// rlsAudit is what a test reads of bench rls's JSON audit.
type rlsAudit struct {
	Audit struct {
		Verdict string
		Reasons []string
		Limits  []struct {
			ID         string
			Descriptor string
			Verdict    string
			Admitted   int64
			Denials    int64
			RetryAfter struct {
				Probes  int
				Honest  *bool
				Skipped string
			} `json:"retry_after"`
			Headers struct {
				Checked    int64
				Violations int64
				Example    string
			}
		}
	}
}

// TestBenchRLSAuditHolds: ratelab rls with sliding-log and gcra limits
// passes bench rls's audit, by --expect-limit and by its own configuration
// (--expect-config), one descriptor or two in a call: exit 0, every limit
// held, its statuses consistent; but for app's 9 a minute beside user's
// 6 in one call, which the calls never reach (user's refuses them first):
// not reached, and passed by --allow-untested.
func TestBenchRLSAuditHolds(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: sliding-log}\n" +
		"  - key: app\n    rate_limit: {unit: minute, requests_per_unit: 9, algorithm: gcra}\n"
	addr, domain := startRLS(t, config)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(config, "DOMAIN", domain)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		limits   int
		untested string // the limit never reached
	}{
		{"sliding-log by --expect-limit", []string{"--descriptor", "user=a{consumer}", "--expect-limit", "6/1m:sliding-log"}, 1, ""},
		{"gcra by --expect-limit", []string{"--descriptor", "app=a{consumer}", "--expect-limit", "9/1m:gcra"}, 1, ""},
		// A call refused by one may still spend the other (as envoyproxy/ratelimit
		// counts every descriptor's hits), so user's denials may be app's too:
		// either may go not reached, never leaked.
		{"both by --expect-config", []string{"--descriptor", "user=b{consumer}", "--descriptor", "app=b{consumer}", "--expect-config", dir,
			"--allow-untested", "app,user"}, 2, "app"},
		{"hits-addend 3 by --expect-config", []string{"--descriptor", "user=c{consumer}", "--hits-addend", "3", "--expect-config", dir}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "rls", addr, "--domain", domain, "--consumers", "3", "--rate", "0", "--connections", "4",
				"--requests", "120", "--no-probes", "--fail-on-leak", "-o", "json"}, tc.args...)
			code, stdout, stderr := ratelab(t, args...)
			var res rlsAudit
			decodeJSON(t, stdout, &res)
			if code != exitOK || res.Audit.Verdict != map[bool]string{true: "held", false: "not reached"}[tc.untested == ""] && tc.untested == "" ||
				len(res.Audit.Limits) != tc.limits {
				t.Fatalf("exit %d (%s): %+v", code, stderr, res.Audit)
			}
			for _, l := range res.Audit.Limits {
				want := map[bool]string{true: "held", false: "not reached"}[l.ID != tc.untested]
				if tc.untested != "" && l.Verdict == "not reached" {
					want = "not reached"
				}
				if l.Verdict != want || l.Admitted == 0 || l.Denials == 0 || l.Headers.Checked == 0 || l.Headers.Violations != 0 {
					t.Errorf("limit %+v, want %s", l, want)
				}
			}
		})
	}
}

// TestBenchRLSAuditBurst: ratelab rls with limits whose burst is apart
// from their rate (burst: in its configuration) passes bench rls's audit
// that claims that rate and burst, by --expect-limit and by the
// configuration, remaining counting down from a burst above the limit
// with no header held against it; a claim of a smaller burst than the
// service's is caught (exit 3).
func TestBenchRLSAuditBurst(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n" +
		"  - key: app\n    rate_limit: {unit: minute, requests_per_unit: 9, algorithm: gcra, burst: 4}\n" +
		"  - key: deep\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token-bucket, burst: 8}\n"
	addr, domain := startRLS(t, config)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(config, "DOMAIN", domain)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		admits int64 // each consumer's, at once
	}{
		{"gcra by --expect-limit", []string{"--descriptor", "app=a{consumer}", "--expect-limit", "9/1m:gcra:burst=4"}, exitOK, 4},
		{"token-bucket by --expect-limit", []string{"--descriptor", "deep=a{consumer}", "--expect-limit", "3/1m:token-bucket:burst=8"}, exitOK, 8},
		// Either limit's denials may be the other's (a refused call may spend
		// both): each held or not reached, never leaked.
		{"both by --expect-config", []string{"--descriptor", "app=b{consumer}", "--descriptor", "deep=b{consumer}", "--expect-config", dir,
			"--allow-untested", "app,deep"}, exitOK, 4},
		{"a smaller burst claimed", []string{"--descriptor", "deep=c{consumer}", "--expect-limit", "3/1m:token-bucket:burst=2"}, exitThreshold, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "rls", addr, "--domain", domain, "--consumers", "3", "--rate", "0", "--connections", "4",
				"--requests", "90", "--no-probes", "--fail-on-leak", "-o", "json"}, tc.args...)
			code, stdout, stderr := ratelab(t, args...)
			var res rlsAudit
			decodeJSON(t, stdout, &res)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (%s): %+v", code, tc.code, stderr, res.Audit)
			}
			for _, l := range res.Audit.Limits {
				if l.Admitted < 3*tc.admits || l.Headers.Checked == 0 {
					t.Errorf("limit %+v: want each consumer's burst of %d admitted", l, tc.admits)
				}
				// Claimed smaller, the burst's remaining is above it.
				untested := l.Verdict == "not reached" && strings.Contains(tc.name, "both")
				if tc.code == exitOK && (l.Verdict != "held" && !untested || l.Denials == 0 || l.Headers.Violations != 0) {
					t.Errorf("limit %+v: want held, every header honest", l)
				}
			}
			if tc.code == exitThreshold && (res.Audit.Verdict != "leaked" || !strings.Contains(stderr, "a burst of 2, then 3 per 1m")) {
				t.Fatalf("%s, stderr %q: want leaked against a burst of 2", res.Audit.Verdict, stderr)
			}
		})
	}
}

// TestBenchRLSAuditCatchesLeak: a service that admits twice what it
// claims is caught, by --expect-limit and by a configuration of half its
// limits: exit 3, naming the descriptor. Calls whose descriptors meet no
// limit of the configuration are no verdict, which names the key its
// descriptors begin with and those sent.
func TestBenchRLSAuditCatchesLeak(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: LIMIT, algorithm: sliding-log}\n"
	addr, domain := startRLS(t, strings.ReplaceAll(config, "LIMIT", "12"))
	dir := t.TempDir()
	half := strings.ReplaceAll(strings.ReplaceAll(config, "LIMIT", "6"), "DOMAIN", domain)
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(half), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--expect-limit", []string{"--descriptor", "user=a{consumer}", "--expect-limit", "6/1m:sliding-log"}, "--fail-on-leak: user=a{consumer}: consumer-0 got 12 through"},
		{"--expect-config", []string{"--descriptor", "user=b{consumer}", "--expect-config", dir}, "--fail-on-leak: user: consumer-0 got 12 through"},
		{"no descriptor meets the config", []string{"--descriptor", "app=c{consumer}", "--expect-config", dir},
			fmt.Sprintf("--fail-on-leak: no verdict: no descriptor sent meets a limit of domain %q in %s: its descriptors begin with key user, "+
				"and those sent with app: send one that begins with it, such as --descriptor user={consumer}", domain, filepath.Join(dir, "a.yaml"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "rls", addr, "--domain", domain, "--consumers", "2", "--rate", "0", "--connections", "2",
				"--requests", "60", "--no-probes", "--fail-on-leak"}, tc.args...)
			code, stdout, stderr := ratelab(t, args...)
			leaked := tc.name != "no descriptor meets the config"
			if code != exitThreshold || !strings.Contains(stderr, tc.want) || strings.Contains(stdout, "LEAKED") != leaked {
				t.Fatalf("exit %d, stderr %q; want 3 naming %q\n%s", code, stderr, tc.want, stdout)
			}
		})
	}
}

// TestBenchRLSProbes: duration_until_reset is probed as bench http probes
// Retry-After: a consumer refused is admitted at its first call after the
// reset the service announced (a sliding log of 1s, a fixed window).
func TestBenchRLSProbes(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n"+
		"  - key: user\n    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding-log}\n"+
		"  - key: fixed\n    rate_limit: {unit: second, requests_per_unit: 3}\n")
	for _, d := range []string{"user={consumer}", "fixed={consumer}"} {
		t.Run(d, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--descriptor", d, "--consumers", "2",
				"--rate", "0", "--connections", "2", "--requests", "40", "--expect-limit", "3/1s", "--expect-algorithm",
				map[string]string{"user={consumer}": "sliding-log", "fixed={consumer}": "fixed-window"}[d], "-o", "json")
			var res rlsAudit
			decodeJSON(t, stdout, &res)
			if code != exitOK || len(res.Audit.Limits) != 1 {
				t.Fatalf("exit %d (%s): %+v", code, stderr, res.Audit)
			}
			ra := res.Audit.Limits[0].RetryAfter
			if ra.Probes == 0 || ra.Honest == nil || !*ra.Honest {
				t.Fatalf("probes %+v", ra)
			}
		})
	}
}

// TestBenchRLSShardsMerge: two shards of one bench rls run merge into one
// result that holds both's calls and audits them as one; a result reads
// back as it was written (JSON round trip), and report html draws it.
func TestBenchRLSShardsMerge(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}\n")
	dir := t.TempDir()
	var files []string
	for shard := range 2 {
		code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--descriptor", "user={consumer}", "--consumers", "4",
			"--rate", "0", "--connections", "2", "--requests", "80", "--shard", fmt.Sprintf("%d/2", shard), "--run-id", "rls-shards",
			"--expect-limit", "5/1m:gcra", "--no-probes", "-o", "json")
		if code != exitOK {
			t.Fatalf("shard %d: exit %d: %s", shard, code, stderr)
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.json", shard))
		if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	code, stdout, stderr := ratelab(t, "report", "merge", files[0], files[1], "--fail-on-leak", "-o", "json")
	if code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	var merged struct {
		Command      string
		Requests     int64
		StatusCounts map[string]int64 `json:"status_counts"`
		rlsAudit
	}
	decodeJSON(t, stdout, &merged)
	if merged.Command != "bench_rls" || merged.Requests != 80 || merged.StatusCounts["200"] != 20 || merged.Audit.Verdict != "held" ||
		len(merged.Audit.Limits) != 1 || merged.Audit.Limits[0].Admitted != 20 {
		t.Fatalf("merged: %s, %d calls, %v, audit %+v", merged.Command, merged.Requests, merged.StatusCounts, merged.Audit)
	}
	// A result read back and written again is the same JSON.
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	decodeJSON(t, string(data), &before)
	decodeJSON(t, string(again), &after)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("read back and written again, the result changed:\n%s\n%s", data, again)
	}
	page := filepath.Join(dir, "report.html")
	if code, _, stderr := ratelab(t, "report", "html", files[0], files[1], "--out", page); code != exitOK {
		t.Fatalf("report html: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), "<h2>bench rls</h2>") || !strings.Contains(string(b), `id="rls-throughput"`) ||
		strings.Contains(string(b), "<h2>bench http</h2>") {
		t.Fatalf("the page (%v) draws no bench rls run", err)
	}
}

// TestBenchRLSAuditFlags: the audit's flags are checked before any call.
func TestBenchRLSAuditFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"bench", "rls", freeAddr(t), "--domain", "d", "--descriptor", "user={consumer}", "--requests", "5", "--rate", "0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fail-on-leak"}, "--fail-on-leak needs --expect-limit or --expect-config"},
		{[]string{"--expect-limit", "5"}, "--expect-limit"},
		{[]string{"--expect-limit", "5/1s,6/1m"}, "give one LIMIT/WINDOW"},
		{[]string{"--expect-limit", "5/s:gcra"}, `--expect-limit "5/s:gcra": the window "s" needs a number: a window such as 1s`},
		{[]string{"--expect-limit", "5/1s:fixed-window:burst=8"}, "burst is for token-bucket and gcra: fixed-window has none"},
		{[]string{"--expect-limit", "5/1s:burst=8"}, "a burst is for token-bucket and gcra, and it names no algorithm"},
		{[]string{"--expect-limit", "5/1s", "--expect-algorithm", "magic"}, `--expect-algorithm "magic": want one of`},
		{[]string{"--expect-algorithm", "gcra"}, "--expect-algorithm needs --expect-limit"},
		{[]string{"--expect-limit", "5/1s", "--expect-config", dir}, "--expect-config and --expect-limit are two audits"},
		{[]string{"--expect-config", dir}, `no file of it has domain "d" (it has other)`},
		{[]string{"--expect-config", filepath.Join(dir, "missing")}, "--expect-config: config directory"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// startReference runs envoyproxy/ratelimit's service_cmd (the test is
// skipped without it, as edge's side-by-side test is) on the test
// package's Redis with the config file src (its domain written in place of
// DOMAIN), and returns its gRPC address and the directory of its config.
func startReference(t *testing.T, src string) (addr, dir, domain string) {
	t.Helper()
	bin := envoyref.Bin(t)
	redistest.Client(t, srv)
	domain = redistest.Prefix(t)
	addr, dir = envoyref.Start(t, bin, srv.Addr, map[string]string{"a.yaml": strings.ReplaceAll(src, "DOMAIN", domain)})
	return addr, dir, domain
}

// TestBenchRLSReferenceHolds: envoyproxy/ratelimit, whose fixed windows
// count every descriptor's hits, refused calls included, passes bench
// rls's audit by its own configuration: with one descriptor (its
// duration_until_reset probed), and with two over more than a second,
// where the calls the per-second limit refuses spend the per-minute one,
// which the calls never reach (not reached, passed by --allow-untested).
// A configuration far below its limits catches it (exit 3).
func TestBenchRLSReferenceHolds(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: second, requests_per_unit: 3}\n" +
		"  - key: app\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
	addr, dir, domain := startReference(t, config)
	low := t.TempDir()
	if err := os.WriteFile(filepath.Join(low, "a.yaml"), []byte(strings.ReplaceAll(strings.ReplaceAll(config, "DOMAIN", domain),
		"requests_per_unit: 1000", "requests_per_unit: 40")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"one descriptor", []string{"--descriptor", "user=a{consumer}", "--requests", "120", "--expect-config", dir}, exitOK},
		{"two descriptors", []string{"--descriptor", "user=b{consumer}", "--descriptor", "app=b{consumer}", "--duration", "1500ms",
			"--expect-config", dir, "--no-probes", "--allow-untested", "app"}, exitOK},
		{"far below its limits", []string{"--descriptor", "app=c{consumer}", "--requests", "240", "--expect-config", low, "--no-probes"}, exitThreshold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "rls", addr, "--domain", domain, "--consumers", "2", "--rate", "0", "--connections", "2",
				"--fail-on-leak", "-o", "json"}, tc.args...)
			code, stdout, stderr := ratelab(t, args...)
			var res rlsAudit
			decodeJSON(t, stdout, &res)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (%s): %+v", code, tc.code, stderr, res.Audit)
			}
			if tc.code == exitOK {
				for _, l := range res.Audit.Limits {
					want := map[bool]string{true: "held", false: "not reached"}[l.ID != "app"]
					if l.Verdict != want || l.Headers.Violations != 0 {
						t.Errorf("limit %+v, want %s", l, want)
					}
				}
			}
		})
	}
}

// TestBenchRLSHitsAddendRefills: a bucket refills, and a sliding counter
// weighs, hits, not whole calls: with 5 hits a second and calls of 2, an
// honest token bucket, GCRA or sliding counter admits 2.5 calls a second
// once its burst is spent, not 2 (5/2 rounded down). The audit holds each
// to what it admits in hits and finds it held, by its configuration and by
// --expect-limit.
func TestBenchRLSHitsAddendRefills(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n" +
		"  - key: tb\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token-bucket}\n" +
		"  - key: gcra\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra}\n" +
		"  - key: sc\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding-counter}\n"
	addr, domain := startRLS(t, config)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(config, "DOMAIN", domain)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, alg := range []struct{ key, name string }{{"tb", "token-bucket"}, {"gcra", "gcra"}, {"sc", "sliding-counter"}} {
		for _, audit := range [][]string{{"--expect-config", dir}, {"--expect-limit", "5/1s:" + alg.name}} {
			t.Run(alg.name+" "+audit[0], func(t *testing.T) {
				// Long enough for the refill to outrun 2 calls a second.
				args := append([]string{"bench", "rls", addr, "--domain", domain, "--descriptor", alg.key + "=" + strings.TrimPrefix(audit[0], "--") + "-{consumer}",
					"--consumers", "1", "--hits-addend", "2", "--rate", "0", "--connections", "2", "--duration", "4s", "--no-probes",
					"--fail-on-leak", "-o", "json"}, audit...)
				code, stdout, stderr := ratelab(t, args...)
				var res rlsAudit
				decodeJSON(t, stdout, &res)
				if code != exitOK || res.Audit.Verdict != "held" || len(res.Audit.Limits) != 1 {
					t.Fatalf("exit %d (%s): %+v", code, stderr, res.Audit)
				}
			})
		}
	}
}

// unknownRLS is a broken rate limit service: it admits each consumer's
// first 5 calls and then answers OVER_LIMIT, but every other of those
// denials UNKNOWN, which Envoy lets through as it lets OK through.
type unknownRLS struct {
	pb.UnimplementedRateLimitServiceServer
	mu    sync.Mutex
	calls map[string]int
}

func (u *unknownRLS) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	key := fmt.Sprint(req.GetDescriptors())
	u.calls[key]++
	switch n := u.calls[key]; {
	case n <= 5:
		return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
	case n%2 == 0:
		return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_UNKNOWN}, nil
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT}, nil
}

// TestBenchRLSUnknownIsAdmitted: Envoy refuses a request only when the
// service answers OVER_LIMIT; a service that answers UNKNOWN where it
// should refuse lets the requests through, and is caught leaking.
func TestBenchRLSUnknownIsAdmitted(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, &unknownRLS{calls: map[string]int{}})
	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	defer func() {
		gs.Stop()
		<-served
	}()
	code, stdout, stderr := ratelab(t, "bench", "rls", l.Addr().String(), "--domain", "d", "--descriptor", "user={consumer}",
		"--consumers", "2", "--rate", "0", "--connections", "2", "--requests", "60", "--expect-limit", "5/1h", "--no-probes", "--fail-on-leak")
	if code != exitThreshold || !strings.Contains(stderr, "--fail-on-leak: user={consumer}: consumer-0 got 18 through") {
		t.Fatalf("exit %d, stderr %q; want 3, consumer-0 leaking\n%s", code, stderr, stdout)
	}
}

// TestBenchRLSConsumersFrom: --consumers-from sends its identities where
// {consumer} stands, in place of consumer-0 …: the audit holds ratelab rls
// by them. With --show-identities the result records them, and the
// audit's messages name the consumers by them, when a service admits
// twice what is claimed and when it claims half what is expected; without
// it, nothing the run writes (JSON, the terminal's report, its messages,
// report html's page) holds one: each consumer is named by a pseudonym.
// Shards of one run, with the same file, share a run id and merge, named
// by the same pseudonyms; a run with other identities is another run.
func TestBenchRLSConsumersFrom(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n"+
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: sliding-log}\n"+
		"  - key: big\n    rate_limit: {unit: minute, requests_per_unit: 12, algorithm: sliding-log}\n")
	dir := t.TempDir()
	ids := []string{"tenant-alpha", "tenant-beta", "tenant-gamma"}
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("# tenants\ntenant-alpha\n\ntenant-beta\ntenant-gamma\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	others := filepath.Join(dir, "others")
	if err := os.WriteFile(others, []byte("tenant-alpha\ntenant-beta\ntenant-delta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	named := func(name string) bool { return slices.Contains(ids, name) }
	base := []string{"bench", "rls", addr, "--domain", domain, "--consumers-from", keys, "--show-identities", "--rate", "0", "--connections", "2",
		"--no-probes", "--fail-on-leak"}
	hidden := func(t *testing.T, where, text string) {
		t.Helper()
		if strings.Contains(text, "tenant-") {
			t.Fatalf("%s shows an identity:\n%s", where, text)
		}
	}

	t.Run("holds", func(t *testing.T) {
		code, stdout, stderr := ratelab(t, append(base, "--descriptor", "user=a-{consumer}", "--requests", "90",
			"--expect-limit", "6/1m:sliding-log", "-o", "json")...)
		var res struct {
			Config struct{ Identities []string }
			Audit  struct {
				Verdict string
				Limits  []struct {
					Verdict        string
					Admitted       int64
					WorstConsumer  string                      `json:"worst_consumer"`
					WorstConsumers []struct{ Consumer string } `json:"worst_consumers"`
				}
			}
		}
		decodeJSON(t, stdout, &res)
		if code != exitOK || res.Audit.Verdict != "held" || len(res.Audit.Limits) != 1 || !slices.Equal(res.Config.Identities, ids) {
			t.Fatalf("exit %d (%s): identities %q, %+v", code, stderr, res.Config.Identities, res.Audit)
		}
		l := res.Audit.Limits[0]
		if l.Admitted != 18 || !named(l.WorstConsumer) || len(l.WorstConsumers) != 3 {
			t.Fatalf("limit %+v: want 18 admitted, 6 of each identity, named by it", l)
		}
		for _, c := range l.WorstConsumers {
			if !named(c.Consumer) {
				t.Errorf("consumer %q: not an identity of the file", c.Consumer)
			}
		}
	})

	for _, tc := range []struct {
		name, descriptor, expect, want string
	}{
		{"admits twice the limit claimed", "big=b-{consumer}", "6/1m:sliding-log", "--fail-on-leak: big=b-{consumer}: tenant-"},
		{"claims twice the real limit", "user=c-{consumer}", "12/1m:sliding-log", "--fail-on-leak: user=c-{consumer}: 60 answers with wrong current_limit or limit_remaining (tenant-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append(base, "--descriptor", tc.descriptor, "--requests", "60", "--expect-limit", tc.expect)...)
			if code != exitThreshold || !strings.Contains(stderr, tc.want) || !slices.ContainsFunc(ids, func(id string) bool {
				return strings.Contains(stderr, id)
			}) || strings.Contains(stderr+stdout, "consumer-") {
				t.Fatalf("exit %d, stderr %q; want 3, %q, naming an identity of the file, not consumer-N\n%s", code, stderr, tc.want, stdout)
			}
		})
	}

	t.Run("hidden", func(t *testing.T) {
		args := []string{"bench", "rls", addr, "--domain", domain, "--consumers-from", keys, "--rate", "0", "--connections", "2",
			"--no-probes", "--fail-on-leak", "--descriptor", "big=h-{consumer}", "--requests", "60", "--expect-limit", "6/1m:sliding-log"}
		code, stdout, stderr := ratelab(t, args...)
		if code != exitThreshold || !strings.Contains(stderr, "--fail-on-leak: big=h-{consumer}: id-") {
			t.Fatalf("exit %d, stderr %q; want 3, naming a pseudonym\n%s", code, stderr, stdout)
		}
		hidden(t, "the terminal", stdout+stderr)
		code, stdout, stderr = ratelab(t, append(args, "--descriptor", "user=h2-{consumer}", "-o", "json")...)
		if code != exitThreshold {
			t.Fatalf("exit %d (%s)", code, stderr)
		}
		hidden(t, "the JSON", stdout+stderr)
		var res struct {
			Config struct {
				Identities []string
				Pseudonyms string
			}
		}
		decodeJSON(t, stdout, &res)
		if len(res.Config.Identities) != 3 || !strings.HasPrefix(res.Config.Identities[0], "id-") || !strings.HasPrefix(res.Config.Pseudonyms, "hmac-sha256:") {
			t.Fatalf("identities %q (%s): want pseudonyms", res.Config.Identities, res.Config.Pseudonyms)
		}
		dir := t.TempDir()
		file, page := filepath.Join(dir, "run.json"), filepath.Join(dir, "report.html")
		if err := os.WriteFile(file, []byte(stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := ratelab(t, "report", "html", file, "--out", page); code != exitOK {
			t.Fatalf("report html: exit %d: %s", code, stderr)
		}
		b, err := os.ReadFile(page)
		if err != nil || !strings.Contains(string(b), res.Config.Identities[0]) {
			t.Fatalf("the page (%v) names no consumer by its pseudonym", err)
		}
		hidden(t, "the page", string(b))
	})

	t.Run("shards merge", func(t *testing.T) {
		var files []string
		// A consumer's calls 100 ms apart, so that the merge, which widens
		// every flight by the clock tolerance, still sees its denials follow
		// its sixth admission.
		run := func(name, file string, shard int) {
			code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--consumers-from", file, "--descriptor", "user=d-{consumer}",
				"--rate", "40", "--connections", "2", "--requests", "60", "--shard", fmt.Sprintf("%d/2", shard), "--expect-limit", "6/1m:sliding-log",
				"--no-probes", "-o", "json")
			if code != exitOK {
				t.Fatalf("%s: exit %d: %s", name, code, stderr)
			}
			path := filepath.Join(t.TempDir(), name+".json")
			if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, path)
		}
		run("0", keys, 0)
		run("1", keys, 1)
		run("other", others, 1)
		code, stdout, stderr := ratelab(t, "report", "merge", files[0], files[1], "--fail-on-leak", "-o", "json")
		var merged struct {
			RunID  string `json:"run_id"`
			Config struct{ Identities []string }
			Audit  struct {
				Verdict string
				Limits  []struct {
					Admitted       int64
					WorstConsumers []struct{ Consumer string } `json:"worst_consumers"`
				}
			}
		}
		decodeJSON(t, stdout, &merged)
		var shard struct{ Config struct{ Identities []string } }
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		decodeJSON(t, string(b), &shard)
		pseudonyms := shard.Config.Identities
		if code != exitOK || merged.Audit.Verdict != "held" || len(pseudonyms) != 3 || !slices.Equal(merged.Config.Identities, pseudonyms) ||
			len(merged.Audit.Limits) != 1 || merged.Audit.Limits[0].Admitted != 18 || strings.HasPrefix(merged.RunID, "merged-") {
			t.Fatalf("merge: exit %d (%s): run %q, identities %q (shard 0's %q), %+v", code, stderr, merged.RunID, merged.Config.Identities,
				pseudonyms, merged.Audit)
		}
		hidden(t, "the merge", stdout+stderr)
		for _, c := range merged.Audit.Limits[0].WorstConsumers {
			if !slices.Contains(pseudonyms, c.Consumer) {
				t.Errorf("merged consumer %q: not a pseudonym of the shards", c.Consumer)
			}
		}
		code, _, stderr = ratelab(t, "report", "merge", files[0], files[2], "-o", "json")
		if code != exitUsage || !strings.Contains(stderr, "not shards of one run") {
			t.Fatalf("merge of other identities: exit %d, %q; want 2, not shards of one run", code, stderr)
		}
	})
}

// TestBenchRLSConsumersFromRefused: a file of identities that cannot be
// sent as asked is refused before any call, exit 2, naming the flag (the
// address given accepts nothing).
func TestBenchRLSConsumersFromRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keys := file("keys", "key-a\nkey-b\n# retired\nkey-c\n")
	repeated := file("repeated", "key-a\nkey-b\nkey-a\n")
	empty := file("empty", "# none yet\n\n")
	base := []string{"bench", "rls", freeAddr(t), "--domain", "d", "--requests", "5", "--rate", "0"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a line repeated", []string{"--descriptor", "user={consumer}", "--consumers-from", repeated},
			"--consumers-from " + repeated + ": line 3 repeats the identity of line 1"},
		{"--consumers another count", []string{"--descriptor", "user={consumer}", "--consumers-from", keys, "--consumers", "5"},
			"--consumers 5 conflicts with --consumers-from, which holds 3 identities"},
		{"an empty file", []string{"--descriptor", "user={consumer}", "--consumers-from", empty},
			"--consumers-from " + empty + ": no identity in it"},
		{"no file", []string{"--descriptor", "user={consumer}", "--consumers-from", filepath.Join(dir, "none")}, "--consumers-from: open "},
		{"no {consumer}", []string{"--descriptor", "user=all", "--consumers-from", keys},
			"--consumers-from names the consumers where {consumer} stands, and no value of --descriptor holds it"},
		{"identities shown, none given", []string{"--descriptor", "user={consumer}", "--consumers", "2", "--show-identities"},
			"--show-identities shows the identities of --consumers-from, which is not given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, stderr, stdout, tc.want)
			}
		})
	}
	// --consumers equal to the count is no conflict.
	code, _, stderr := ratelab(t, append(base, "--descriptor", "user={consumer}", "--consumers-from", keys, "--consumers", "3")...)
	if code == exitUsage {
		t.Fatalf("--consumers 3 with 3 identities: exit 2: %s", stderr)
	}
}

// TestBenchRLSLiteralBrace: {{consumer} in a descriptor's value is the
// text {consumer}, as the template reads it, not the placeholder: every
// consumer sends that one value, on one counter (5 admitted in all), the
// result says no descriptor carries an identity, and the probes, which
// would spend that counter for every consumer at once, are not made.
func TestBenchRLSLiteralBrace(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--descriptor", "user={{consumer}", "--consumers", "3",
		"--rate", "0", "--connections", "2", "--requests", "30", "--expect-limit", "5/1h", "-o", "json")
	var res struct {
		rlsAudit
		StatusCounts map[string]int64 `json:"status_counts"`
		Config       struct {
			IdentityIn []string `json:"identity_in"`
		}
	}
	decodeJSON(t, stdout, &res)
	if code != exitOK || res.StatusCounts["200"] != 5 || len(res.Audit.Limits) != 1 {
		t.Fatalf("exit %d (%s): statuses %v, %+v; want 5 admitted on the one counter", code, stderr, res.StatusCounts, res.Audit)
	}
	if ra := res.Audit.Limits[0].RetryAfter; len(res.Config.IdentityIn) != 0 || ra.Probes != 0 ||
		!strings.Contains(ra.Skipped, "descriptor user={{consumer} is every consumer's") {
		t.Fatalf("identity in %q, probes %+v: want none, and the probes skipped for the shared descriptor", res.Config.IdentityIn, ra)
	}
}

// TestBenchRLSSpeaksRLS: bench rls's report and its --fail-on-leak
// messages speak of duration_until_reset, statuses and answers, never of
// HTTP's Retry-After and rate-limit headers: here a service of 5 calls a
// day per consumer, claimed as 3 (caught: exit 3), whose
// duration_until_reset is too long to probe. (An hour's window, aligned to
// the clock's hours, ends within the 70 s a probe waits in one run of 50.)
func TestBenchRLSSpeaksRLS(t *testing.T) {
	t.Parallel()
	addr, domain := startRLS(t, "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--descriptor", "user={consumer}", "--consumers", "2",
		"--rate", "0", "--connections", "2", "--requests", "20", "--expect-limit", "3/24h:fixed-window", "--fail-on-leak")
	for _, want := range []string{"duration_until_reset: not probed (duration_until_reset above 70 s: too long to wait for)",
		"Statuses: 20 answers checked, 20 violations", "20 answers with wrong current_limit or limit_remaining (consumer-"} {
		if !strings.Contains(stdout+stderr, want) {
			t.Errorf("no %q", want)
		}
	}
	if code != exitThreshold || strings.Contains(stdout+stderr, "Retry-After") || strings.Contains(stdout+stderr, "header") {
		t.Fatalf("exit %d; want 3, and no HTTP words:\n%s\n%s", code, stdout, stderr)
	}
}

// TestBenchRLSMix: --call mixes kinds of call by weight. Two sets, 1:3,
// against ratelab rls, where each set meets a limit of its own: the calls
// of each set follow the weights exactly (each consumer's calls are whole
// rounds of the schedule), the audit judges each call by the set it sent,
// a correct service is held, and one whose /search limit is twice its
// configuration's is caught (exit 3) on that limit alone.
func TestBenchRLSMix(t *testing.T) {
	t.Parallel()
	const config = "domain: DOMAIN\ndescriptors:\n" +
		"  - key: path\n    value: /search\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: SEARCH, algorithm: sliding-log}\n" +
		"  - key: path\n    value: /items\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 9, algorithm: sliding-log}\n"
	for _, tc := range []struct {
		name    string
		served  string // the service's /search limit; the configuration audited by says 3
		code    int
		verdict [2]string
	}{
		{"held", "3", exitOK, [2]string{"held", "held"}},
		{"twice the claim", "6", exitThreshold, [2]string{"leaked", "held"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, domain := startRLS(t, strings.ReplaceAll(config, "SEARCH", tc.served))
			dir := t.TempDir()
			claim := strings.ReplaceAll(strings.ReplaceAll(config, "SEARCH", "3"), "DOMAIN", domain)
			if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(claim), 0o644); err != nil {
				t.Fatal(err)
			}
			sets := []string{"1:path=/search,user={consumer}", "3:path=/items,user={consumer}"}
			code, stdout, stderr := ratelab(t, "bench", "rls", addr, "--domain", domain, "--call", sets[0], "--call", sets[1],
				"--consumers", "2", "--rate", "0", "--connections", "2", "--requests", "80", "--expect-config", dir, "--no-probes",
				"--fail-on-leak", "-o", "json")
			var res struct {
				StatusCounts map[string]int64 `json:"status_counts"`
				Config       struct {
					Descriptors    []string
					DescriptorSets []string `json:"descriptor_sets"`
				}
				Audit struct {
					Verdict string
					Limits  []struct {
						Descriptor string
						Verdict    string
						Requests   int64
						Admitted   int64
						Headers    struct{ Violations int64 }
					}
				}
			}
			decodeJSON(t, stdout, &res)
			if code != tc.code || len(res.Audit.Limits) != 2 {
				t.Fatalf("exit %d (%s), audit %+v; want exit %d over 2 limits", code, stderr, res.Audit, tc.code)
			}
			// 40 calls a consumer: 10 rounds of the schedule, 10 of /search
			// and 30 of /items each.
			search, items := res.Audit.Limits[0], res.Audit.Limits[1]
			if !strings.Contains(search.Descriptor, "/search") || search.Requests != 20 || items.Requests != 60 {
				t.Fatalf("limits %+v: want /search met by 20 calls, /items by 60", res.Audit.Limits)
			}
			admitted := map[string]int64{"3": 6, "6": 12}[tc.served]
			if search.Admitted != admitted || items.Admitted != 18 || res.StatusCounts["200"] != admitted+18 {
				t.Fatalf("admitted %d of /search and %d of /items (statuses %v), want %d and 18", search.Admitted, items.Admitted,
					res.StatusCounts, admitted)
			}
			// A service of twice the limit also advertises it: its headers
			// are wrong for /search alone.
			if search.Verdict != tc.verdict[0] || items.Verdict != tc.verdict[1] || (search.Headers.Violations == 0) != (tc.code == exitOK) ||
				items.Headers.Violations != 0 {
				t.Fatalf("verdicts %s and %s, headers %+v and %+v; want %v", search.Verdict, items.Verdict, search.Headers, items.Headers, tc.verdict)
			}
			if tc.code == exitThreshold && !strings.Contains(stderr, "consumer-0 got 6 through") {
				t.Fatalf("stderr %q: want the leak of /search named", stderr)
			}
			if !slices.Equal(res.Config.DescriptorSets, sets) || len(res.Config.Descriptors) != 0 {
				t.Fatalf("config %+v: want the sets as given", res.Config)
			}
		})
	}
}
