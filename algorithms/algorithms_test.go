package algorithms_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// window is the window of every test whose decisions must not depend on how
// much real time passes: an hour. The scripts decide on the test's clock,
// when it moves one by hand, but Redis expires their keys on its own clock,
// in real time: a window no test lasts keeps every key for the test's whole
// run, however loaded the machine, so that the test's clock alone decides.
// A test that means to step through a short window steps in fractions of
// this one instead.
const window = time.Hour

// alignedStart is a time near 1,700,000,000 s (November 2023) that is a
// whole number of ws since the Unix epoch: where an aligned window begins.
func alignedStart(w time.Duration) time.Time {
	ms := w.Milliseconds()
	return time.UnixMilli(1_700_000_000_000 / ms * ms)
}

// fakeClock is a caller clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newLimiter(t *testing.T, name string, c redis.UniversalClient, p algorithms.Policy, opts ...algorithms.Option) algorithms.Limiter {
	t.Helper()
	l, err := algorithms.New(name, c, p, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return l
}

func allow(t *testing.T, l algorithms.Limiter, key string) algorithms.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := l.Allow(ctx, key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return d
}

// TestLogLimitersUnderFixedClock drives the sliding-log limiters with a
// caller clock that only the test moves, in tenths of the window.
func TestLogLimitersUnderFixedClock(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	tenth := p.Window / 10
	for _, name := range []string{"lua", "multi", "lua-count-denied"} {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(p.Window)}
			l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), name)

			// Five requests a tenth apart are admitted, with remaining counting down.
			for i := range p.Limit {
				d := allow(t, l, key)
				if !d.Allowed || d.Remaining != p.Limit-i-1 || d.RetryAfter != 0 {
					t.Fatalf("request %d: got %+v, want allowed with remaining %d", i+1, d, p.Limit-i-1)
				}
				if name != "multi" && i > 0 && d.Attempts != 1 { // the first may load the script
					t.Fatalf("request %d: %d round trips, want 1", i+1, d.Attempts)
				}
				clock.Add(tenth)
			}
			// At five tenths the sixth is denied: the first request (at 0)
			// frees its slot when it leaves the window, five tenths later.
			// lua-count-denied logged the denial too, so two members must leave.
			wantRetry := 5 * tenth
			if name == "lua-count-denied" {
				wantRetry = 6 * tenth
			}
			d := allow(t, l, key)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter != wantRetry {
				t.Fatalf("sixth request: got %+v, want denied with retry-after %s", d, wantRetry)
			}
			if name == "lua-count-denied" {
				return // every probe below would be logged too: the next test's subject
			}
			// Just before the retry-after it is still denied; at it, admitted.
			clock.Add(d.RetryAfter - time.Millisecond)
			if d := allow(t, l, key); d.Allowed {
				t.Fatalf("1ms before retry-after: admitted, want denied (%+v)", d)
			}
			clock.Add(time.Millisecond)
			if d := allow(t, l, key); !d.Allowed {
				t.Fatalf("at retry-after: denied, want admitted (%+v)", d)
			}
			// A whole window later the log is empty again.
			clock.Add(p.Window)
			if d := allow(t, l, key); !d.Allowed || d.Remaining != p.Limit-1 {
				t.Fatalf("after the window: got %+v, want admitted with remaining %d", d, p.Limit-1)
			}
		})
	}
}

// TestAlgorithmsUnderFixedClock drives each production algorithm with a
// caller clock only the test moves: five requests at one instant are
// admitted, the sixth is denied with a retry-after that is exact (denied 1 ms
// before it, admitted at it), and two quiet windows later the client has its
// whole limit again.
func TestAlgorithmsUnderFixedClock(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	tenth := p.Window / 10
	start := alignedStart(p.Window).Add(3 * tenth) // three tenths into an aligned window
	for _, tc := range []struct {
		name  string
		retry time.Duration
	}{
		{"fixed-window", 7 * tenth},    // the window ends
		{"sliding-log", 10 * tenth},    // the first request leaves the window
		{"sliding-counter", 9 * tenth}, // two tenths into the next window, 5 × 8/10 + 1 <= 5
		{"token-bucket", 2 * tenth},    // one token per window / limit
		{"gcra", 2 * tenth},            // one emission interval
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: start}
			l := newLimiter(t, tc.name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), tc.name)
			for i := range p.Limit {
				if d := allow(t, l, key); !d.Allowed || d.Remaining != p.Limit-i-1 {
					t.Fatalf("request %d: got %+v, want allowed with remaining %d", i+1, d, p.Limit-i-1)
				}
			}
			d := allow(t, l, key)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter != tc.retry {
				t.Fatalf("request %d: got %+v, want denied with retry-after %s", p.Limit+1, d, tc.retry)
			}
			clock.Add(d.RetryAfter - time.Millisecond)
			if d := allow(t, l, key); d.Allowed {
				t.Fatalf("1ms before the retry-after: admitted (%+v)", d)
			}
			clock.Add(time.Millisecond)
			if d := allow(t, l, key); !d.Allowed {
				t.Fatalf("at the retry-after: denied (%+v)", d)
			}
			clock.Add(2 * p.Window)
			if d := allow(t, l, key); !d.Allowed || d.Remaining != p.Limit-1 {
				t.Fatalf("two windows later: got %+v, want allowed with remaining %d", d, p.Limit-1)
			}
		})
	}
}

// TestCountDeniedLocksOutARetryingClient: a client that retries every tenth
// of a window after being limited is let back in by lua after one window, and never by
// lua-count-denied, which logs every retry. On redis-server and on the
// embedded server alike.
func TestCountDeniedLocksOutARetryingClient(t *testing.T) {
	emb, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Stop()
	for _, server := range []*redisrun.Server{srv, emb} {
		if server == nil {
			continue
		}
		c := redistest.Client(t, server)
		p := algorithms.Policy{Limit: 5, Window: window}
		for _, tc := range []struct {
			name    string
			readmit bool
		}{
			{"lua", true},
			{"lua-count-denied", false},
		} {
			t.Run(string(server.Mode)+"/"+tc.name, func(t *testing.T) {
				clock := &fakeClock{now: alignedStart(p.Window)}
				l := newLimiter(t, tc.name, c, p, algorithms.WithNow(clock.Now))
				key := algorithms.Key(redistest.Prefix(t), tc.name)
				for range p.Limit {
					allow(t, l, key)
				}
				readmitted := false
				for range 30 { // three windows of retries, a tenth of a window apart
					clock.Add(p.Window / 10)
					if allow(t, l, key).Allowed {
						readmitted = true
						break
					}
				}
				if readmitted != tc.readmit {
					t.Fatalf("readmitted within three windows = %v, want %v", readmitted, tc.readmit)
				}
			})
		}
	}
}

// TestMultiUnderAdmits shows what the transaction's missing branch costs:
// five denied requests that have run EXEC but not yet their ZREM still sit in
// the log when the window moves on, so a request that finds no admitted
// request in the window is denied. The Lua log admits it.
func TestMultiUnderAdmits(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	p := algorithms.Policy{Limit: 5, Window: window}
	half := p.Window / 2
	clock := &fakeClock{now: alignedStart(p.Window)}
	key := algorithms.Key(redistest.Prefix(t), "multi")

	// A client whose ZREMs wait until the test lets them go.
	held := make(chan struct{}, p.Limit)
	release := make(chan struct{})
	slow := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer slow.Close()
	slow.AddHook(zremGate{held: held, release: release})
	denied := newLimiter(t, "multi", slow, p, algorithms.WithNow(clock.Now))
	fast := newLimiter(t, "multi", c, p, algorithms.WithNow(clock.Now))

	for range p.Limit { // at 0: the window fills
		allow(t, fast, key)
	}
	clock.Add(half) // half a window on: five more are denied, their ZREMs held
	results := make(chan algorithms.Decision, p.Limit)
	for range p.Limit {
		go func() {
			d, _ := denied.Allow(ctx, key)
			results <- d
		}()
	}
	for range p.Limit {
		<-held
	}
	clock.Add(half) // a window on: the first five leave the window
	d := allow(t, fast, key)
	close(release)
	for range p.Limit {
		if d := <-results; d.Allowed {
			t.Errorf("a request half a window on was admitted over a full window")
		}
	}
	if d.Allowed {
		t.Fatalf("multi admitted a window on; the held denials should have filled its count")
	}

	// The same moment through the Lua log: the pending denials were never logged.
	lua := newLimiter(t, "lua", c, p, algorithms.WithNow(clock.Now))
	luaKey := algorithms.Key(redistest.Prefix(t), "lua")
	clock.Add(-2 * half)
	for range p.Limit {
		allow(t, lua, luaKey)
	}
	clock.Add(half)
	for range p.Limit {
		allow(t, lua, luaKey)
	}
	clock.Add(half)
	if d := allow(t, lua, luaKey); !d.Allowed {
		t.Fatalf("lua denied a window on with an empty window: %+v", d)
	}
}

// zremGate holds every ZREM until release is closed, signalling on held.
type zremGate struct {
	held    chan<- struct{}
	release <-chan struct{}
}

func (zremGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g zremGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrem" {
			g.held <- struct{}{}
			<-g.release
		}
		return next(ctx, cmd)
	}
}
func (zremGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSharedMemberNeverLimits: with one member reused, ZADD only moves its
// score, the log never grows past one entry, and every request is admitted.
func TestSharedMemberNeverLimits(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	clock := &fakeClock{now: alignedStart(p.Window)}
	l := newLimiter(t, "lua-shared-member", c, p, algorithms.WithNow(clock.Now))
	key := algorithms.Key(redistest.Prefix(t), "lua-shared-member")
	for i := range 3 * p.Limit {
		if d := allow(t, l, key); !d.Allowed {
			t.Fatalf("request %d denied; the shared member should never fill the log", i+1)
		}
	}
	if n := c.ZCard(context.Background(), key).Val(); n != 1 {
		t.Fatalf("log holds %d members, want 1", n)
	}
}

// TestCounterLimiters: naive and watch admit the limit one by one, deny the
// next with a retry-after within the window, keep the count in a key that
// expires within the window, and admit again once it has expired in Redis.
// Their window is on Redis's clock: an hour's, which no test lasts, so
// that the key lives until the test ends it early.
func TestCounterLimiters(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 3, Window: window}
	for _, name := range []string{"naive", "watch"} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, name, c, p)
			key := algorithms.Key(redistest.Prefix(t), name)
			for i := range p.Limit {
				d := allow(t, l, key)
				if !d.Allowed || d.Remaining != p.Limit-i-1 {
					t.Fatalf("request %d: got %+v, want allowed with remaining %d", i+1, d, p.Limit-i-1)
				}
			}
			d := allow(t, l, key)
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > p.Window {
				t.Fatalf("request %d: got %+v, want denied with 0 < retry-after <= %s", p.Limit+1, d, p.Window)
			}
			if got := c.Get(context.Background(), key).Val(); got != "3" {
				t.Fatalf("counter = %q, want 3", got)
			}
			if ttl := c.PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > p.Window {
				t.Fatalf("the counter expires in %s, want within the %s window", ttl, p.Window)
			}
			// The window ends: the key expires now rather than in an hour.
			if err := c.PExpire(context.Background(), key, time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, c, key, 5*time.Second)
			if d := allow(t, l, key); !d.Allowed {
				t.Fatalf("after the window expired: %+v, want allowed", d)
			}
		})
	}
}

// waitGone polls until key has expired, for at most limit.
func waitGone(t *testing.T, c *redis.Client, key string, limit time.Duration) {
	t.Helper()
	testwait.Eventually(t, limit, func() (bool, string) {
		return c.Exists(context.Background(), key).Val() == 0, key + " still exists"
	})
}

// TestRedisClock: the Lua limiters read TIME inside the script when asked to.
func TestRedisClock(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 2, Window: window}
	stopped := func() time.Time { return time.Unix(0, 0) } // would put every request in 1970
	l := newLimiter(t, "lua", c, p, algorithms.WithClock(algorithms.ClockRedis), algorithms.WithNow(stopped))
	key := algorithms.Key(redistest.Prefix(t), "lua")
	allow(t, l, key)
	allow(t, l, key)
	if d := allow(t, l, key); d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > p.Window {
		t.Fatalf("third request: %+v, want denied with retry-after in (0, %s]", d, p.Window)
	}
	zs := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
	serverNow := c.Time(context.Background()).Val()
	for _, z := range zs {
		if diff := serverNow.Sub(time.UnixMilli(int64(z.Score))); diff < 0 || diff > p.Window {
			t.Fatalf("member scored %v, server time %v: not Redis's clock", z.Score, serverNow)
		}
	}
}

// TestClockGoingBack: callers whose clocks disagree by a window, taking
// turns, get no more than the limit between them: no algorithm lets a
// stale time reopen a window or refill a bucket twice.
func TestClockGoingBack(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 2, Window: window}
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(p.Window).Add(p.Window / 2)}
			l := newLimiter(t, name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), name)
			admitted := 0
			for i := range 12 { // the clock that is ahead goes first
				switch {
				case i%2 == 1:
					clock.Add(-p.Window)
				case i > 0:
					clock.Add(p.Window)
				}
				d := allow(t, l, key)
				if d.Allowed {
					admitted++
				} else if d.RetryAfter <= 0 {
					t.Fatalf("denied with retry-after %s", d.RetryAfter)
				}
			}
			if admitted != int(p.Limit) {
				t.Fatalf("admitted %d of 12 from two clocks a window apart, want %d", admitted, p.Limit)
			}
		})
	}
}

// TestAlgorithmsOnRedisClock: every production algorithm holds its limit
// with the time read inside Redis.
func TestAlgorithmsOnRedisClock(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 3, Window: window}
	stopped := func() time.Time { return time.Unix(0, 0) }
	for _, name := range algorithms.Algorithms() {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, name, c, p, algorithms.WithClock(algorithms.ClockRedis), algorithms.WithNow(stopped))
			key := algorithms.Key(redistest.Prefix(t), name)
			for i := range p.Limit {
				if d := allow(t, l, key); !d.Allowed {
					t.Fatalf("request %d denied: %+v", i+1, d)
				}
			}
			if d := allow(t, l, key); d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*p.Window {
				t.Fatalf("request %d: %+v, want denied with retry-after in (0, %s]", p.Limit+1, d, 2*p.Window)
			}
		})
	}
}

// TestNoScriptFallback: after SCRIPT FLUSH the limiter falls back to EVAL,
// spends the extra round trip, and decides as before.
func TestNoScriptFallback(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	p := algorithms.Policy{Limit: 2, Window: window}
	l := newLimiter(t, "lua", c, p)
	key := algorithms.Key(redistest.Prefix(t), "lua")
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d := allow(t, l, key)
	if !d.Allowed || d.Attempts != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v, want allowed in 2 round trips (EVALSHA, EVAL)", d)
	}
	if d := allow(t, l, key); !d.Allowed || d.Attempts != 1 {
		t.Fatalf("second request: %+v, want allowed in 1 round trip", d)
	}
	if n := c.ZCard(ctx, key).Val(); n != 2 {
		t.Fatalf("log holds %d members, want 2 (no request counted twice)", n)
	}
}

// TestWatchRetriesExhausted: a watch limiter allowed one attempt gives up
// with ErrRetriesExhausted when every attempt is aborted.
func TestWatchRetriesExhausted(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 1000, Window: time.Minute}
	key := algorithms.Key(redistest.Prefix(t), "watch")
	// A hook that changes the key between every WATCH and EXEC.
	c2 := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c2.Close()
	c2.AddHook(interferer{other: c, key: key})
	l := newLimiter(t, "watch", c2, p, algorithms.WithWatchRetries(3))
	d, err := l.Allow(context.Background(), key)
	if !errors.Is(err, algorithms.ErrRetriesExhausted) || d.Allowed || d.Attempts != 9 {
		t.Fatalf("got %+v, %v; want denied after 3 attempts of 3 round trips with ErrRetriesExhausted", d, err)
	}
}

// interferer increments key with another client before every pipelined EXEC.
type interferer struct {
	other *redis.Client
	key   string
}

func (interferer) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (interferer) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h interferer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			h.other.Incr(ctx, h.key)
		}
		return next(ctx, cmds)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    algorithms.Policy
		want string
	}{
		{algorithms.Policy{Limit: 5, Window: time.Second}, ""},
		{algorithms.Policy{Limit: 0, Window: time.Second}, "Limit must be at least 1 (got 0)"},
		{algorithms.Policy{Limit: 5, Window: -time.Second}, "Window must be positive (got -1s)"},
		{algorithms.Policy{Limit: 5, Window: 1500 * time.Microsecond}, "Window must be a whole number of milliseconds (got 1.5ms)"},
		{algorithms.Policy{Limit: 5, Window: time.Second, Burst: 6}, ""},
		{algorithms.Policy{Limit: 5, Window: time.Second, Burst: -1}, "Burst must be at least 1 (got -1)"},
		{algorithms.Policy{Limit: 5, Window: 2 * time.Millisecond, Burst: 1 << 53}, "Burst × Window in ms must be below 2^53 (got 9007199254740992 × 2)"},
	} {
		err := tc.p.Validate()
		if got := errString(err); got != tc.want {
			t.Errorf("Validate(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestParseNames(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"naive,lua", "naive,lua", ""},
		{" lua , lua,naive", "lua,naive", ""},
		{"all", strings.Join(algorithms.Names(), ","), ""},
		{"nope", "", `unknown limiter "nope" (known: fixed-window, gcra, lua, lua-count-denied, lua-shared-member, multi, multi-limit-atomic, multi-limit-sequential, naive, ` +
			`semaphore-incr, semaphore-lease, semaphore-naive, sliding-counter, sliding-log, token-bucket, watch)`},
		{",", "", "no limiter named"},
	} {
		got, err := algorithms.ParseNames(tc.in)
		if strings.Join(got, ",") != tc.want || errString(err) != tc.err {
			t.Errorf("ParseNames(%q) = %q, %q; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestKeyIsClusterSafe(t *testing.T) {
	if got := algorithms.Key("alice", "lua"); got != "rl:{alice}:lua" {
		t.Fatalf("Key = %q", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestFullRedisRefusesBeforeAnyWrite: on a Redis over its maxmemory every
// algorithm's script is refused whole with OOM: no decision, and not one
// write, whether the client had state already or not.
func TestFullRedisRefusesBeforeAnyWrite(t *testing.T) {
	if srv == nil {
		t.Skip("no redis-server on PATH")
	}
	t.Parallel()
	ctx := context.Background()
	full, err := redisrun.Start(ctx, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Stop()
	c := redis.NewClient(&redis.Options{Addr: full.Addr, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second})
	defer c.Close()
	p := algorithms.Policy{Limit: 3, Window: window}
	limiters := map[string]algorithms.Limiter{}
	for _, name := range algorithms.Algorithms() {
		l := newLimiter(t, name, c, p)
		limiters[name] = l
		allow(t, l, algorithms.Key("known", name)) // a client with state
	}
	before := c.DBSize(ctx).Val()
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(ctx, "maxmemory", "0")
	dump := func() string {
		var b strings.Builder
		keys := c.Keys(ctx, "*").Val()
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString(k + "=" + c.Dump(ctx, k).Val() + ";")
		}
		return b.String()
	}
	state := dump()
	for _, name := range algorithms.Algorithms() {
		for _, consumer := range []string{"known", "new"} {
			d, err := limiters[name].Allow(ctx, algorithms.Key(consumer, name))
			if err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("%s, %s client: %+v, %v; want an OOM error", name, consumer, d, err)
			}
		}
	}
	if n := c.DBSize(ctx).Val(); n != before {
		t.Fatalf("%d keys after the refused decisions, %d before", n, before)
	}
	if got := dump(); got != state {
		t.Fatalf("a refused decision wrote: the keys changed from\n%s\nto\n%s", state, got)
	}
}

// TestEmbeddedRunsWithoutShebang: the embedded server cannot compile Redis
// 7's shebang; every algorithm falls back to the script without it, once,
// and decides as on a real server.
func TestEmbeddedRunsWithoutShebang(t *testing.T) {
	t.Parallel()
	m, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	c := redis.NewClient(&redis.Options{Addr: m.Addr})
	defer c.Close()
	p := algorithms.Policy{Limit: 2, Window: window}
	for _, name := range algorithms.Algorithms() {
		l := newLimiter(t, name, c, p)
		if err := l.(algorithms.Loader).Load(context.Background()); err != nil {
			t.Fatalf("%s: load on the embedded server: %v", name, err)
		}
		key := algorithms.Key("embedded", name)
		for i := range p.Limit {
			if d := allow(t, l, key); !d.Allowed || d.Attempts != 1 {
				t.Fatalf("%s: request %d: %+v, want allowed in one round trip", name, i+1, d)
			}
		}
		if d := allow(t, l, key); d.Allowed {
			t.Fatalf("%s: request %d admitted over the limit", name, p.Limit+1)
		}
	}
}
