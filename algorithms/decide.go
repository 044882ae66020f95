package algorithms

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/field"
)

//go:embed decide.lua
var decideSource string

// Check is one limit of a decision.
type Check struct {
	// Key is the base key of the limit's counter (rules.Hit.Key); the
	// algorithm derives its keys from it, as its Limiter does (KeysOf).
	Key string
	// Algorithm is one of Algorithms().
	Algorithm string
	// Policy is the limit: Policy.Limit requests per Policy.Window, and
	// for token-bucket and gcra at most Policy.Burst at one instant.
	Policy Policy
	// Cost is what the request takes, from 0 to Policy.Capacity(); 0
	// checks without consuming: it admits while a request of cost 1 would
	// be.
	Cost int64
	// Shadow limits are counted and reported, and never deny.
	Shadow bool
}

// Outcome is a decision over several limits.
type Outcome struct {
	// Allowed reports whether every check not in shadow admitted.
	Allowed bool
	// Checks has one Decision per Check, in order: whether that limit
	// admitted, its Limit, Remaining (after this request when it was
	// consumed, else now), RetryAfter (when it denied: until it admits
	// again) and Reset (until it is whole again). Attempts is the round
	// trips of the call that decided it. A check never asked is Skipped: on
	// a Cluster, every check of a later call once an earlier one denied or
	// failed. It holds only its Limit, and is no denial of its own.
	Checks []Decision
	// Calls is the number of Redis round trips the decision took.
	Calls int
}

// Decider decides a request's limits atomically: all are checked, and only
// if all admit are all consumed, in one script call and one round trip,
// whatever the limits' algorithms. The script is built for the request's
// shape (its limits' algorithms, in order, and which are shadows) from the
// same source as decide.lua, when the Decider first meets the shape, and
// decides as decide.lua does without interpreting its arguments; a request
// of more limits than a shape holds (8), and every refund, runs decide.lua.
//
// On a Redis Cluster (DecideOnCluster) the keys of one call must share a
// slot. Checks are grouped by their keys' hash tag ({tag}); each group is
// one call. The largest group (the identity's limits, as rules tag them) is
// decided first, each further group (a global cap) only after the ones
// before admitted; when a later group denies, what the earlier ones
// consumed is given back (decide.lua's refund), and the groups after it
// are Skipped. Between the first call and the refund the request holds
// slots it will not use: other requests in that window may be denied by
// them, though none is ever admitted beyond a limit. A client that fails
// between the calls leaves the consumption in place.
//
// Every call, a decision's or a refund's, is sent at most once: go-redis
// never sends it again once it may have run (a Cluster's MOVED and ASK,
// from a node that did not run it, are still followed), so that none is
// counted twice; a call so failed is an error.
type Decider struct {
	client  redis.UniversalClient
	clock   Clock
	now     func() time.Time
	cluster bool
	script  *luaScript
	members *members
	// shapes holds the scripts built per shape, by the shape's key (see
	// shapeOf); read far more often than written.
	shapesMu sync.RWMutex
	shapes   map[string]*shapeScript
	// decideLua has every request decided by decide.lua, for the tests
	// that hold the scripts built per shape to it.
	decideLua bool
}

// shapeScript is the script of a shape.
type shapeScript struct {
	shape  shape
	script *luaScript
}

// DeciderOption sets one option of NewDecider.
type DeciderOption func(*Decider)

// DecideClock sets where a Decider takes the time from; ClockCaller by default.
func DecideClock(c Clock) DeciderOption { return func(d *Decider) { d.clock = c } }

// DecideNow sets the caller's clock, for tests with a fixed time; time.Now by default.
func DecideNow(now func() time.Time) DeciderOption { return func(d *Decider) { d.now = now } }

// DecideOnCluster says whether the client reaches a Redis Cluster, as
// whoever built the client knows (for redis.UniversalOptions,
// internal/redisrun's IsCluster says it); false by default. A Decider on a
// Cluster decides each hash tag's checks in a call of their own, since the
// keys of one call must share a slot. Nothing asks the client itself: a
// wrapper, such as a batcher's, hides what it wraps.
func DecideOnCluster(cluster bool) DeciderOption { return func(d *Decider) { d.cluster = cluster } }

// NewDecider returns a Decider on client.
func NewDecider(client redis.UniversalClient, opts ...DeciderOption) *Decider {
	d := &Decider{
		client:  client,
		now:     time.Now,
		script:  newLuaScript("decide", decideSource),
		members: newMembers(),
		shapes:  map[string]*shapeScript{},
	}
	for _, opt := range opts {
		opt(d)
	}
	return d
}

// Load loads the Decider's script into the server's script cache (on every
// master of a Cluster), so that no decision pays for the NOSCRIPT fallback.
func (d *Decider) Load(ctx context.Context) error {
	return d.script.load(ctx, d.client)
}

// Validate reports whether c can be decided. Errors are *field.Error naming
// Key, Algorithm, Policy's Limit, Window or Burst, or Cost.
func (c Check) Validate() error {
	if c.Key == "" {
		return field.Errorf("Key", "must not be empty")
	}
	if !isAlgorithm(c.Algorithm) && c.Algorithm != InFlight {
		return field.Errorf("Algorithm", "%q is not one of %v or %s", c.Algorithm, Algorithms(), InFlight)
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if err := CheckBurst(c.Algorithm, c.Policy); err != nil {
		return err
	}
	if c.Cost < 0 || c.Cost > c.Policy.Capacity() {
		most := "the limit"
		if c.Policy.Burst > 0 {
			most = "the burst"
		}
		return field.Errorf("Cost", "must be from 0 to %s, %d (got %d)", most, c.Policy.Capacity(), c.Cost)
	}
	return nil
}

// isAlgorithm reports whether decide.lua implements name: the names
// Algorithms lists (TestIsAlgorithmIsAlgorithms holds them equal), without
// building the registry, which every check of every decision would pay for.
func isAlgorithm(name string) bool {
	switch name {
	case "fixed-window", "sliding-log", "sliding-counter", "token-bucket", "gcra":
		return true
	}
	return false
}

// checkKeys are the Redis keys of c's state.
func checkKeys(c Check) []string {
	if c.Algorithm == "sliding-counter" {
		return []string{c.Key + ":0", c.Key + ":1"}
	}
	return []string{c.Key}
}

// Decide decides checks as one request: Outcome.Allowed only if every check
// not in shadow admits, and then every check that admitted is consumed;
// otherwise nothing is. No checks is an admission without a call. On an
// error the Outcome is a denial holding what was decided before it; on a
// Cluster, what earlier calls consumed is given back. A *RefundError says
// that Redis decided (a denial, which stands) and only the giving back
// failed.
func (d *Decider) Decide(ctx context.Context, checks []Check) (Outcome, error) {
	keys := make(map[string]int, len(checks))
	for i, c := range checks {
		if err := c.Validate(); err != nil {
			return Outcome{}, fmt.Errorf("decide: check %d: %w", i+1, err)
		}
		if j, ok := keys[c.Key]; ok {
			return Outcome{}, fmt.Errorf("decide: checks %d and %d share the key %q", j+1, i+1, c.Key)
		}
		keys[c.Key] = i
	}
	out := Outcome{Allowed: true, Checks: make([]Decision, len(checks))}
	for i, c := range checks {
		out.Checks[i].Limit = c.Policy.Limit
	}
	if len(checks) == 0 {
		return out, nil
	}
	now := ""
	if d.clock == ClockCaller {
		now = strconv.FormatInt(d.now().UnixMilli(), 10)
	}
	groups := [][]int{indexes(len(checks))}
	if d.cluster {
		groups = bySlot(checks)
	}
	var done []call
	for k, g := range groups {
		cl, err := d.call(ctx, checks, g, now)
		out.Calls += cl.trips
		if err != nil {
			// Whether the failed call consumed is unknown; the calls before
			// it are given back, as for a denial.
			out.Allowed = false
			skip(&out, groups[k+1:])
			return out, errors.Join(err, d.giveBack(ctx, &out, groups, done))
		}
		for j, i := range g {
			out.Checks[i] = cl.decisions[j]
		}
		if !cl.allowed {
			out.Allowed = false
			skip(&out, groups[k+1:])
			if err := d.giveBack(ctx, &out, groups, done); err != nil {
				return out, &RefundError{Err: err}
			}
			return out, nil
		}
		done = append(done, cl)
	}
	return out, nil
}

// skip marks the checks of groups, which are never put to Redis, Skipped.
func skip(out *Outcome, groups [][]int) {
	for _, g := range groups {
		for _, i := range g {
			out.Checks[i].Skipped = true
		}
	}
}

// RefundError is Decide's error when Redis decided, and denied, but what
// the calls before the one that denied consumed could not be given back
// (on a Cluster): the Outcome is the denial, and stands. The consumption
// stays in place until its windows pass: limits may admit less for a
// while, never more.
type RefundError struct {
	// Err is why the refund failed.
	Err error
}

func (e *RefundError) Error() string {
	return "decide: denied, and the refund failed: " + e.Err.Error()
}

func (e *RefundError) Unwrap() error { return e.Err }

// call is one script call over some of a decision's checks.
type call struct {
	checks    []Check
	members   []string
	allowed   bool
	decisions []Decision
	marks     []int64
	trips     int
	now       string
}

// call decides the checks of group in one script call.
func (d *Decider) call(ctx context.Context, checks []Check, group []int, now string) (call, error) {
	cl := call{checks: checks, now: now}
	if len(group) < len(checks) { // a Cluster's hash tag: its checks alone
		cl.checks = make([]Check, len(group))
		for j, i := range group {
			cl.checks[j] = checks[i]
		}
	}
	for j, c := range cl.checks {
		if c.Algorithm == "sliding-log" || c.Algorithm == InFlight {
			if cl.members == nil {
				cl.members = make([]string, len(cl.checks))
			}
			cl.members[j] = d.members.next()
		}
	}
	r, trips, err := d.run(ctx, "decide", cl.checks, cl.members, nil, now)
	cl.trips = trips
	if err != nil {
		return cl, err
	}
	cl.allowed, cl.marks, cl.decisions = r.allowed, r.marks, r.decisions
	for j := range cl.decisions {
		cl.decisions[j].Limit = cl.checks[j].Policy.Limit
		cl.decisions[j].Attempts = trips
		if cl.consumed(j) && cl.checks[j].Cost == 1 {
			cl.decisions[j].Member = cl.member(j)
		}
	}
	return cl, nil
}

// member is the member the call's check j logged; "" for a check of an
// algorithm that logs none.
func (cl call) member(j int) string {
	if cl.members == nil {
		return ""
	}
	return cl.members[j]
}

// consumed reports whether the call consumed the cost of its check j.
func (cl call) consumed(j int) bool {
	return cl.allowed && cl.decisions[j].Allowed && cl.checks[j].Cost > 0
}

// run decides checks in mode with the script of their shape, or with
// decide.lua, and reads the reply.
func (d *Decider) run(ctx context.Context, mode string, checks []Check, members []string, marks []int64, now string) (decideReply, int, error) {
	keys := make([]string, 0, len(checks)+1)
	var buf [maxShape]bool
	shadows := buf[:0]
	if len(checks) > len(buf) {
		shadows = make([]bool, 0, len(checks))
	}
	shadows = shadows[:len(checks)]
	for j, c := range checks {
		keys = append(keys, checkKeys(c)...)
		shadows[j] = c.Shadow
	}
	script, args := d.script, []any(nil)
	if s, ok := d.shapeOf(checks); ok && mode == "decide" {
		script, args = s.script, s.shape.argv(checks, members, now)
	} else {
		args = make([]any, 0, 3+8*len(checks))
		args = append(args, mode, now, len(checks))
		for j, c := range checks {
			shadow, mark := 0, int64(0)
			if c.Shadow {
				shadow = 1
			}
			if marks != nil {
				mark = marks[j]
			}
			member := ""
			if members != nil {
				member = members[j]
			}
			args = append(args, c.Algorithm, c.Policy.Limit, c.Policy.windowMillis(), c.Cost, shadow, member, mark, c.Policy.Capacity())
		}
	}
	reply, trips, err := script.run(ctx, d.client, keys, args...)
	if err != nil {
		return decideReply{}, trips, fmt.Errorf("decide: %s: eval: %w", mode, err)
	}
	r, err := parseDecideReply(reply, shadows)
	if err != nil {
		return decideReply{}, trips, fmt.Errorf("decide: %s: %w", mode, err)
	}
	return r, trips, nil
}

// identity holds the indexes of the checks of a shape: a request's one
// group, read only.
var identity = func() (is [maxShape]int) {
	for i := range is {
		is[i] = i
	}
	return is
}()

func indexes(n int) []int {
	if n <= len(identity) {
		return identity[:n:n]
	}
	is := make([]int, n)
	for i := range is {
		is[i] = i
	}
	return is
}

// shapeOf returns the script of checks' shape, built the first time; false
// for more limits than a shape holds.
func (d *Decider) shapeOf(checks []Check) (*shapeScript, bool) {
	if len(checks) > maxShape || d.decideLua {
		return nil, false
	}
	// The key is made in a buffer of the stack: a lookup by string(key)
	// allocates nothing.
	var buf [128]byte
	key := buf[:0]
	for _, c := range checks {
		key = append(key, c.Algorithm...)
		if c.Shadow {
			key = append(key, " shadow"...)
		}
		key = append(key, ',')
	}
	d.shapesMu.RLock()
	s, ok := d.shapes[string(key)]
	d.shapesMu.RUnlock()
	if ok {
		return s, true
	}
	limits := make([]shapeLimit, len(checks))
	for j, c := range checks {
		limits[j] = shapeLimit{algorithm: c.Algorithm, shadow: c.Shadow}
	}
	sh, src, err := shapeOf(limits)
	if err != nil {
		return nil, false // decide.lua decides it
	}
	script := newLuaScript("decide", src)
	script.fresh = true
	d.shapesMu.Lock()
	defer d.shapesMu.Unlock()
	if s, ok := d.shapes[string(key)]; ok {
		return s, true
	}
	s = &shapeScript{shape: sh, script: script}
	d.shapes[string(key)] = s
	return s, true
}

// argv is the ARGV of a request of checks, of this shape, at now.
func (s shape) argv(checks []Check, members []string, now string) []any {
	args := make([]any, 0, s.args)
	args = append(args, "decide", now)
	for j, c := range checks {
		args = append(args, c.Policy.Limit, c.Policy.windowMillis(), c.Cost)
		if s.members[j] {
			args = append(args, members[j])
		}
		if s.bursts[j] {
			args = append(args, c.Policy.Capacity())
		}
	}
	return args
}

// Joins reports whether sha names one of d's scripts (decide.lua, or one
// built for a shape, with or without its shebang), which take the calls
// of several requests in one (decide.lua's "Joined requests"): a batcher
// may send concurrent calls of one as one call (internal/batch's
// Options.Join). Never on a Cluster, where one call's keys share a slot.
func (d *Decider) Joins(sha string) bool {
	if d == nil || d.cluster {
		return false
	}
	if d.script.is(sha) {
		return true
	}
	d.shapesMu.RLock()
	defer d.shapesMu.RUnlock()
	for _, s := range d.shapes {
		if s.script.is(sha) {
			return true
		}
	}
	return false
}
