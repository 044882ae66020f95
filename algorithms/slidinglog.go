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

// SlidingLogSource is the Lua source of the production sliding-window log,
// for engines that load the same script outside Go.
func SlidingLogSource() string { return slidingLogSource }

type scriptKind int

const (
	slidingLogScript scriptKind = iota
	countDeniedScript
)

type memberMode int

const (
	memberUnique memberMode = iota
	memberShared
)

// sharedMember is what the broken lua-shared-member limiter writes for every
// request, as code that uses the client's id or a coarse timestamp does.
const sharedMember = "request"

// SlidingLog is the exact sliding-window log, decided in one Lua script:
// prune members older than the window, count, and add this request's member
// only when it is admitted. EVALSHA, with EVAL when the server answers
// NOSCRIPT. Each admitted request has its own member (a per-limiter random
// prefix and a counter), so concurrent requests in one millisecond never
// collapse into one entry.
type SlidingLog struct {
	client  redis.UniversalClient
	policy  Policy
	clock   Clock
	now     func() time.Time
	script  *redis.Script
	members *members
	shared  bool
}

var _ Limiter = (*SlidingLog)(nil)

func newSlidingLog(c redis.UniversalClient, p Policy, o Options, kind scriptKind, mode memberMode) *SlidingLog {
	src := slidingLogSource
	if kind == countDeniedScript {
		src = countDeniedSource
	}
	return &SlidingLog{
		client:  c,
		policy:  p,
		clock:   o.Clock,
		now:     o.Now,
		script:  redis.NewScript(src),
		members: newMembers(),
		shared:  mode == memberShared,
	}
}

// Load loads the script into the server's script cache (on every master of a Cluster).
func (s *SlidingLog) Load(ctx context.Context) error {
	if err := s.script.Load(ctx, s.client).Err(); err != nil {
		return fmt.Errorf("sliding log: script load: %w", err)
	}
	return nil
}

// Allow runs the script once for key.
func (s *SlidingLog) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: s.policy.Limit, Attempts: 1}
	now := ""
	if s.clock == ClockCaller {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	member := sharedMember
	if !s.shared {
		member = s.members.next()
	}
	keys := []string{key}
	args := []any{s.policy.Limit, s.policy.windowMillis(), now, member}
	reply, err := s.script.EvalSha(ctx, s.client, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		d.Attempts++
		reply, err = s.script.Eval(ctx, s.client, keys, args...).Result()
	}
	if err != nil {
		return d, fmt.Errorf("sliding log: eval: %w", err)
	}
	allowed, remaining, retryMillis, err := parseReply(reply)
	if err != nil {
		return d, fmt.Errorf("sliding log: %w", err)
	}
	d.Allowed = allowed
	d.Remaining = remaining
	d.RetryAfter = time.Duration(retryMillis) * time.Millisecond
	if allowed {
		d.Member = member
	}
	return d, nil
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
