package drill

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/limiter"
	"github.com/redis/go-redis/v9"
)

// The gateways an in-flight drill kills and restarts, and the load that
// holds their slots.

// slotServer is a gateway of one row: edge.Serve for a lease, the counter
// gateway for a counter.
type slotServer struct {
	addr    string
	stop    func() error
	counter *counterGateway
}

// slotGateway serves r's gateway on a free loopback port in front of the
// Redis at addr, until stopped.
func slotGateway(ctx context.Context, cfg InFlightConfig, r inflightRun, addr string) (*slotServer, error) {
	if r.kind == KindCounter {
		return startCounterGateway(ctx, cfg, addr)
	}
	reach := &redis.UniversalOptions{Addrs: []string{addr}, Protocol: 2}
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listen := ln.Addr().String()
		ln.Close()
		o := edge.Options{Engine: r.engine, Listen: listen, Upstream: "builtin", UpstreamDelay: cfg.Hold,
			InFlight: cfg.InFlight, InFlightLease: cfg.Lease, KeyBy: "header:" + consumerHeader,
			OnError: string(limiter.FailClosed), Headers: string(limiter.HeadersBoth), Timeout: 200 * time.Millisecond,
			Pool: 64, Nodes: 1, Clock: algorithms.ClockRedis}
		if err := o.Validate(); err != nil {
			return nil, err
		}
		s, err := serveUntilListening(ctx, listen, func(sctx context.Context) error { return edge.Serve(sctx, o, reach, addr) })
		if err == nil || attempt == 3 || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			return s, err
		}
	}
}

// serveUntilListening runs serve until the returned server is stopped, and
// returns once listen accepts connections.
func serveUntilListening(ctx context.Context, listen string, serve func(context.Context) error) (*slotServer, error) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(sctx) }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			result = <-done
		})
		return result
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return &slotServer{addr: listen, stop: stop}, nil
		}
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("the gateway ended before it listened: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the gateway does not listen on %s after 15 s", listen), stop())
		}
	}
}

// counterGateway admits through a counter semaphore (semaphore-incr): INCR
// when a request comes, DECR when it ends; its upstream holds each request
// for the hold.
type counterGateway struct {
	sem  algorithms.Semaphore
	hold time.Duration
	// mu is held over each INCR and DECR and the change of holders they
	// make, so that a reader under it sees the two agree.
	mu      sync.Mutex
	holders map[string]int64 // by key
}

func startCounterGateway(ctx context.Context, cfg InFlightConfig, addr string) (*slotServer, error) {
	client := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 64})
	sem, err := algorithms.NewSemaphore("semaphore-incr", client, algorithms.SemaphorePolicy{Limit: cfg.InFlight, LeaseTTL: cfg.Lease})
	if err != nil {
		client.Close()
		return nil, err
	}
	cg := &counterGateway{sem: sem, hold: cfg.Hold, holders: map[string]int64{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		client.Close()
		return nil, err
	}
	hs := &http.Server{Handler: cg, ReadHeaderTimeout: 5 * time.Second}
	s, err := serveUntilListening(ctx, ln.Addr().String(), func(sctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- hs.Serve(ln) }()
		<-sctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(sctx), 10*time.Second)
		defer cancel()
		err := hs.Shutdown(shut)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return errors.Join(err, client.Close())
	})
	if err != nil {
		return nil, err
	}
	s.counter = cg
	return s, nil
}

func (cg *counterGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := "inflight:{" + r.Header.Get(consumerHeader) + "}"
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
	cg.mu.Lock()
	slot, err := cg.sem.Acquire(ctx, key)
	if err == nil && slot.Admitted {
		cg.holders[key]++
	}
	cg.mu.Unlock()
	cancel()
	switch {
	case err != nil:
		http.Error(w, "the counter semaphore failed: "+err.Error(), http.StatusServiceUnavailable)
		return
	case !slot.Admitted:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests in flight", http.StatusTooManyRequests)
		return
	}
	timer := time.NewTimer(cg.hold)
	select {
	case <-timer.C:
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done():
		timer.Stop()
	}
	ctx, cancel = context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
	defer cancel()
	cg.mu.Lock()
	// A DECR that did not reach Redis leaves the slot counted and held by
	// no one, as a killed gateway's.
	_ = cg.sem.Release(ctx, key, slot)
	cg.holders[key]--
	cg.mu.Unlock()
}

// holders is the drill's load: per consumer, InFlight workers that each
// keep one request outstanding, again as soon as the last is answered.
type holders struct {
	cfg    InFlightConfig
	client *http.Client
	target atomic.Pointer[string]
	// after is set once the gateway has restarted: answers are counted
	// from then.
	after              atomic.Bool
	admitted, refused  atomic.Int64
	admittedBeforeKill atomic.Int64
}

func newHolders(cfg InFlightConfig) *holders {
	n := cfg.Consumers * int(cfg.InFlight)
	return &holders{cfg: cfg, client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 2 * n, DisableCompression: true}}}
}

// restarted points the load at the restarted gateway.
func (h *holders) restarted(addr *string) {
	h.target.Store(addr)
	h.after.Store(true)
}

// waitAdmitted waits until the first gateway has admitted a request, for
// at most 15 seconds.
func (h *holders) waitAdmitted(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for h.admittedBeforeKill.Load() == 0 {
		if !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return fmt.Errorf("the gateway admitted nothing: %w", ctx.Err())
		}
	}
	return nil
}

// run sends until ctx ends.
func (h *holders) run(ctx context.Context) error {
	defer h.client.CloseIdleConnections()
	var wg sync.WaitGroup
	for c := range h.cfg.Consumers {
		for range h.cfg.InFlight {
			wg.Go(func() { h.worker(ctx, "consumer-"+strconv.Itoa(c)) })
		}
	}
	wg.Wait()
	return nil
}

func (h *holders) worker(ctx context.Context, consumer string) {
	for ctx.Err() == nil {
		after := h.after.Load()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*h.target.Load()+"/", nil)
		if err != nil {
			return
		}
		req.Header.Set(consumerHeader, consumer)
		resp, err := h.client.Do(req)
		if err != nil {
			// The killed gateway, or the end: try again shortly.
			sleepUntil(ctx, time.Now().Add(10*time.Millisecond))
			continue
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300 && after:
			h.admitted.Add(1)
		case resp.StatusCode < 300:
			h.admittedBeforeKill.Add(1)
		case resp.StatusCode == http.StatusTooManyRequests && after:
			h.refused.Add(1)
		}
		if resp.StatusCode >= 300 {
			// A refused slot: ask again a little later, not in a tight loop.
			sleepUntil(ctx, time.Now().Add(10*time.Millisecond))
		}
	}
}
