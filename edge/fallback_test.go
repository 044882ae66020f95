package edge_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
)

// syncBuffer is a log that gateways write from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRedis starts a redis-server of the test's own, stopped when it ends.
func startRedis(t *testing.T) *redisrun.Server {
	t.Helper()
	redistest.Client(t, srv) // skips without redis-server
	r, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// body reads what url answers.
func body(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func hasLimitFields(h http.Header) bool {
	return h.Get("RateLimit") != "" || h.Get("RateLimit-Policy") != "" || h.Get("RateLimit-Limit") != ""
}

// TestFullRedis: every algorithm on a Redis over its maxmemory: the
// decision is refused before any write, fail-closed answers 503 naming
// the full store, fail-open passes without RateLimit fields, the log says
// it once for ten failures, and /healthz reports it.
func TestFullRedis(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	c := client(t, r.Addr, time.Second)
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range algorithms.Algorithms() {
		for _, mode := range []limiter.OnError{limiter.FailClosed, limiter.FailOpen} {
			log := &syncBuffer{}
			g, _ := startGateway(t, r.Addr, setup{limit: 2, algorithm: name, onError: mode, log: log})
			hdr := map[string]string{"X-Consumer-Id": "full"}
			for range 10 {
				resp, text := body(t, "http://"+g.Addr()+"/", hdr)
				want := map[limiter.OnError]int{limiter.FailClosed: 503, limiter.FailOpen: 200}[mode]
				if resp.StatusCode != want || hasLimitFields(resp.Header) {
					t.Fatalf("%s, fail %s: %d with %v, want %d without RateLimit fields", name, mode, resp.StatusCode, resp.Header, want)
				}
				if mode == limiter.FailClosed && !strings.Contains(text, "OOM") {
					t.Fatalf("%s: the 503 says %q, not that the store is full", name, text)
				}
			}
			if n := strings.Count(log.String(), "redis oom:"); n != 1 {
				t.Fatalf("%s, fail %s: %d log lines about the full store for 10 failures, want 1:\n%s", name, mode, n, log)
			}
			if _, text := body(t, "http://"+g.AdminAddr()+"/healthz", nil); !strings.HasPrefix(text, "degraded: ") || !strings.Contains(text, "oom") {
				t.Fatalf("/healthz says %q with Redis full", text)
			}
			if n := g.Metrics().RedisErrors(limiter.RedisErrorOOM); n != 10 {
				t.Fatalf("%d OOM errors counted, want 10", n)
			}
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("the full Redis holds %d keys: a refused decision wrote", n)
	}
}

// TestCircuitBreaker: with Redis hung, the first failures wait the timeout,
// then the circuit opens and requests are answered at once; once Redis
// answers the background probe closes it and limiting resumes.
func TestCircuitBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	r := startRedis(t)
	timeout := 300 * time.Millisecond
	log := &syncBuffer{}
	g, _ := startGateway(t, r.Addr, setup{limit: 1, onError: limiter.FailOpen, timeout: timeout, breaker: 3, log: log})
	url := "http://" + g.Addr() + "/"
	hdr := map[string]string{"X-Consumer-Id": "breaker"}
	if resp, _ := get(t, url, hdr); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	for i := range 13 {
		resp, _ := get(t, url, hdr)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d with Redis hung, fail open: %d", i+1, resp.StatusCode)
		}
	}
	// Only the first request and the three failures asked Redis: with the
	// circuit open the other ten were answered without waiting on it.
	if n := redisCalls(t, g.Metrics()); n != 4 {
		t.Fatalf("%d decisions asked Redis, want 4: the first, and the 3 failures that opened the circuit", n)
	}
	if _, text := body(t, "http://"+g.AdminAddr()+"/healthz", nil); !strings.Contains(text, "circuit open") {
		t.Fatalf("/healthz says %q with the circuit open", text)
	}
	if n := g.Metrics().RedisErrors(limiter.RedisErrorTimeout); n < 3 {
		t.Fatalf("%d timeouts counted, want at least 3", n)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, url, hdr, http.StatusTooManyRequests)
	if _, text := body(t, "http://"+g.AdminAddr()+"/healthz", nil); text != "ok\n" {
		t.Fatalf("/healthz says %q once Redis answers", text)
	}
	if !strings.Contains(log.String(), "circuit open after 3 failures") || !strings.Contains(log.String(), "redis answers again") {
		t.Fatalf("the log does not tell the circuit's story:\n%s", log)
	}
}

// redisCalls reads how many decisions asked Redis: the samples of the
// decision latency histogram, which times only those.
func redisCalls(t *testing.T, m *limiter.Metrics) uint64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "ratelab_edge_decision_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no ratelab_edge_decision_seconds")
	return 0
}

// TestLocalFallback: with Redis gone, a gateway of a two-node fleet limits
// alone to half the limit, and says so without RateLimit fields.
func TestLocalFallback(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	g, _ := startGateway(t, r.Addr, setup{limit: 4, onError: limiter.FailLocal, local: 2})
	r.Stop()
	hdr := map[string]string{"X-Consumer-Id": "local"}
	codes := map[int]int{}
	for range 5 {
		resp, text := body(t, "http://"+g.Addr()+"/", hdr)
		codes[resp.StatusCode]++
		if hasLimitFields(resp.Header) {
			t.Fatalf("a local decision with RateLimit fields: %v", resp.Header)
		}
		if resp.StatusCode == http.StatusTooManyRequests && (resp.Header.Get("Retry-After") == "" || !strings.Contains(text, "share")) {
			t.Fatalf("a local 429 with Retry-After %q: %s", resp.Header.Get("Retry-After"), text)
		}
	}
	if codes[200] != 2 || codes[429] != 3 {
		t.Fatalf("statuses %v with Redis gone, want 2 × 200 (half of 4) and 3 × 429", codes)
	}
	m := g.Metrics()
	if m.Decisions(limiter.OutcomeErrorLocalAllowed) != 2 || m.Decisions(limiter.OutcomeErrorLocalDenied) != 3 {
		t.Fatalf("local decisions: %d allowed, %d denied", m.Decisions(limiter.OutcomeErrorLocalAllowed), m.Decisions(limiter.OutcomeErrorLocalDenied))
	}
}
