package edge_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// heldUpstream answers a request only once the test lets it go (or its
// client goes away), saying on entered when a request reaches it.
type heldUpstream struct {
	entered chan struct{}
	release chan struct{}
}

func newHeldUpstream() *heldUpstream {
	return &heldUpstream{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.entered <- struct{}{}
	select {
	case <-u.release:
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done():
	}
}

// inFlightGateway serves the middleware, with the limits given and an
// in-flight limit of n per X-Consumer-Id leased for lease, in front of up.
func inFlightGateway(t *testing.T, limits []string, n int64, lease time.Duration, up http.Handler) (string, *edge.Handler, *algorithms.Decider, *rules.Set) {
	t.Helper()
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	set, err := rules.Shorthand{Limits: limits, KeyBy: "header:X-Consumer-Id", InFlight: n, Lease: lease,
		Domain: strings.ReplaceAll(redistest.Prefix(t), ":", "-")}.Set()
	if err != nil {
		t.Fatal(err)
	}
	d := algorithms.NewDecider(client(t, srv.Addr, 5*time.Second))
	h := edge.Middleware(edge.Config{Rules: limiter.FixedRules(set), KeyBy: edge.KeyBy{Header: "X-Consumer-Id"},
		Config: limiter.Config{Decider: d, Timeout: 5 * time.Second}}, up)
	s := httptest.NewServer(h)
	t.Cleanup(func() {
		s.Close()
		h.Close()
	})
	return s.URL, h, d, set
}

// inFlightKey is the Redis key of consumer's in-flight limit in set.
func inFlightKey(t *testing.T, set *rules.Set, consumer string) string {
	t.Helper()
	for _, hit := range set.Match(rules.Request{Method: "GET", Path: "/", Header: http.Header{"X-Consumer-Id": {consumer}}}) {
		if hit.Limit.InFlight {
			return hit.Key
		}
	}
	t.Fatal("no in-flight limit met")
	return ""
}

// wait reads n signals from ch, failing the test when they do not come.
func wait(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: %d of %d", what, i, n)
		}
	}
}

// consumerLoad sends one consumer's requests to an in-flight gateway, each
// from a goroutine of its own, and reads their statuses.
type consumerLoad struct {
	t        *testing.T
	url      string
	consumer string
	n        int64 // the in-flight limit, which a 429's RateLimit-Policy names
	codes    chan int
	wg       sync.WaitGroup
}

func newConsumerLoad(t *testing.T, url, consumer string, n int64) *consumerLoad {
	return &consumerLoad{t: t, url: url, consumer: consumer, n: n, codes: make(chan int, 64)}
}

// send sends one request.
func (l *consumerLoad) send() {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		resp, _, err := fetch(l.url, map[string]string{"X-Consumer-Id": l.consumer})
		if err != nil {
			l.t.Error(err)
			l.codes <- 0
			return
		}
		policy := fmt.Sprintf(`"in-flight";q=%d;qu="concurrent-requests"`, l.n)
		if p := resp.Header.Get("RateLimit-Policy"); resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(p, policy) {
			l.t.Errorf("RateLimit-Policy %q, want %s in it", p, policy)
		}
		l.codes <- resp.StatusCode
	}()
}

// holdAtTheLimit sends n+k requests to the gateway, whose limit is n, in
// front of up, which holds them: n reach up and k get 429; once up lets
// them go, the n end 200.
func (l *consumerLoad) holdAtTheLimit(up *heldUpstream, n, k int) {
	l.t.Helper()
	for range n + k {
		l.send()
	}
	wait(l.t, up.entered, n, "requests reaching the upstream")
	for range k {
		if c := <-l.codes; c != http.StatusTooManyRequests {
			l.t.Fatalf("with %d in flight of %d: %d, want 429", n, n, c)
		}
	}
	close(up.release)
	for range n {
		if c := <-l.codes; c != http.StatusOK {
			l.t.Fatalf("a held request ended %d, want 200", c)
		}
	}
	l.wg.Wait()
}

// admitted sends n requests, which must all be admitted.
func (l *consumerLoad) admitted(n int) {
	l.t.Helper()
	for range n {
		l.send()
	}
	l.wg.Wait()
	for range n {
		if c := <-l.codes; c != http.StatusOK {
			l.t.Fatalf("after the releases: %d, want 200", c)
		}
	}
}

// TestInFlightHoldsAtTheLimit: of N+k concurrent requests of one consumer
// held by the upstream, exactly N reach it and k get 429 naming the
// in-flight limit; once they end, N more are admitted; every slot is
// released exactly once.
func TestInFlightHoldsAtTheLimit(t *testing.T) {
	const n, k = 4, 3
	up := newHeldUpstream()
	url, h, _, _ := inFlightGateway(t, nil, n, time.Hour, up)
	alice := newConsumerLoad(t, url, "alice", n)
	alice.holdAtTheLimit(up, n, k)
	// Every slot is back: N more are admitted (the upstream now answers at once).
	alice.admitted(n)
	if r, f := h.Metrics().Releases("released"), h.Metrics().Releases("failed"); r != 2*n || f != 0 {
		t.Errorf("releases: %d released, %d failed; want %d and 0 (exactly once per admitted request)", r, f, 2*n)
	}
}

// TestInFlightAtomicWithRate: a request refused a slot consumes no rate,
// and a request a rate limit denies takes no slot.
func TestInFlightAtomicWithRate(t *testing.T) {
	up := newHeldUpstream()
	url, _, _, set := inFlightGateway(t, []string{"2/1h"}, 1, time.Hour, up)
	alice := map[string]string{"X-Consumer-Id": "alice"}
	first := make(chan int, 1)
	go func() {
		resp, _, err := fetch(url, alice)
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		first <- resp.StatusCode
	}()
	wait(t, up.entered, 1, "the first request")
	for range 3 { // refused a slot: consumes no rate
		if resp, _ := get(t, url, alice); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a second in flight of 1: %d, want 429", resp.StatusCode)
		}
	}
	close(up.release)
	if c := <-first; c != http.StatusOK {
		t.Fatalf("the held request: %d", c)
	}
	if resp, _ := get(t, url, alice); resp.StatusCode != http.StatusOK {
		t.Fatalf("the rate's second request: %d, want 200 (the refused ones consumed no rate)", resp.StatusCode)
	}
	wait(t, up.entered, 1, "the second request")
	for range 3 { // denied by the rate: takes no slot
		resp, _ := get(t, url, alice)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("over the rate: %d, want 429", resp.StatusCode)
		}
	}
	c := client(t, srv.Addr, 5*time.Second)
	if got, err := c.ZCard(context.Background(), inFlightKey(t, set, "alice")).Result(); err != nil || got != 0 {
		t.Fatalf("leases held after requests denied by the rate: %d (%v), want 0", got, err)
	}
}

// TestInFlightClientGoneReleases: a client that goes away while its
// request is held releases its slot; and a slot a gateway took and never
// released (killed) comes back once its lease runs out.
func TestInFlightClientGoneReleases(t *testing.T) {
	up := newHeldUpstream()
	url, h, d, set := inFlightGateway(t, nil, 1, 500*time.Millisecond, up)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("X-Consumer-Id", "bob")
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	wait(t, up.entered, 1, "the request")
	cancel()
	<-gone
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		n := h.Metrics().Releases("released")
		return n == 1, "releases after the client went away"
	})
	key := inFlightKey(t, set, "bob")
	rc := client(t, srv.Addr, 5*time.Second)
	if got, err := rc.ZCard(context.Background(), key).Result(); err != nil || got != 0 {
		t.Fatalf("leases after the client went away: %d (%v), want 0", got, err)
	}
	// A gateway that took the slot and died: never released.
	check := algorithms.Check{Key: key, Algorithm: algorithms.InFlight, Policy: algorithms.Policy{Limit: 1, Window: 500 * time.Millisecond}, Cost: 1}
	out, err := d.Decide(context.Background(), []algorithms.Check{check})
	if err != nil || !out.Allowed {
		t.Fatalf("taking the slot: %+v %v", out, err)
	}
	close(up.release)
	if resp, _ := get(t, url, map[string]string{"X-Consumer-Id": "bob"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("with the slot held by a dead gateway: %d, want 429", resp.StatusCode)
	}
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		resp, _, err := fetch(url, map[string]string{"X-Consumer-Id": "bob"})
		return err == nil && resp.StatusCode == http.StatusOK, "a request once the dead gateway's lease ran out"
	})
}
