package algorithms

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/noreplay"
)

// In-flight limiters (semaphores) bound the requests a client has in flight
// at once, where rate limiters bound the requests per window: a request
// takes a slot when it starts and gives it back when it ends. Three are
// raced: two counters written as most code writes them, and the lease
// semaphore, whose Redis side (Leases) a gateway can use as it is.

//go:embed semaphore_acquire.lua
var leaseSource string

// LeaseSource is the text of semaphore_acquire.lua, the lease semaphore's
// acquire script, for engines that run it themselves.
func LeaseSource() string { return leaseSource }

// SemaphorePolicy is the limit an in-flight limiter enforces.
type SemaphorePolicy struct {
	// Limit is the most requests in flight at once; at least 1.
	Limit int64
	// LeaseTTL is how long a lease lives when its holder never releases
	// it; a positive whole number of milliseconds. Only the lease
	// semaphore reads it: the counters have no expiry.
	LeaseTTL time.Duration
}

// Validate reports whether p can be enforced. Errors are *field.Error
// naming Limit or LeaseTTL.
func (p SemaphorePolicy) Validate() error {
	if p.Limit < 1 {
		return field.Errorf("Limit", "must be at least 1 (got %d)", p.Limit)
	}
	return checkLeaseTTL(p.LeaseTTL)
}

// MaxLeaseTTL bounds a lease's time to live: a day.
const MaxLeaseTTL = 24 * time.Hour

func checkLeaseTTL(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond || ttl > MaxLeaseTTL:
		return field.Errorf("LeaseTTL", "must be between 1ms and %s (got %s)", MaxLeaseTTL, ttl)
	case ttl%time.Millisecond != 0:
		return field.Errorf("LeaseTTL", "must be a whole number of milliseconds (got %s)", ttl)
	}
	return nil
}

// Slot is the outcome of one Semaphore.Acquire.
type Slot struct {
	// Admitted reports whether the request took a slot; an admitted slot is
	// given back with Release when the request ends.
	Admitted bool
	// Lease is the lease id of the lease semaphore's slot; empty for the
	// counters, and when denied.
	Lease string
	// Held is the count the limiter decided on, as Redis answered it: the
	// counter after this request's INCR, the count the naive one read, the
	// live leases after the call.
	Held int64
	// Attempts is the number of Redis round trips the acquire took.
	Attempts int
}

// Semaphore bounds the requests in flight at once for the client behind a
// key.
type Semaphore interface {
	// Acquire asks for a slot at key.
	Acquire(ctx context.Context, key string) (Slot, error)
	// Release gives back an admitted slot once its request ends.
	Release(ctx context.Context, key string, s Slot) error
}

// SemaphoreInfo describes a registered in-flight limiter for reports.
type SemaphoreInfo struct {
	// Name is the registry name, as given to NewSemaphore.
	Name string
	// Description says in one line what it does.
	Description string
	// Atomic reports whether the check and the taking of a slot happen as
	// one indivisible step.
	Atomic bool
	// Expires reports whether a slot whose holder never releases it comes
	// back by itself, after the lease's TTL.
	Expires bool
	// RoundTrips is the number of round trips of an acquire, as text.
	RoundTrips string
}

type semaphoreEntry struct {
	info SemaphoreInfo
	make func(c redis.UniversalClient, p SemaphorePolicy) Semaphore
}

// semaphoreRegistry lists the in-flight limiters in the order reports show them.
func semaphoreRegistry() []semaphoreEntry {
	return []semaphoreEntry{
		{SemaphoreInfo{Name: "semaphore-naive", Description: "GET the counter, compare, INCR; DECR at the end: racy by design, and it leaks",
			RoundTrips: "1-2"},
			func(c redis.UniversalClient, p SemaphorePolicy) Semaphore {
				return &NaiveSemaphore{client: c, limit: p.Limit}
			}},
		{SemaphoreInfo{Name: "semaphore-incr", Description: "INCR, then compare; DECR on a denial and at the end: atomic, but a lost holder leaks its slot",
			Atomic: true, RoundTrips: "1-2"},
			func(c redis.UniversalClient, p SemaphorePolicy) Semaphore {
				return &IncrSemaphore{client: c, limit: p.Limit}
			}},
		{SemaphoreInfo{Name: "semaphore-lease", Description: "a sorted set of leases: drop the expired, count, add, in one script; release by lease id",
			Atomic: true, Expires: true, RoundTrips: "1"},
			func(c redis.UniversalClient, p SemaphorePolicy) Semaphore {
				return &LeaseSemaphore{leases: NewLeases(c), limit: p.Limit, ttl: p.LeaseTTL}
			}},
	}
}

// Semaphores describes every in-flight limiter NewSemaphore can build, in
// report order.
func Semaphores() []SemaphoreInfo {
	var infos []SemaphoreInfo
	for _, e := range semaphoreRegistry() {
		infos = append(infos, e.info)
	}
	return infos
}

// SemaphoreNames lists the in-flight limiters' names, in report order.
func SemaphoreNames() []string {
	var names []string
	for _, e := range semaphoreRegistry() {
		names = append(names, e.info.Name)
	}
	return names
}

// LookupSemaphore returns the description of the in-flight limiter called name.
func LookupSemaphore(name string) (SemaphoreInfo, bool) {
	for _, e := range semaphoreRegistry() {
		if e.info.Name == name {
			return e.info, true
		}
	}
	return SemaphoreInfo{}, false
}

// IsSemaphore reports whether name is an in-flight limiter's.
func IsSemaphore(name string) bool {
	return slices.Contains(SemaphoreNames(), name)
}

// NewSemaphore builds the in-flight limiter called name on client,
// enforcing p.
func NewSemaphore(name string, client redis.UniversalClient, p SemaphorePolicy) (Semaphore, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for _, e := range semaphoreRegistry() {
		if e.info.Name == name {
			return e.make(client, p), nil
		}
	}
	return nil, &UnknownError{Name: name}
}

// once is cmd sent at most once, whatever the client's retries: a DECR
// or an INCR resent after a timeout would count twice.
func once(ctx context.Context, args ...any) noreplay.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(1)
	return noreplay.Cmd{Cmd: cmd}
}

// runOnce sends a command of one key once and reads its integer reply.
func runOnce(ctx context.Context, c scriptClient, args ...any) (int64, error) {
	cmd := once(ctx, args...)
	_ = c.Process(ctx, cmd) // its error is cmd's
	return cmd.Int64()
}

// NaiveSemaphore is the in-flight counter most code starts with: read the
// count, compare it with the limit, INCR it; DECR it when the request ends.
//
// It is racy by design: between the GET and the INCR any number of other
// requests can read the same count, and all be admitted. It leaks too: a
// holder that dies, or whose DECR is lost, keeps its slot forever, and a
// DECR sent twice frees two.
type NaiveSemaphore struct {
	client redis.UniversalClient
	limit  int64
}

var _ Semaphore = (*NaiveSemaphore)(nil)

// Acquire reads the count and, when it is below the limit, increments it.
func (n *NaiveSemaphore) Acquire(ctx context.Context, key string) (Slot, error) {
	s := Slot{Attempts: 1}
	held, err := n.client.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return s, fmt.Errorf("semaphore-naive: get: %w", err)
	}
	s.Held = held
	if held >= n.limit {
		return s, nil
	}
	// The race: another request may have incremented the count since the GET.
	s.Attempts++
	if _, err := runOnce(ctx, n.client, "incr", key); err != nil {
		return s, fmt.Errorf("semaphore-naive: incr: %w", err)
	}
	s.Admitted = true
	return s, nil
}

// Release decrements the count.
func (n *NaiveSemaphore) Release(ctx context.Context, key string, _ Slot) error {
	if _, err := runOnce(ctx, n.client, "decr", key); err != nil {
		return fmt.Errorf("semaphore-naive: decr: %w", err)
	}
	return nil
}

// IncrSemaphore increments the count first and compares after: the INCR
// is the check, so it never admits more than the limit at once. A denied
// request DECRs its INCR back. But a holder that dies, or whose DECR is
// lost, keeps its slot forever, and a DECR sent twice frees two; and while
// a denied request's INCR is counted, before its DECR, it may deny another.
type IncrSemaphore struct {
	client redis.UniversalClient
	limit  int64
}

var _ Semaphore = (*IncrSemaphore)(nil)

// Acquire increments the count and keeps the slot when the count is within
// the limit; otherwise it decrements it again.
func (n *IncrSemaphore) Acquire(ctx context.Context, key string) (Slot, error) {
	s := Slot{Attempts: 1}
	held, err := runOnce(ctx, n.client, "incr", key)
	if err != nil {
		return s, fmt.Errorf("semaphore-incr: incr: %w", err)
	}
	s.Held = held
	if held <= n.limit {
		s.Admitted = true
		return s, nil
	}
	s.Attempts++
	if _, err := runOnce(ctx, n.client, "decr", key); err != nil {
		return s, fmt.Errorf("semaphore-incr: decr: %w", err)
	}
	return s, nil
}

// Release decrements the count.
func (n *IncrSemaphore) Release(ctx context.Context, key string, _ Slot) error {
	if _, err := runOnce(ctx, n.client, "decr", key); err != nil {
		return fmt.Errorf("semaphore-incr: decr: %w", err)
	}
	return nil
}

// LeaseSemaphore is Leases with a limit and a TTL: the race's
// semaphore-lease.
type LeaseSemaphore struct {
	leases *Leases
	limit  int64
	ttl    time.Duration
}

var (
	_ Semaphore = (*LeaseSemaphore)(nil)
	_ Loader    = (*LeaseSemaphore)(nil)
)

// Acquire takes a lease.
func (l *LeaseSemaphore) Acquire(ctx context.Context, key string) (Slot, error) {
	t, err := l.leases.Take(ctx, key, l.limit, l.ttl)
	return Slot{Admitted: t.Admitted, Lease: t.ID, Held: t.Held, Attempts: t.Attempts}, err
}

// Release removes the slot's lease.
func (l *LeaseSemaphore) Release(ctx context.Context, key string, s Slot) error {
	return l.leases.Release(ctx, key, s.Lease)
}

// Load puts the acquire script in the server's script cache.
func (l *LeaseSemaphore) Load(ctx context.Context) error { return l.leases.Load(ctx) }

// Held counts the live leases at key.
func (l *LeaseSemaphore) Held(ctx context.Context, key string) (int64, error) {
	return l.leases.Held(ctx, key)
}

// Leases is the lease semaphore's Redis side, for a gateway: a request
// takes a lease of its client's key with Acquire before it is served and
// gives it back with Release once it ends. A lease whose holder never
// releases it (the process died, the release was lost) expires after its
// TTL, and its slot comes back. Each key is one sorted set, one key per
// call, so a Redis Cluster takes any key; put the client in a hash tag
// (Key) to keep it beside its other keys. The leases' clock is Redis's
// TIME, read inside the script: every gateway reads the same clock.
//
// Acquire runs semaphore_acquire.lua once (EVALSHA, EVAL on NOSCRIPT),
// never sent again once it may have run; Release is one ZREM of the lease
// id, which frees that lease only, however often it is sent.
type Leases struct {
	client scriptClient
	zrem   redis.Cmdable
	script *luaScript
	ids    *members
}

// NewLeases returns the leases kept on c.
func NewLeases(c redis.UniversalClient) *Leases {
	return &Leases{client: c, zrem: c, script: newLuaScript("semaphore-lease", leaseSource), ids: newMembers()}
}

// Lease is the outcome of one Take.
type Lease struct {
	// ID is the lease to give back to Release; empty when denied.
	ID string
	// Admitted reports whether the request took a lease.
	Admitted bool
	// Held counts the live leases after the call, this one included when
	// admitted.
	Held int64
	// RetryAfter is, for a denial, the time until the earliest lease
	// expires; a release may free a slot sooner.
	RetryAfter time.Duration
	// Attempts is the number of round trips the call took.
	Attempts int
}

// Acquire takes a lease of key when fewer than limit are live, for ttl
// (a whole number of milliseconds): it returns the lease id to release
// and whether it was admitted.
func (l *Leases) Acquire(ctx context.Context, key string, limit int64, ttl time.Duration) (string, bool, error) {
	t, err := l.Take(ctx, key, limit, ttl)
	return t.ID, t.Admitted, err
}

// Take is Acquire with all the script said.
func (l *Leases) Take(ctx context.Context, key string, limit int64, ttl time.Duration) (Lease, error) {
	if err := (SemaphorePolicy{Limit: limit, LeaseTTL: ttl}).Validate(); err != nil {
		return Lease{}, err
	}
	id := l.ids.next()
	t, err := l.run(ctx, key, limit, ttl, id)
	if t.Admitted {
		t.ID = id
	}
	return t, err
}

// Held counts the live leases of key: the slots taken and neither
// released nor expired. The expired ones it finds are dropped.
func (l *Leases) Held(ctx context.Context, key string) (int64, error) {
	t, err := l.run(ctx, key, 0, time.Millisecond, "")
	return t.Held, err
}

func (l *Leases) run(ctx context.Context, key string, limit int64, ttl time.Duration, id string) (Lease, error) {
	reply, trips, err := l.script.run(ctx, l.client, []string{key}, limit, ttl.Milliseconds(), id)
	t := Lease{Attempts: trips}
	if err != nil {
		return t, fmt.Errorf("semaphore-lease: eval: %w", err)
	}
	d, err := parseReply(reply)
	if err != nil {
		return t, fmt.Errorf("semaphore-lease: %w", err)
	}
	t.Admitted, t.Held, t.RetryAfter = d.Allowed, d.Remaining, d.RetryAfter
	return t, nil
}

// Release gives back leaseID. Releasing a lease that is gone (released
// already, or expired) frees nothing and is no error; an empty id, a
// denied request's, is not sent.
func (l *Leases) Release(ctx context.Context, key, leaseID string) error {
	if leaseID == "" {
		return nil
	}
	if err := l.zrem.ZRem(ctx, key, leaseID).Err(); err != nil {
		return fmt.Errorf("semaphore-lease: zrem: %w", err)
	}
	return nil
}

// Load puts the acquire script in the server's script cache (on every
// master of a Cluster).
func (l *Leases) Load(ctx context.Context) error { return l.script.load(ctx, l.client) }
