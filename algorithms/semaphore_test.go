package algorithms_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestLeasesAcquireRelease: leases are admitted up to the limit and denied
// past it, with the time until the earliest expires; a release frees its
// slot once however often it is sent, and the release of a lease that is
// not there frees nothing.
func TestLeasesAcquireRelease(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	l := algorithms.NewLeases(c)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	key := algorithms.Key(redistest.Prefix(t), "conc")
	var ids []string
	for i := range 3 {
		id, ok, err := l.Acquire(ctx, key, 3, time.Hour)
		if err != nil || !ok || id == "" || slices.Contains(ids, id) {
			t.Fatalf("acquire %d: %q, %t, %v; want a new lease", i+1, id, ok, err)
		}
		ids = append(ids, id)
	}
	denied, err := l.Take(ctx, key, 3, time.Hour)
	if err != nil || denied.Admitted || denied.ID != "" || denied.Held != 3 {
		t.Fatalf("fourth: %+v, %v; want denied with 3 held", denied, err)
	}
	if denied.RetryAfter <= 0 || denied.RetryAfter > time.Hour {
		t.Errorf("retry-after %s, want until the first lease expires, within the hour", denied.RetryAfter)
	}
	held := func(want int64) {
		t.Helper()
		if n, err := l.Held(ctx, key); err != nil || n != want {
			t.Fatalf("held %d (%v), want %d", n, err, want)
		}
	}
	held(3)
	for range 3 { // a release sent three times frees one slot
		if err := l.Release(ctx, key, ids[0]); err != nil {
			t.Fatal(err)
		}
	}
	held(2)
	if err := l.Release(ctx, key, "never-taken"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	held(2)
	if _, ok, err := l.Acquire(ctx, key, 3, time.Hour); err != nil || !ok {
		t.Fatalf("after a release: %t, %v; want admitted", ok, err)
	}
	if _, ok, err := l.Acquire(ctx, key, 3, time.Hour); err != nil || ok {
		t.Fatalf("at the limit again: %t, %v; want denied", ok, err)
	}
	// The key lives as long as its longest lease, no longer.
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("the key's ttl %s (%v), want within the lease's hour", ttl, err)
	}
}

// TestLeaseSentTwice: the acquire script called twice with one lease id
// (a call resent after its reply was lost) holds one slot, not two.
func TestLeaseSentTwice(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	key := algorithms.Key(redistest.Prefix(t), "conc")
	for i := range 2 {
		v, err := c.Eval(ctx, algorithms.LeaseSource(), []string{key}, 2, 60_000, "same").Int64Slice()
		if err != nil || len(v) != 3 || v[0] != 1 || v[1] != 1 {
			t.Fatalf("call %d: %v, %v; want {1, 1, 0}: admitted, one held", i+1, v, err)
		}
	}
}

// TestLeaseComesBack: a lease never released stops counting once its TTL
// has passed, and its slot is admitted again; the key goes with it.
func TestLeaseComesBack(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	l := algorithms.NewLeases(c)
	key := algorithms.Key(redistest.Prefix(t), "conc")
	const ttl = 200 * time.Millisecond
	if _, ok, err := l.Acquire(ctx, key, 1, ttl); err != nil || !ok {
		t.Fatalf("first: %t, %v", ok, err)
	}
	// Its holder is gone: no release. The slot is back once the lease expires.
	testwait.Eventually(t, time.Minute, func() (bool, string) {
		n, err := l.Held(ctx, key)
		return err == nil && n == 0, "the lease still counts"
	})
	if _, ok, err := l.Acquire(ctx, key, 1, ttl); err != nil || !ok {
		t.Fatalf("after the lease expired: %t, %v; want admitted", ok, err)
	}
	testwait.Eventually(t, time.Minute, func() (bool, string) {
		n, err := c.Exists(ctx, key).Result()
		return err == nil && n == 0, "the key outlived its leases"
	})
}

// TestSemaphoresAdmitTheLimitAtOnce: 50 requests at once at a fresh key of
// the atomic semaphores take exactly the limit's slots; the counters and
// the leases then hold that many, and as many releases free them all.
func TestSemaphoresAdmitTheLimitAtOnce(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	for _, name := range []string{"semaphore-incr", "semaphore-lease"} {
		t.Run(name, func(t *testing.T) {
			sem, err := algorithms.NewSemaphore(name, c, algorithms.SemaphorePolicy{Limit: 5, LeaseTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			key := algorithms.Key(prefix+"-"+name, name)
			var mu sync.Mutex
			var slots []algorithms.Slot
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					s, err := sem.Acquire(ctx, key)
					if err != nil {
						t.Error(err)
						return
					}
					if s.Admitted {
						mu.Lock()
						slots = append(slots, s)
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			if len(slots) != 5 {
				t.Fatalf("%d admitted at once, want 5", len(slots))
			}
			count := func() int64 {
				if name == "semaphore-lease" {
					n, err := algorithms.NewLeases(c).Held(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					return n
				}
				n, err := c.Get(ctx, key).Int64()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
				return n
			}
			if n := count(); n != 5 {
				t.Fatalf("the key holds %d, want 5", n)
			}
			for _, s := range slots {
				if err := sem.Release(ctx, key, s); err != nil {
					t.Fatal(err)
				}
			}
			if n := count(); n != 0 {
				t.Fatalf("after every release the key holds %d, want 0", n)
			}
		})
	}
}

// TestCounterSemaphoresLeak: what the counters do with a lost holder and a
// release sent twice, one request at a time: the lost slot stays taken, and
// the doubled release frees a slot nobody held, so the limit drifts.
func TestCounterSemaphoresLeak(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	for _, name := range []string{"semaphore-naive", "semaphore-incr"} {
		t.Run(name, func(t *testing.T) {
			sem, err := algorithms.NewSemaphore(name, c, algorithms.SemaphorePolicy{Limit: 2, LeaseTTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			key := algorithms.Key(prefix+"-"+name, name)
			acquire := func(want bool) algorithms.Slot {
				t.Helper()
				s, err := sem.Acquire(ctx, key)
				if err != nil || s.Admitted != want {
					t.Fatalf("acquire: %+v, %v; want admitted %t", s, err, want)
				}
				return s
			}
			acquire(true) // its holder dies: never released
			s := acquire(true)
			acquire(false)
			if err := sem.Release(ctx, key, s); err != nil {
				t.Fatal(err)
			}
			// One slot free, one held by nobody: the counter says one.
			if n, err := c.Get(ctx, key).Int64(); err != nil || n != 1 {
				t.Fatalf("counter %d (%v), want the lost holder's 1", n, err)
			}
			s = acquire(true)
			acquire(false) // one request in flight, and denied: the leak
			for range 2 {  // a release resent
				if err := sem.Release(ctx, key, s); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := c.Get(ctx, key).Int64(); err != nil || n != 0 {
				t.Fatalf("counter %d (%v), want 0: the resent release undid the leak's slot", n, err)
			}
		})
	}
}

// TestLeasesOnCluster: each call touches one key, so a Cluster takes the
// leases of any key, the script loaded on every master.
func TestLeasesOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t, srv)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	l := algorithms.NewLeases(c)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	for _, consumer := range []string{"alice", "bob", "carol", "dave"} {
		key := algorithms.Key(prefix+"-"+consumer, "conc")
		id, ok, err := l.Acquire(ctx, key, 1, time.Hour)
		if err != nil || !ok {
			t.Fatalf("%s: %t, %v", consumer, ok, err)
		}
		if _, ok, err := l.Acquire(ctx, key, 1, time.Hour); err != nil || ok {
			t.Fatalf("%s at its limit: %t, %v; want denied", consumer, ok, err)
		}
		if err := l.Release(ctx, key, id); err != nil {
			t.Fatal(err)
		}
		if n, err := l.Held(ctx, key); err != nil || n != 0 {
			t.Fatalf("%s: %d held (%v) after the release", consumer, n, err)
		}
	}
}

// TestSemaphorePolicyErrors: a bad limit or TTL is a field error, before
// anything is sent.
func TestSemaphorePolicyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p     algorithms.SemaphorePolicy
		field string
	}{
		{algorithms.SemaphorePolicy{Limit: 0, LeaseTTL: time.Second}, "Limit"},
		{algorithms.SemaphorePolicy{Limit: 1, LeaseTTL: 0}, "LeaseTTL"},
		{algorithms.SemaphorePolicy{Limit: 1, LeaseTTL: 1500 * time.Microsecond}, "LeaseTTL"},
		{algorithms.SemaphorePolicy{Limit: 1, LeaseTTL: 25 * time.Hour}, "LeaseTTL"},
	} {
		var fe *field.Error
		if err := tc.p.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error of %s", tc.p, err, tc.field)
		}
		// Nothing is sent: the client has no server.
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		l := algorithms.NewLeases(c)
		if _, _, err := l.Acquire(context.Background(), "k", tc.p.Limit, tc.p.LeaseTTL); !errors.As(err, &fe) {
			t.Errorf("%+v: acquire said %v, want the field error", tc.p, err)
		}
		c.Close()
	}
	if _, err := algorithms.NewSemaphore("semaphore-bogus", nil, algorithms.SemaphorePolicy{Limit: 1, LeaseTTL: time.Second}); err == nil {
		t.Error("built an unknown semaphore")
	}
	names, err := algorithms.ParseNames("semaphore-naive,semaphore-lease")
	if err != nil || !slices.Equal(names, []string{"semaphore-naive", "semaphore-lease"}) {
		t.Errorf("ParseNames: %v, %v", names, err)
	}
}
