package algorithms

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed slidinglog.lua
var slidingLogSource string

//go:embed slidinglog_count_denied.lua
var countDeniedSource string

//go:embed fixedwindow.lua
var fixedWindowSource string

//go:embed slidingcounter.lua
var slidingCounterSource string

//go:embed tokenbucket.lua
var tokenBucketSource string

//go:embed gcra.lua
var gcraSource string

// SlidingLogSource is the Lua source of the production sliding-window log,
// for engines that load the same script outside Go.
func SlidingLogSource() string { return slidingLogSource }

type memberMode int

const (
	memberNone   memberMode = iota // the script keeps no per-request members
	memberUnique                   // a unique member per request
	memberShared                   // the same member for every request (a bug, kept to be raced)
)

// sharedMember is what the broken lua-shared-member limiter writes for every
// request, as code that uses the client's id or a coarse timestamp does.
const sharedMember = "request"

// Scripted is a limiter decided by one Lua script per request: the
// algorithms of this package (fixed window, sliding log, sliding counter,
// token bucket, GCRA) and the broken variants of the log. Every script takes
// the client's keys, then limit, window in ms, the caller's time in ms (or ""
// to read TIME inside Redis) and, for the log, this request's member, and
// returns {allowed, remaining, retry_after_ms}. It runs with EVALSHA, and
// EVAL when the server answers NOSCRIPT.
//
// The sliding-window log (slidinglog.lua) is the exact one: prune members
// older than the window, count, and add this request's member only when it is
// admitted. Each admitted request has its own member (a per-limiter random
// prefix and a counter), so concurrent requests in one millisecond never
// collapse into one entry.
type Scripted struct {
	name    string
	client  redis.Scripter
	policy  Policy
	clock   Clock
	now     func() time.Time
	script  *redis.Script
	members *members
	mode    memberMode
	keys    int // keys per client: the key itself, or key:0 and key:1
}

var _ Limiter = (*Scripted)(nil)

func newScripted(name string, c redis.Scripter, p Policy, o Options, src string, mode memberMode, keys int) *Scripted {
	return &Scripted{
		name:    name,
		client:  c,
		policy:  p,
		clock:   o.Clock,
		now:     o.Now,
		script:  redis.NewScript(src),
		members: newMembers(),
		mode:    mode,
		keys:    keys,
	}
}

// Keys returns the Redis keys that hold the state of the client behind key.
func (s *Scripted) Keys(key string) []string {
	if s.keys == 1 {
		return []string{key}
	}
	ks := make([]string, s.keys)
	for i := range ks {
		ks[i] = key + ":" + strconv.Itoa(i)
	}
	return ks
}

// Load loads the script into the server's script cache (on every master of a Cluster).
func (s *Scripted) Load(ctx context.Context) error {
	if err := s.script.Load(ctx, s.client).Err(); err != nil {
		return fmt.Errorf("%s: script load: %w", s.name, err)
	}
	return nil
}

// Allow runs the script once for key.
func (s *Scripted) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: s.policy.Limit, Attempts: 1}
	now := ""
	if s.clock == ClockCaller {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	keys := s.Keys(key)
	args := []any{s.policy.Limit, s.policy.windowMillis(), now}
	member := ""
	switch s.mode {
	case memberUnique:
		member = s.members.next()
	case memberShared:
		member = sharedMember
	}
	if member != "" {
		args = append(args, member)
	}
	reply, trips, err := eval(ctx, s.script, s.client, keys, args...)
	d.Attempts = trips
	if err != nil {
		return d, fmt.Errorf("%s: eval: %w", s.name, err)
	}
	allowed, remaining, retryMillis, err := parseReply(reply)
	if err != nil {
		return d, fmt.Errorf("%s: %w", s.name, err)
	}
	d.Allowed = allowed
	d.Remaining = remaining
	d.RetryAfter = time.Duration(retryMillis) * time.Millisecond
	if allowed && s.mode != memberNone {
		d.Member = member
	}
	return d, nil
}

// eval runs script with EVALSHA, and EVAL when the server answers NOSCRIPT,
// and says how many round trips that took. A call that failed otherwise is
// never sent again: it may have run.
func eval(ctx context.Context, script *redis.Script, c redis.Scripter, keys []string, args ...any) (any, int, error) {
	reply, err := script.EvalSha(ctx, c, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = script.Eval(ctx, c, keys, args...).Result()
		return reply, 2, err
	}
	return reply, 1, err
}

// parseReply checks a {allowed, remaining, retry_after_ms} script reply.
func parseReply(reply any) (allowed bool, remaining, retryMillis int64, err error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 3 {
		return false, 0, 0, fmt.Errorf("bad reply %v: want {allowed, remaining, retry_after_ms}", reply)
	}
	nums := make([]int64, 3)
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return false, 0, 0, fmt.Errorf("bad reply %v: element %d is %T, want an integer", reply, i+1, v)
		}
		nums[i] = n
	}
	return nums[0] == 1, nums[1], nums[2], nil
}
