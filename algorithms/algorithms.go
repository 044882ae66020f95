// Package algorithms holds ratelab's rate limiters: the Limiter interface, the
// Policy they enforce, the Decision they return, and a registry that builds a
// limiter from its name.
//
// It knows nothing of the command line, HTTP or rendering. Every limiter keeps
// its state in Redis under a key built with Key, whose consumer part is a hash
// tag, so that scripts touching several keys of one client never cross slots on
// a Redis Cluster.
package algorithms

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/field"
)

// Policy is the limit a limiter enforces: Limit requests per Window, and
// for the algorithms that have one (token bucket, GCRA) a Burst.
type Policy struct {
	// Limit is the number of requests admitted per Window; at least 1.
	Limit int64
	// Window is the length of the window; a positive whole number of milliseconds.
	Window time.Duration
	// Burst is, for the token bucket and GCRA, the most admitted at one
	// instant: the bucket's capacity, which refills at Limit per Window.
	// Zero means Limit. nginx's limit_req burst=B is a Burst of B + 1;
	// go-redis/redis_rate's and Traefik's burst is this Burst.
	Burst int64
}

// Capacity is the most p admits at one instant under an algorithm with a
// burst: Burst, or Limit when Burst is zero. Under the others it is Limit
// (Burst is refused there: HasBurst).
func (p Policy) Capacity() int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// Validate reports whether p can be enforced. Errors are *field.Error
// naming Limit, Window or Burst.
func (p Policy) Validate() error {
	if p.Limit < 1 {
		return field.Errorf("Limit", "must be at least 1 (got %d)", p.Limit)
	}
	if p.Window <= 0 {
		return field.Errorf("Window", "must be positive (got %s)", p.Window)
	}
	if p.Window%time.Millisecond != 0 {
		return field.Errorf("Window", "must be a whole number of milliseconds (got %s)", p.Window)
	}
	// The scripts multiply the limit and the burst by the window; Lua's
	// numbers are exact below 2^53.
	if p.Limit > (1<<53)/p.windowMillis() {
		return field.Errorf("Limit", "× {Window} in ms must be below 2^53 (got %d × %d)", p.Limit, p.windowMillis())
	}
	if p.Burst < 0 {
		return field.Errorf("Burst", "must be at least 1 (got %d)", p.Burst)
	}
	if p.Burst > (1<<53)/p.windowMillis() {
		return field.Errorf("Burst", "× {Window} in ms must be below 2^53 (got %d × %d)", p.Burst, p.windowMillis())
	}
	return nil
}

// String renders p as ParsePolicy reads it: "5/10s", or "10/1s:burst=6"
// with a burst.
func (p Policy) String() string {
	if p.Burst > 0 {
		return fmt.Sprintf("%d/%s:burst=%d", p.Limit, p.Window, p.Burst)
	}
	return fmt.Sprintf("%d/%s", p.Limit, p.Window)
}

// windowMillis is the window in milliseconds, as the scripts take it.
func (p Policy) windowMillis() int64 { return p.Window.Milliseconds() }

// Decision is the outcome of one Allow call.
type Decision struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Limit is the policy's limit.
	Limit int64
	// Remaining is how many more requests the client may make now.
	Remaining int64
	// RetryAfter is how long a denied client must wait before a request can be
	// admitted; zero when allowed, and when a limiter gave up without knowing
	// (ErrRetriesExhausted).
	RetryAfter time.Duration
	// Reset is how long until the limit is whole again: every request it
	// counts has left it (draft-ietf-httpapi-ratelimit-headers' t). Only a
	// Decider sets it.
	Reset time.Duration
	// Attempts is the number of Redis round trips the decision took (WATCH
	// retries and the NOSCRIPT fallback show here).
	Attempts int
	// Member is the sorted-set member this request wrote to the client's log,
	// for limiters whose state is a log; empty otherwise.
	Member string
	// Skipped is set only by a Decider: the check was never put to Redis
	// (on a Cluster, an earlier call of the decision denied or failed); its
	// Allowed, Remaining and RetryAfter say nothing. False, the zero value,
	// says that it was asked.
	Skipped bool
}

// Limiter decides whether the client behind key may make one more request.
type Limiter interface {
	Allow(ctx context.Context, key string) (Decision, error)
}

// Loader is implemented by limiters that run a script: Load puts it in the
// server's script cache ahead of the first decision, so that no decision pays
// for the NOSCRIPT fallback.
type Loader interface {
	Load(ctx context.Context) error
}

// ErrRetriesExhausted is returned, with a denying Decision, by a limiter that
// gave up after its bounded number of optimistic-locking retries. The request
// was denied because of contention, not because the client was over its limit.
var ErrRetriesExhausted = errors.New("retries exhausted")

// Clock says where a limiter takes the current time from.
type Clock int

const (
	// ClockCaller passes the caller's time (milliseconds) to Redis as an argument.
	ClockCaller Clock = iota
	// ClockRedis has the script read the time with TIME inside Redis.
	ClockRedis
)

// ParseClock parses "caller" or "redis".
func ParseClock(s string) (Clock, error) {
	switch s {
	case "caller":
		return ClockCaller, nil
	case "redis":
		return ClockRedis, nil
	}
	return 0, fmt.Errorf("unknown clock %q (want caller or redis)", s)
}

// Owner names whose clock decides, for a log line: "Redis" or "this host".
func (c Clock) Owner() string {
	if c == ClockRedis {
		return "Redis"
	}
	return "this host"
}

// String returns "caller" or "redis".
func (c Clock) String() string {
	if c == ClockRedis {
		return "redis"
	}
	return "caller"
}

// State is what a limiter keeps in Redis for one client.
type State string

const (
	// StateCounter is a string key holding the number of admitted requests.
	StateCounter State = "counter"
	// StateLog is a sorted set holding one member per logged request.
	StateLog State = "log"
	// StateNone is state that cannot be checked against a count of admissions
	// (windows, buckets, arrival times).
	StateNone State = "none"
)

// Info describes a registered limiter for reports.
type Info struct {
	// Name is the registry name, as given to New.
	Name string
	// Description says in one line what the limiter does.
	Description string
	// Atomic reports whether the check and the update happen as one indivisible step.
	Atomic bool
	// State is what the limiter keeps per client.
	State State
	// RoundTrips is the number of Redis round trips per decision, as text
	// ("1", "2-3", "3 per attempt").
	RoundTrips string
	// Clocks reports whether the limiter honours WithClock(ClockRedis).
	Clocks bool
	// CallerClock reports whether its windows follow the caller's clock
	// (WithNow); naive and watch keep theirs in key expiry, on Redis's clock.
	CallerClock bool
	// Exact reports whether it never admits more than Limit in any span of
	// one Window (a sliding window), and never denies below it.
	Exact bool
	// KeysPerClient is the number of Redis keys one client's state takes.
	KeysPerClient int
	// Algorithm marks the production algorithms that ratelab compare measures.
	Algorithm bool
	// Guarantee is the rule the limiter promises to hold for one client, and
	// by which verdicts judge it. A broken limiter keeps the rule of the one
	// it means to be.
	Guarantee Guarantee
}

// Decides is the clock that decides the limiter's windows when asked to
// take the time from c: the caller's or Redis's for the Lua limiters, always
// the caller's for multi, and always Redis's for naive and watch, whose
// windows are keys' expiry.
func (i Info) Decides(c Clock) Clock {
	switch {
	case !i.CallerClock:
		return ClockRedis
	case !i.Clocks:
		return ClockCaller
	}
	return c
}

// Options tune a limiter built by New.
type Options struct {
	// Clock is where the time comes from; ClockCaller by default. Only the Lua
	// limiters honour ClockRedis.
	Clock Clock
	// Now is the caller's clock; time.Now by default.
	Now func() time.Time
	// WatchRetries bounds the optimistic-locking attempts of the watch
	// limiter; 100 by default.
	WatchRetries int
	// Cluster says that the client reaches a Redis Cluster, where the keys
	// of one script call must share a slot (see DecideOnCluster); false by
	// default. Only the limiters that decide through a Decider read it.
	Cluster bool
}

// Option sets one field of Options.
type Option func(*Options)

// WithClock sets where the time comes from.
func WithClock(c Clock) Option { return func(o *Options) { o.Clock = c } }

// WithNow sets the caller's clock, for tests with a fixed time.
func WithNow(now func() time.Time) Option { return func(o *Options) { o.Now = now } }

// WithWatchRetries bounds the watch limiter's attempts per decision.
func WithWatchRetries(n int) Option { return func(o *Options) { o.WatchRetries = n } }

// WithCluster says whether the client reaches a Redis Cluster.
func WithCluster(cluster bool) Option { return func(o *Options) { o.Cluster = cluster } }

// DefaultWatchRetries is the watch limiter's attempt bound when none is set.
const DefaultWatchRetries = 100

type entry struct {
	info Info
	make func(c redis.UniversalClient, p Policy, o Options) Limiter
}

// scripted makes the constructor of a limiter that runs slidinglog.lua or
// a variant of it.
func scripted(name, src string, mode memberMode) func(redis.UniversalClient, Policy, Options) Limiter {
	return func(c redis.UniversalClient, p Policy, o Options) Limiter {
		return newScripted(name, c, p, o, src, 1, policyArgs(p, mode), parseReply)
	}
}

// decided makes the constructor of the limiter of algorithm name, whose
// state takes keys keys: the script a Decider runs for one limit of it.
func decided(name string, keys int) func(redis.UniversalClient, Policy, Options) Limiter {
	s, src, err := shapeOf([]shapeLimit{{algorithm: name}})
	if err != nil {
		panic(fmt.Sprintf("algorithms: %s: %v", name, err)) // the package's own sources: its tests build every shape
	}
	return func(c redis.UniversalClient, p Policy, o Options) Limiter {
		return newScripted(name, c, p, o, src, keys, shapeArgs(s, p), parseDecided)
	}
}

// registry lists the limiters in the order reports show them. It is built
// once: each algorithm's script is built from its fragments, and every
// command line asks for the list.
var registry = sync.OnceValue(func() []entry {
	return []entry{
		{Info{Name: "naive", Description: "GET the counter, compare, INCR: racy by design",
			Atomic: false, State: StateCounter, RoundTrips: "1-3", KeysPerClient: 1, Guarantee: ExpiryWindows},
			func(c redis.UniversalClient, p Policy, o Options) Limiter { return &Naive{client: c, policy: p} }},
		{Info{Name: "multi", Description: "MULTI/EXEC: log, count, decide after EXEC, ZREM when over",
			Atomic: true, State: StateLog, RoundTrips: "1-2", KeysPerClient: 1, CallerClock: true, Guarantee: SlidingWindow},
			func(c redis.UniversalClient, p Policy, o Options) Limiter { return newMulti(c, p, o) }},
		{Info{Name: "watch", Description: "WATCH/GET/MULTI/INCR/EXEC optimistic locking, bounded retries",
			Atomic: true, State: StateCounter, RoundTrips: "3 per attempt", KeysPerClient: 1, Guarantee: ExpiryWindows},
			func(c redis.UniversalClient, p Policy, o Options) Limiter {
				return &Watch{client: c, policy: p, retries: o.WatchRetries}
			}},
		{Info{Name: "lua", Description: "atomic sliding-window log in one Lua script (sliding-log)",
			Atomic: true, State: StateLog, RoundTrips: "1", Clocks: true, CallerClock: true, Exact: true, KeysPerClient: 1, Guarantee: SlidingWindow},
			scripted("lua", slidingLogSource, memberUnique)},
		{Info{Name: "lua-shared-member", Description: "the Lua log with a reused member: ZADD only moves one score",
			Atomic: true, State: StateLog, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Guarantee: SlidingWindow},
			scripted("lua-shared-member", slidingLogSource, memberShared)},
		{Info{Name: "lua-count-denied", Description: "the Lua log that logs denied requests too: retries lock a client out",
			Atomic: true, State: StateLog, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Guarantee: SlidingWindow},
			scripted("lua-count-denied", countDeniedSource, memberUnique)},
		{Info{Name: "multi-limit-sequential", Description: "2×limit per 10 windows, then the limit: a sliding-log call each, in turn; a denial by the second holds a slot of the first",
			Atomic: false, State: StateNone, RoundTrips: "1-2", Clocks: true, CallerClock: true, KeysPerClient: 2, Guarantee: SlidingWindow},
			func(c redis.UniversalClient, p Policy, o Options) Limiter { return newSequential(c, p, o) }},
		{Info{Name: "multi-limit-atomic", Description: "the same two limits decided in one script call (Decider): consumed only when both admit",
			Atomic: true, State: StateNone, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 2, Guarantee: SlidingWindow},
			func(c redis.UniversalClient, p Policy, o Options) Limiter { return newAtomic(c, p, o) }},
		{Info{Name: "fixed-window", Description: "one counter per aligned window: exact per window, up to 2x across an edge",
			Atomic: true, State: StateNone, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Algorithm: true, Guarantee: AlignedWindows},
			decided("fixed-window", 1)},
		{Info{Name: "sliding-log", Description: "one sorted-set member per admitted request: exact, memory grows with the limit",
			Atomic: true, State: StateLog, RoundTrips: "1", Clocks: true, CallerClock: true, Exact: true, KeysPerClient: 1, Algorithm: true, Guarantee: SlidingWindow},
			decided("sliding-log", 1)},
		{Info{Name: "sliding-counter", Description: "this window's count plus the last one's, weighted: an estimate in two small keys",
			Atomic: true, State: StateNone, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 2, Algorithm: true, Guarantee: WeightedWindows},
			decided("sliding-counter", 2)},
		{Info{Name: "token-bucket", Description: "burst tokens (the limit by default), refilled at limit per window: smooth rate, bursts up to the burst",
			Atomic: true, State: StateNone, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Algorithm: true, Guarantee: BurstRefill},
			decided("token-bucket", 1)},
		{Info{Name: "gcra", Description: "generic cell rate algorithm: one arrival time per client, burst = limit unless given",
			Atomic: true, State: StateNone, RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Algorithm: true, Guarantee: BurstRefill},
			decided("gcra", 1)},
	}
})

// Registered describes every limiter New can build, in report order.
func Registered() []Info {
	es := registry()
	infos := make([]Info, len(es))
	for i, e := range es {
		infos[i] = e.info
	}
	return infos
}

// Algorithms lists the production algorithms, in report order.
func Algorithms() []string {
	var names []string
	for _, e := range registry() {
		if e.info.Algorithm {
			names = append(names, e.info.Name)
		}
	}
	return names
}

// Names lists the registered names, in report order.
func Names() []string {
	es := registry()
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.info.Name
	}
	return names
}

// Lookup returns the description of the limiter called name.
func Lookup(name string) (Info, bool) {
	for _, e := range registry() {
		if e.info.Name == name {
			return e.info, true
		}
	}
	return Info{}, false
}

// UnknownError is returned by New and ParseNames for a name not in the registry.
type UnknownError struct{ Name string }

func (e *UnknownError) Error() string {
	known := append(Names(), SemaphoreNames()...)
	sort.Strings(known)
	return fmt.Sprintf("unknown limiter %q (known: %s)", e.Name, strings.Join(known, ", "))
}

// ParseNames splits a comma-separated list of limiter names, the in-flight
// limiters' (IsSemaphore) included; "all" stands for every registered rate
// limiter. Names are checked and duplicates dropped.
func ParseNames(list string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		expand := []string{n}
		if n == "all" {
			expand = Names()
		} else if _, ok := Lookup(n); !ok && !IsSemaphore(n) {
			return nil, &UnknownError{Name: n}
		}
		for _, e := range expand {
			if !seen[e] {
				seen[e] = true
				names = append(names, e)
			}
		}
	}
	if len(names) == 0 {
		return nil, errors.New("no limiter named")
	}
	return names, nil
}

// New builds the limiter called name on client, enforcing p.
func New(name string, client redis.UniversalClient, p Policy, opts ...Option) (Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := Options{Now: time.Now, WatchRetries: DefaultWatchRetries}
	for _, opt := range opts {
		opt(&o)
	}
	if o.WatchRetries < 1 {
		return nil, fmt.Errorf("watch retries must be at least 1 (got %d)", o.WatchRetries)
	}
	for _, e := range registry() {
		if e.info.Name != name {
			continue
		}
		if p.Burst != 0 && e.info.Guarantee != BurstRefill {
			return nil, field.Errorf("Burst", "is for token-bucket and gcra: %s has none (got burst=%d)", name, p.Burst)
		}
		l := e.make(client, p, o)
		if ls, ok := l.(LimitSet); ok {
			for _, c := range ls.Checks("") {
				if err := c.Policy.Validate(); err != nil {
					return nil, fmt.Errorf("%s: the limit %s: %w", name, c.Policy, err)
				}
			}
		}
		return l, nil
	}
	return nil, &UnknownError{Name: name}
}

// KeysOf lists the Redis keys that hold the state of the client behind key
// in l: key itself, or, for a limiter with several keys, each of them.
func KeysOf(l Limiter, key string) []string {
	if k, ok := l.(interface{ Keys(string) []string }); ok {
		return k.Keys(key)
	}
	return []string{key}
}

// Key is the Redis key of consumer's state in limiter: rl:{consumer}:limiter.
// The braces make the consumer a hash tag, so all of one consumer's keys share
// a Cluster slot.
func Key(consumer, limiter string) string {
	return "rl:{" + consumer + "}:" + limiter
}

// members makes sorted-set members unique across processes and requests: a
// random prefix drawn once per limiter and an atomic counter, never a bare
// timestamp (two requests in one millisecond would share it).
type members struct {
	prefix string
	seq    atomic.Uint64
}

func newMembers() *members {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return &members{prefix: hex.EncodeToString(b)}
}

func (m *members) next() string {
	return m.prefix + "-" + strconv.FormatUint(m.seq.Add(1), 10)
}
