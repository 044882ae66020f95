package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/limiter"
)

// fakeDecider answers every Decide with decide, and counts the calls: the
// core's own logic, around what Redis would say. (What Redis says is tested
// on a real server by the front doors' tests.)
type fakeDecider struct {
	calls  atomic.Int64
	decide func(checks []algorithms.Check) (algorithms.Outcome, error)
}

func (f *fakeDecider) Decide(_ context.Context, checks []algorithms.Check) (algorithms.Outcome, error) {
	f.calls.Add(1)
	return f.decide(checks)
}

// admitting admits every check, each with half its limit remaining.
func admitting(checks []algorithms.Check) (algorithms.Outcome, error) {
	out := algorithms.Outcome{Allowed: true, Checks: make([]algorithms.Decision, len(checks))}
	for i, c := range checks {
		out.Checks[i] = algorithms.Decision{Allowed: true, Limit: c.Policy.Limit, Remaining: c.Policy.Limit / 2}
	}
	return out, nil
}

func check(key string, limit int64, window time.Duration, cost int64) algorithms.Check {
	return algorithms.Check{Key: algorithms.Key(key, "x"), Algorithm: "fixed-window",
		Policy: algorithms.Policy{Limit: limit, Window: window}, Cost: cost}
}

// TestInvalidNeverReachesTheBreaker: a plan whose check no script can count
// (a caller's limit of 300000 a year: limit × window in ms over 2^53) is
// answered OutcomeInvalid without a call to Redis, however many arrive:
// the circuit never opens, and the next valid plan is decided in Redis.
// Counted as a Redis failure, five such calls opened the circuit and,
// failing open, let every client through unlimited.
func TestInvalidNeverReachesTheBreaker(t *testing.T) {
	d := &fakeDecider{decide: admitting}
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: d, BreakerFailures: 2, Metrics: m, OnError: limiter.FailOpen})
	defer l.Close()
	bad := limiter.Plan{Domain: "d", Limits: []limiter.Limit{{ID: "override",
		Check: check("a", 300000, 365*24*time.Hour, 1)}}}
	for range 10 {
		if a := l.Decide(context.Background(), bad); a.Outcome != limiter.OutcomeInvalid || a.Err == nil || a.Allowed() {
			t.Fatalf("an uncountable limit: %+v, want %s, refused", a, limiter.OutcomeInvalid)
		}
	}
	if n := d.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached Redis, want none", n)
	}
	if n := m.RedisErrors(limiter.RedisErrorOther); n != 0 {
		t.Fatalf("%d Redis errors counted, want none", n)
	}
	good := limiter.Plan{Domain: "d", Limits: []limiter.Limit{{ID: "l", Check: check("b", 5, time.Second, 1)}}}
	if a := l.Decide(context.Background(), good); a.Outcome != limiter.OutcomeAllowed || d.calls.Load() != 1 {
		t.Fatalf("then a valid plan: %s after %d calls, want allowed by Redis", a.Outcome, d.calls.Load())
	}
}

// TestSkippedIsNotDenied: a limit the Decider never asked (a later Cluster
// call, once an earlier one denied) is not decided: not counted as denied,
// and shown admitting in the RateLimit fields; the request is denied by the
// limit that denied.
func TestSkippedIsNotDenied(t *testing.T) {
	d := &fakeDecider{decide: func(checks []algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{Checks: []algorithms.Decision{
			{Limit: 5, RetryAfter: time.Second},
			{Limit: 1000, Skipped: true},
		}}, nil
	}}
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: d, Metrics: m})
	defer l.Close()
	p := limiter.Plan{Domain: "d", Limits: []limiter.Limit{
		{ID: "per-consumer", Check: check("c", 5, time.Minute, 1)},
		{ID: "global", Check: check("g", 1000, time.Minute, 1)},
	}}
	a := l.Decide(context.Background(), p)
	if a.Outcome != limiter.OutcomeDenied || !a.Limits[0].Decided || a.Limits[0].Allowed || a.Limits[1].Decided {
		t.Fatalf("answer %+v: want denied by per-consumer, global not decided", a)
	}
	for id, want := range map[string]string{"per-consumer": limiter.LimitDenied, "global": limiter.LimitNotDecided} {
		if n := m.LimitDecisions("d", id, want); n != 1 {
			t.Errorf("%s counted %d %s, want 1", id, n, want)
		}
	}
	if n := m.LimitDecisions("d", "global", limiter.LimitDenied); n != 0 {
		t.Errorf("global counted denied %d times, want 0", n)
	}
	states := a.States(p)
	if len(states) != 2 || states[0].Allowed || !states[1].Allowed {
		t.Fatalf("states %+v: want per-consumer refusing, global admitting", states)
	}
}

// TestChecksOfAPlan: limits of one counter share one check, their takes
// added; a request over any limit (a limit of 0, or more taken than a
// limit, alone or added up) takes nothing of any: every check only asks,
// and the request is denied by the limit it is over.
func TestChecksOfAPlan(t *testing.T) {
	shared := check("s", 5, time.Minute, 3)
	for _, tc := range []struct {
		name   string
		limits []limiter.Limit
		costs  []int64 // the checks Redis is asked, by cost
		denied []bool  // per limit: refused
	}{
		{"two limits of one counter add their takes", []limiter.Limit{{ID: "a", Check: shared}, {ID: "b", Check: check("s", 5, time.Minute, 2)}},
			[]int64{5}, []bool{false, false}},
		{"added up, over the limit", []limiter.Limit{{ID: "a", Check: shared}, {ID: "b", Check: shared}, {ID: "c", Check: check("o", 9, time.Minute, 1)}},
			[]int64{0, 0}, []bool{true, true, false}},
		{"a limit of 0 blocks, the others only ask", []limiter.Limit{{ID: "z", Blocks: true, Check: check("z", 0, time.Minute, 1)}, {ID: "o", Check: check("o", 9, time.Minute, 1)}},
			[]int64{0}, []bool{true, false}},
		{"an unlimited limit asks nothing", []limiter.Limit{{ID: "u", Unlimited: true}, {ID: "o", Check: check("o", 9, time.Minute, 1)}},
			[]int64{1}, []bool{false, false}},
		{"over a shadow limit: counted, never denies", []limiter.Limit{{ID: "s", Check: algorithms.Check{Key: "k", Algorithm: "gcra",
			Policy: algorithms.Policy{Limit: 1, Window: time.Second}, Cost: 2, Shadow: true}}, {ID: "o", Check: check("o", 9, time.Minute, 1)}},
			[]int64{0, 1}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []int64
			d := &fakeDecider{decide: func(checks []algorithms.Check) (algorithms.Outcome, error) {
				for _, c := range checks {
					asked = append(asked, c.Cost)
				}
				return admitting(checks)
			}}
			l := limiter.New(limiter.Config{Decider: d})
			defer l.Close()
			a := l.Decide(context.Background(), limiter.Plan{Limits: tc.limits})
			if fmt.Sprint(asked) != fmt.Sprint(tc.costs) {
				t.Fatalf("Redis asked checks of costs %v, want %v", asked, tc.costs)
			}
			denied := false
			for i, want := range tc.denied {
				if got := !a.Limits[i].Allowed; got != want {
					t.Errorf("limit %s refused %v, want %v", tc.limits[i].ID, got, want)
				}
				denied = denied || want && !tc.limits[i].Check.Shadow
			}
			if a.Allowed() == denied {
				t.Fatalf("outcome %s, want denied %v", a.Outcome, denied)
			}
		})
	}
}

// TestDenyCacheKeying: a refusal is remembered for its counter and its
// policy, and for at least the take refused: a request of the same counter
// and policy is answered from memory; one that takes less, or meets the
// counter under another policy (a reload changed the limit), goes to Redis.
func TestDenyCacheKeying(t *testing.T) {
	refuse := true
	d := &fakeDecider{decide: func(checks []algorithms.Check) (algorithms.Outcome, error) {
		if !refuse {
			return admitting(checks)
		}
		return algorithms.Outcome{Checks: []algorithms.Decision{{Limit: checks[0].Policy.Limit, RetryAfter: time.Minute}}}, nil
	}}
	now := time.Unix(1_700_000_000, 0)
	l := limiter.New(limiter.Config{Decider: d, DenyCache: true, Now: func() time.Time { return now }})
	defer l.Close()
	plan := func(limit, cost int64) limiter.Plan {
		return limiter.Plan{Limits: []limiter.Limit{{ID: "l", Check: check("k", limit, time.Minute, cost)}}}
	}
	if a := l.Decide(context.Background(), plan(5, 2)); a.Outcome != limiter.OutcomeDenied {
		t.Fatalf("first: %s, want denied by Redis", a.Outcome)
	}
	refuse = false
	for _, tc := range []struct {
		limit, cost int64
		want        string
	}{
		{5, 2, limiter.OutcomeDenyCache},
		{5, 3, limiter.OutcomeDenyCache},
		{5, 1, limiter.OutcomeAllowed}, // takes less: may be admitted
		{6, 2, limiter.OutcomeAllowed}, // another policy of the counter
	} {
		if a := l.Decide(context.Background(), plan(tc.limit, tc.cost)); a.Outcome != tc.want {
			t.Errorf("limit %d, take %d: %s, want %s", tc.limit, tc.cost, a.Outcome, tc.want)
		}
	}
	now = now.Add(time.Minute)
	if a := l.Decide(context.Background(), plan(5, 2)); a.Outcome != limiter.OutcomeAllowed {
		t.Fatalf("after the retry-after: %s, want Redis's answer", a.Outcome)
	}
}

// TestFailModes: Redis failing, each mode answers as it says; a caller gone
// before the answer is canceled, not Redis's failure.
func TestFailModes(t *testing.T) {
	failing := &fakeDecider{decide: func([]algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{}, errors.New("ERR something broke")
	}}
	p := limiter.Plan{Limits: []limiter.Limit{{ID: "l", Check: check("k", 5, time.Second, 1)}}}
	for mode, want := range map[limiter.OnError]string{limiter.FailOpen: limiter.OutcomeErrorOpen, limiter.FailClosed: limiter.OutcomeErrorClosed,
		limiter.FailLocal: limiter.OutcomeErrorOpen /* no local limiter */} {
		m := limiter.NewMetrics()
		l := limiter.New(limiter.Config{Decider: failing, OnError: mode, Metrics: m})
		a := l.Decide(context.Background(), p)
		l.Close()
		if a.Outcome != want || a.Cause != limiter.RedisErrorOther || a.Err == nil || m.RedisErrors(limiter.RedisErrorOther) != 1 {
			t.Errorf("%s: %+v, want %s after one Redis error", mode, a, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := &fakeDecider{decide: func([]algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{}, context.Canceled
	}}
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: canceled, BreakerFailures: 1, Metrics: m})
	defer l.Close()
	if a := l.Decide(ctx, p); a.Outcome != limiter.OutcomeCanceled || m.RedisErrors(limiter.RedisErrorTimeout)+m.RedisErrors(limiter.RedisErrorOther) != 0 {
		t.Fatalf("a caller gone: %+v, want canceled and no Redis error", a)
	}
}

// failing is a Decider whose every call fails, as a Redis that is down.
func failing() *fakeDecider {
	return &fakeDecider{decide: func([]algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{}, errors.New("ERR something broke")
	}}
}

// TestOverWhateverRedisHolds: a request over a limit whatever Redis holds
// (a limit of 0, or more taken than the limit) is denied by it while Redis
// fails too, in every fail mode: Redis was asked only what the other limits
// hold. Alone, a blocked descriptor never reaches Redis and is refused; with
// another descriptor beside it, failing open let the call through.
func TestOverWhateverRedisHolds(t *testing.T) {
	local, err := limiter.NewLocalLimiter(1)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for _, tc := range []struct {
		name   string
		limits []limiter.Limit
	}{
		{"a limit of 0", []limiter.Limit{{ID: "blocked", Blocks: true, Check: check("z", 0, time.Minute, 1)}, {ID: "o", Check: check("o", 9, time.Minute, 1)}}},
		{"more taken than the limit", []limiter.Limit{{ID: "small", Check: check("s", 5, time.Minute, 6)}, {ID: "o", Check: check("o", 9, time.Minute, 1)}}},
	} {
		for _, mode := range []limiter.OnError{limiter.FailOpen, limiter.FailLocal, limiter.FailClosed} {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				m := limiter.NewMetrics()
				l := limiter.New(limiter.Config{Decider: failing(), OnError: mode, Local: local, Metrics: m})
				defer l.Close()
				p := limiter.Plan{Domain: "d", Limits: tc.limits}
				a := l.Decide(context.Background(), p)
				if a.Allowed() || !a.Limits[0].Decided || a.Limits[0].Allowed {
					t.Fatalf("answer %+v: want refused by %s", a, tc.limits[0].ID)
				}
				if a.Outcome != limiter.OutcomeDenied {
					t.Errorf("outcome %s, want %s: the limit refuses whatever Redis holds", a.Outcome, limiter.OutcomeDenied)
				}
				if n := m.LimitDecisions("d", tc.limits[0].ID, limiter.LimitDenied); n != 1 {
					t.Errorf("%s counted denied %d times, want 1", tc.limits[0].ID, n)
				}
				if n := m.RedisErrors(limiter.RedisErrorOther); n != 1 {
					t.Errorf("%d Redis errors counted, want the one", n)
				}
			})
		}
	}
}

// TestDenyCacheKeepsWhatIsKnown: a request the deny cache answers is still
// refused by a limit it is over whatever Redis holds (a limit of 0), and
// admitted by an unlimited one: the cache changes no limit's answer but
// the one it holds. (rls: the blocked descriptor's status stays
// OVER_LIMIT.)
func TestDenyCacheKeepsWhatIsKnown(t *testing.T) {
	d := &fakeDecider{decide: func(checks []algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{Checks: []algorithms.Decision{{Limit: checks[0].Policy.Limit, RetryAfter: time.Minute}}}, nil
	}}
	now := time.Unix(1_700_000_000, 0)
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: d, DenyCache: true, Metrics: m, Now: func() time.Time { return now }})
	defer l.Close()
	refused := limiter.Limit{ID: "k", Check: check("k", 5, time.Minute, 1)}
	if a := l.Decide(context.Background(), limiter.Plan{Domain: "d", Limits: []limiter.Limit{refused}}); a.Outcome != limiter.OutcomeDenied {
		t.Fatalf("first: %s, want denied by Redis", a.Outcome)
	}
	p := limiter.Plan{Domain: "d", Limits: []limiter.Limit{
		{ID: "blocked", Blocks: true, Check: check("z", 0, time.Minute, 1)},
		{ID: "vip", Unlimited: true},
		refused,
	}}
	a := l.Decide(context.Background(), p)
	if a.Outcome != limiter.OutcomeDenyCache || d.calls.Load() != 1 {
		t.Fatalf("second: %s after %d calls, want %s without Redis", a.Outcome, d.calls.Load(), limiter.OutcomeDenyCache)
	}
	if r := a.Limits[0]; !r.Decided || r.Allowed {
		t.Errorf("the limit of 0: %+v, want decided, refusing", r)
	}
	if r := a.Limits[1]; !r.Decided || !r.Allowed {
		t.Errorf("the unlimited limit: %+v, want decided, admitting", r)
	}
	for id, want := range map[string]string{"blocked": limiter.LimitDenied, "vip": limiter.LimitAllowed, "k": limiter.LimitDeniedFromCache} {
		if n := m.LimitDecisions("d", id, want); n != 1 {
			t.Errorf("%s counted %s %d times, want 1", id, want, n)
		}
	}
}

// TestFailModeCountsEachLimit: a decision made by the fail mode counts
// each of its limits not_decided, as the metric's help says: the limits'
// counts add up to the decisions.
func TestFailModeCountsEachLimit(t *testing.T) {
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: failing(), OnError: limiter.FailOpen, Metrics: m})
	defer l.Close()
	p := limiter.Plan{Domain: "d", Limits: []limiter.Limit{{ID: "a", Check: check("a", 5, time.Second, 1)}, {ID: "b", Check: check("b", 9, time.Minute, 1)}}}
	if a := l.Decide(context.Background(), p); a.Outcome != limiter.OutcomeErrorOpen {
		t.Fatalf("outcome %s, want %s", a.Outcome, limiter.OutcomeErrorOpen)
	}
	for _, id := range []string{"a", "b"} {
		if n := m.LimitDecisions("d", id, limiter.LimitNotDecided); n != 1 {
			t.Errorf("%s counted %s %d times, want 1", id, limiter.LimitNotDecided, n)
		}
	}
}

// TestLocalTakesTheCost: while Redis fails, the local limiter takes what
// each request takes of a limit (its cost), as Redis would: a limit of 10
// a minute at 5 a request admits 2 requests, not 10.
func TestLocalTakesTheCost(t *testing.T) {
	local, err := limiter.NewLocalLimiter(1)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	l := limiter.New(limiter.Config{Decider: failing(), OnError: limiter.FailLocal, Local: local})
	defer l.Close()
	p := limiter.Plan{Limits: []limiter.Limit{{ID: "l", Check: check("cost", 10, time.Minute, 5)}}}
	var got []string
	for range 4 {
		got = append(got, l.Decide(context.Background(), p).Outcome)
	}
	want := []string{limiter.OutcomeErrorLocalAllowed, limiter.OutcomeErrorLocalAllowed, limiter.OutcomeErrorLocalDenied, limiter.OutcomeErrorLocalDenied}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// TestRefundFailedStillDenies: on a Cluster, when the call that denied
// stands but giving back what an earlier call consumed fails, the request
// is denied as Redis decided, never answered by the fail mode (failing
// open admitted a request Redis had refused); the failure is Redis's,
// counted for the breaker.
func TestRefundFailedStillDenies(t *testing.T) {
	d := &fakeDecider{decide: func(checks []algorithms.Check) (algorithms.Outcome, error) {
		return algorithms.Outcome{Checks: []algorithms.Decision{
			{Allowed: true, Limit: 5, Remaining: 4},
			{Limit: 1000, RetryAfter: time.Second},
		}}, &algorithms.RefundError{Err: errors.New("ERR node gone")}
	}}
	m := limiter.NewMetrics()
	l := limiter.New(limiter.Config{Decider: d, Metrics: m, OnError: limiter.FailOpen})
	defer l.Close()
	a := l.Decide(context.Background(), limiter.Plan{Limits: []limiter.Limit{
		{ID: "per-consumer", Check: check("c", 5, time.Minute, 1)},
		{ID: "global", Check: check("g", 1000, time.Minute, 1)},
	}})
	if a.Outcome != limiter.OutcomeDenied || a.Allowed() || !a.Limits[1].Decided || a.Limits[1].Allowed {
		t.Fatalf("answer %+v: want denied by global, as Redis decided", a)
	}
	if m.RedisErrors(limiter.RedisErrorOther) != 1 || m.Decisions(limiter.OutcomeErrorOpen) != 0 {
		t.Fatalf("%d Redis errors, %d failed open; want 1 and 0", m.RedisErrors(limiter.RedisErrorOther), m.Decisions(limiter.OutcomeErrorOpen))
	}
}
