package edge_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/limiter"
)

// TestMiddlewareCloseStopsTheProbe: a middleware whose circuit opened on a
// hung or stopped Redis asks Redis from a goroutine of its own until it
// answers; Close stops that goroutine and waits for it, so a library user
// who is done with the middleware leaves nothing running, and a request
// after Close opens no circuit again. Not parallel: goleak looks at every
// goroutine of the process.
func TestMiddlewareCloseStopsTheProbe(t *testing.T) {
	// go-redis retries a refused dial from a goroutine that sleeps a second
	// and outlives the client's Close.
	dial := goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
	for _, fault := range []string{"hung", "stopped"} {
		t.Run(fault, func(t *testing.T) {
			r := startRedis(t)
			before := goleak.IgnoreCurrent()
			c := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{r.Addr}, Protocol: 2}, time.Second, 4))
			defer c.Close()
			switch fault {
			case "hung":
				if err := r.Pause(); err != nil {
					t.Fatal(err)
				}
			case "stopped":
				r.Stop()
			}
			m := limiter.NewMetrics()
			// A short timeout: the decision is meant to fail.
			h := edge.Middleware(edge.Config{Rules: oneRule(t, "10/1m"), Config: limiter.Config{
				Decider: algorithms.NewDecider(c, algorithms.DecideClock(algorithms.ClockRedis)), OnError: limiter.FailClosed,
				BreakerFailures: 1, Timeout: 100 * time.Millisecond, Metrics: m}}, http.NotFoundHandler())
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("Redis %s, fail closed: %d, want 503", fault, rec.Code)
			}
			if open := gauge(t, m, "ratelab_edge_circuit_open"); open != 1 {
				t.Fatalf("ratelab_edge_circuit_open is %v after a failure with a breaker of 1: no probe runs", open)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			// Closed, it still decides, in Redis: the circuit stays shut and
			// no prober starts again.
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != http.StatusServiceUnavailable || m.Decisions(limiter.OutcomeErrorClosed) != 2 {
				t.Fatalf("closed, Redis %s: %d, %d fail-closed decisions; want 503 and 2", fault, rec.Code, m.Decisions(limiter.OutcomeErrorClosed))
			}
			if open := gauge(t, m, "ratelab_edge_circuit_open"); open != 0 {
				t.Fatalf("ratelab_edge_circuit_open is %v after Close, want 0", open)
			}
			if calls := redisCalls(t, m); calls != 2 {
				t.Fatalf("%d decisions asked Redis, want 2: the circuit let the one after Close through to Redis", calls)
			}
			goleak.VerifyNone(t, before, dial)
		})
	}
}

// TestGatewayServeWaitsForItsGoroutines: Gateway.Serve returns only once
// the goroutines it started have ended: its servers' (checked at the moment
// it returns, with no grace), and the probe of a circuit that opened on a
// hung Redis; then nothing it started is left. Not parallel: goleak looks at
// every goroutine of the process.
func TestGatewayServeWaitsForItsGoroutines(t *testing.T) {
	dial := goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
	r := startRedis(t)
	before := goleak.IgnoreCurrent()
	c := redis.NewUniversalClient(limiter.RedisOptions(redis.UniversalOptions{Addrs: []string{r.Addr}, Protocol: 2}, time.Second, 4))
	defer c.Close()
	g, err := edge.NewGateway(edge.GatewayConfig{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: "builtin",
		Limit: edge.Config{Rules: oneRule(t, "10/1m"), KeyBy: edge.KeyBy{Header: "X-Consumer-Id"}, Config: limiter.Config{
			Decider: algorithms.NewDecider(c), OnError: limiter.FailClosed, BreakerFailures: 1, Timeout: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx) }()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	for _, url := range []string{"http://" + g.Addr() + "/", "http://" + g.AdminAddr() + "/healthz"} {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if open := gauge(t, g.Metrics(), "ratelab_edge_circuit_open"); open != 1 {
		t.Fatalf("ratelab_edge_circuit_open is %v with Redis hung and a breaker of 1: no probe runs", open)
	}
	hc.CloseIdleConnections()
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if left := goroutinesIn("edge.(*Gateway).Serve"); len(left) > 0 {
		t.Fatalf("Serve returned with %d of its goroutines running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	goleak.VerifyNone(t, before, dial)
}

// goroutinesIn lists the stacks of the goroutines that run a function whose
// name starts with fn.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && !strings.Contains(g, "goroutinesIn") {
			found = append(found, g)
		}
	}
	return found
}

// gauge reads the gauge name from m.
func gauge(t *testing.T, m *limiter.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
