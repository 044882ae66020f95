package algorithms_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/batch"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestNoCallRunsTwice: through a proxy that cuts a connection once a
// script has run on it, when its reply comes back, a client that retries
// (go-redis's MaxRetries 3) would send the call again on a new connection,
// and the call would be counted twice. A decision fails instead, and is
// counted once: decided alone, through a batcher's pipeline, or by a
// limiter. Only the connection open when the cut begins is cut: the
// client's next dial lifts it.
func TestNoCallRunsTwice(t *testing.T) {
	direct := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	now := alignedStart(window).Add(window / 2)
	clock := func() time.Time { return now }
	check := func(key string) []algorithms.Check {
		return []algorithms.Check{{Key: key, Algorithm: "fixed-window", Policy: p, Cost: 1}}
	}
	for _, tc := range []struct {
		name string
		// build returns a decision of key on c, its script loaded.
		build func(t *testing.T, c redis.UniversalClient) func(ctx context.Context, key string) error
	}{
		{"a decision", func(t *testing.T, c redis.UniversalClient) func(context.Context, string) error {
			return decider(t, algorithms.NewDecider(c, algorithms.DecideNow(clock)), check)
		}},
		{"a batched decision", func(t *testing.T, c redis.UniversalClient) func(context.Context, string) error {
			b := batch.New(c, batch.Options{})
			t.Cleanup(func() { b.Close() })
			return decider(t, algorithms.NewDecider(b.Wrap(c), algorithms.DecideNow(clock)), check)
		}},
		{"a limiter", func(t *testing.T, c redis.UniversalClient) func(context.Context, string) error {
			l := newLimiter(t, "fixed-window", c, p, algorithms.WithNow(clock))
			return func(ctx context.Context, key string) error {
				_, err := l.Allow(ctx, key)
				return err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := cuttingProxy(t)
			c := redis.NewClient(&redis.Options{Addr: proxy.Listen, Protocol: 2, PoolSize: 1, MaxRetries: 3,
				DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
			t.Cleanup(func() { c.Close() })
			c.AddHook(healOnDial{proxy})
			decide := tc.build(t, c)
			prefix := redistest.Prefix(t)
			key := algorithms.Key(prefix+"alice", "fw")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// First decisions open the connection the next is sent on (the
			// first of a shape, its script new to the server, goes out
			// as EVAL, the second the way the cut one will).
			for range 2 {
				if err := decide(ctx, algorithms.Key(prefix+"bob", "fw")); err != nil {
					t.Fatal(err)
				}
			}
			cut(t, proxy)
			if err := decide(ctx, key); err == nil {
				t.Error("the decision whose reply was cut succeeded: it was sent again")
			}
			if n, err := direct.HGet(ctx, key, "n").Int(); err != nil || n != 1 {
				t.Errorf("the decision was counted %d times (%v), want once", n, err)
			}
		})
	}
}

// decider loads d's script and returns a decision of checks(key) by d.
func decider(t *testing.T, d *algorithms.Decider, checks func(key string) []algorithms.Check) func(context.Context, string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, key string) error {
		_, err := d.Decide(ctx, checks(key))
		return err
	}
}

// cuttingProxy is an in-process toxiproxy in front of the package's
// server, stopped when t ends.
func cuttingProxy(t *testing.T) *toxiproxy.Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "redis", "127.0.0.1:0", srv.Addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	return proxy
}

// cut makes proxy close every connection when its next reply comes back,
// which it withholds. healOnDial lifts it.
func cut(t *testing.T, proxy *toxiproxy.Proxy) {
	t.Helper()
	toxic := `{"name":"cut","type":"limit_data","stream":"downstream","attributes":{"bytes":0}}`
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		t.Fatal(err)
	}
}

// healOnDial is a client's hook that lifts the proxy's cut before the
// client dials a new connection: a call sent again would reach Redis.
type healOnDial struct{ proxy *toxiproxy.Proxy }

func (h healOnDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		_ = h.proxy.Toxics.RemoveToxic(ctx, "cut") // an error: no cut to lift
		return next(ctx, network, addr)
	}
}

func (healOnDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (healOnDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
