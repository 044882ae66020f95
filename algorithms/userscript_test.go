package algorithms_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// echoArgs stores its ARGV in KEYS[1], as a list, and admits.
const echoArgs = `redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], unpack(ARGV))
return 1`

func newUserScript(t *testing.T, u algorithms.UserScript, p algorithms.Policy, opts ...algorithms.Option) algorithms.Limiter {
	t.Helper()
	c := redistest.Client(t, srv)
	l, err := u.New(c, p, opts...)
	if err != nil {
		t.Fatalf("New(%s): %v", u.Name, err)
	}
	return l
}

// TestUserScriptArgs: the template's placeholders become the policy, the
// caller's time (empty on Redis's clock) and a member unique per request;
// other words pass as they are; the script gets the key as KEYS[1].
func TestUserScriptArgs(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_123)
	p := algorithms.Policy{Limit: 5, Window: 10 * time.Second}
	u := algorithms.UserScript{Name: "echo", Source: echoArgs, Args: "{limit} {window_ms} {now_ms} {member} as-is"}
	for _, tc := range []struct {
		clock   algorithms.Clock
		wantNow string
	}{
		{algorithms.ClockCaller, "1700000000123"},
		{algorithms.ClockRedis, ""},
	} {
		t.Run(tc.clock.String(), func(t *testing.T) {
			l := newUserScript(t, u, p, algorithms.WithClock(tc.clock), algorithms.WithNow(func() time.Time { return now }))
			key := redistest.Prefix(t)
			if ks := algorithms.KeysOf(l, key); !slices.Equal(ks, []string{key}) {
				t.Fatalf("KeysOf = %v, want the key itself", ks)
			}
			var members []string
			for range 2 {
				d := allow(t, l, key)
				if !d.Allowed || d.Limit != 5 || d.Member != "" {
					t.Fatalf("decision %+v: want allowed, limit 5, no member reported", d)
				}
				args, err := c.LRange(ctx, key, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(args) != 5 || args[0] != "5" || args[1] != "10000" || args[2] != tc.wantNow || args[4] != "as-is" {
					t.Fatalf("ARGV %q, want [5 10000 %q <member> as-is]", args, tc.wantNow)
				}
				members = append(members, args[3])
			}
			if members[0] == "" || members[0] == members[1] {
				t.Fatalf("members %q: want a different one per request", members)
			}
		})
	}
	t.Run("one member per request", func(t *testing.T) {
		twice := algorithms.UserScript{Name: "echo", Source: echoArgs, Args: "{member} {member}"}
		key := redistest.Prefix(t)
		allow(t, newUserScript(t, twice, p), key)
		if args := c.LRange(ctx, key, 0, -1).Val(); len(args) != 2 || args[0] == "" || args[0] != args[1] {
			t.Fatalf("ARGV %q, want the request's member twice", args)
		}
	})
}

// TestUserScriptReplies: an integer or an array of up to three integers is
// a decision; anything else is an error naming the script.
func TestUserScriptReplies(t *testing.T) {
	p := algorithms.Policy{Limit: 7, Window: time.Second}
	for _, tc := range []struct {
		reply     string
		allowed   bool
		remaining int64
		retry     time.Duration
		err       string
	}{
		{reply: "1", allowed: true},
		{reply: "0"},
		{reply: "{1}", allowed: true},
		{reply: "{1, 4}", allowed: true, remaining: 4},
		{reply: "{0, 0, 1500}", retry: 1500 * time.Millisecond},
		{reply: "{1, 3, 1500}", allowed: true, remaining: 3}, // retry-after only when denied
		{reply: "{1, 2, 3, 'more'}", allowed: true, remaining: 2},
		{reply: "{}", err: "mine: empty reply: want 1 or 0 first"},
		{reply: "'yes'", err: "mine: reply element 1 is string (yes), want an integer"},
		{reply: "{1, 'x'}", err: "mine: reply element 2 is string (x), want an integer"},
		{reply: "2", err: "mine: reply starts with 2, want 1 (allowed) or 0"},
		{reply: "redis.error_reply('LIMITED nope')", err: "mine: eval: LIMITED nope"},
	} {
		t.Run(tc.reply, func(t *testing.T) {
			u := algorithms.UserScript{Name: "mine", Source: "return " + tc.reply, Args: algorithms.DefaultScriptArgs}
			l := newUserScript(t, u, p)
			d, err := l.Allow(context.Background(), redistest.Prefix(t))
			switch {
			case tc.err != "":
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case d.Allowed != tc.allowed || d.Remaining != tc.remaining || d.RetryAfter != tc.retry || d.Limit != 7:
				t.Fatalf("decision %+v, want allowed %v, remaining %d, retry after %s, limit 7", d, tc.allowed, tc.remaining, tc.retry)
			}
		})
	}
}

// TestUserScriptLoad: Load caches the script, so the first decision is one
// EVALSHA; without it (after SCRIPT FLUSH) the decision falls back to EVAL.
// A script Redis cannot compile fails Load, naming it.
func TestUserScriptLoad(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	p := algorithms.Policy{Limit: 1, Window: time.Minute}
	l := newUserScript(t, algorithms.UserScript{Name: "mine", Source: "return 1", Args: "{now_ms}"}, p)
	loader, ok := l.(algorithms.Loader)
	if !ok {
		t.Fatal("a user script is not a Loader")
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, l, redistest.Prefix(t)); d.Attempts != 2 {
		t.Fatalf("after SCRIPT FLUSH: %d round trips, want 2 (EVALSHA, EVAL)", d.Attempts)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, l, redistest.Prefix(t)); d.Attempts != 1 {
		t.Fatalf("after Load: %d round trips, want 1", d.Attempts)
	}

	bad := newUserScript(t, algorithms.UserScript{Name: "broken", Source: "return (", Args: "{now_ms}"}, p)
	if err := bad.(algorithms.Loader).Load(ctx); err == nil || !strings.HasPrefix(err.Error(), "broken: script load: ") {
		t.Fatalf("Load of a script that does not compile: %v, want an error naming it", err)
	}
}

// TestUserScriptNew: New refuses what Validate refuses, and a bad policy.
func TestUserScriptNew(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 1, Window: time.Second}
	for _, tc := range []struct {
		u    algorithms.UserScript
		p    algorithms.Policy
		want string
	}{
		{algorithms.UserScript{Name: "empty", Source: " \n", Args: "{limit}"}, p, "script empty is empty"},
		{algorithms.UserScript{Name: "x", Source: "return 1", Args: "{limit} {bogus}"}, p, "unknown placeholder {bogus}"},
		{algorithms.UserScript{Name: "x", Source: "return 1", Args: "{limit}"}, algorithms.Policy{Window: time.Second}, "Limit must be at least 1"},
	} {
		if _, err := tc.u.New(c, tc.p); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v, %v) = %v, want %q", tc.u, tc.p, err, tc.want)
		}
	}
}
