package algorithms

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// UserScript is a user's own Lua limiter, raced and compared like the
// built-in ones. The script gets the client's key as KEYS[1] and ARGV built
// from Args, a space-separated template whose placeholders are {limit},
// {window_ms}, {now_ms} (the caller's time; empty with ClockRedis) and
// {member} (unique per request); other words pass as they are. Its reply is
// an integer 1 (allowed) or 0, or an array whose first element is that,
// optionally followed by remaining and retry-after in milliseconds.
type UserScript struct {
	// Name is how reports call it.
	Name string
	// Source is the Lua source.
	Source string
	// Args is the ARGV template.
	Args string
}

// DefaultScriptArgs is the ARGV template of ratelab's own scripts.
const DefaultScriptArgs = "{limit} {window_ms} {now_ms} {member}"

var placeholders = []string{"{limit}", "{window_ms}", "{now_ms}", "{member}"}

// Validate checks the template and that there is a script.
func (u UserScript) Validate() error {
	if strings.TrimSpace(u.Source) == "" {
		return fmt.Errorf("script %s is empty", u.Name)
	}
	for _, w := range strings.Fields(u.Args) {
		if strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") && !contains(placeholders, w) {
			return fmt.Errorf("unknown placeholder %s (known: %s)", w, strings.Join(placeholders, " "))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Info describes the script for reports: atomic (Redis runs a script whole),
// state that ratelab cannot check, and judged by the sliding log's rule
// (at most the limit in any window-long span), the strictest of the
// guarantees, which a script of another algorithm may rightly break.
func (u UserScript) Info() Info {
	return Info{Name: u.Name, Description: "your script, ARGV " + u.Args, Atomic: true, State: StateNone,
		RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Guarantee: SlidingWindow}
}

// New builds the limiter on any client that runs scripts.
func (u UserScript) New(client redis.Scripter, p Policy, opts ...Option) (Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	o := Options{Now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return &userLimiter{spec: u, client: client, policy: p, clock: o.Clock, now: o.Now,
		script: redis.NewScript(u.Source), members: newMembers(), words: strings.Fields(u.Args)}, nil
}

type userLimiter struct {
	spec    UserScript
	client  redis.Scripter
	policy  Policy
	clock   Clock
	now     func() time.Time
	script  *redis.Script
	members *members
	words   []string
}

func (l *userLimiter) Load(ctx context.Context) error {
	if err := l.script.Load(ctx, l.client).Err(); err != nil {
		return fmt.Errorf("%s: script load: %w", l.spec.Name, err)
	}
	return nil
}

func (l *userLimiter) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: l.policy.Limit, Attempts: 1}
	args := make([]any, len(l.words))
	for i, w := range l.words {
		switch w {
		case "{limit}":
			args[i] = l.policy.Limit
		case "{window_ms}":
			args[i] = l.policy.windowMillis()
		case "{now_ms}":
			args[i] = ""
			if l.clock == ClockCaller {
				args[i] = strconv.FormatInt(l.now().UnixMilli(), 10)
			}
		case "{member}":
			args[i] = l.members.next()
		default:
			args[i] = w
		}
	}
	keys := []string{key}
	reply, trips, err := eval(ctx, l.script, l.client, keys, args...)
	d.Attempts = trips
	if err != nil {
		return d, fmt.Errorf("%s: eval: %w", l.spec.Name, err)
	}
	vals, ok := reply.([]any)
	if !ok {
		vals = []any{reply}
	}
	if len(vals) == 0 {
		return d, fmt.Errorf("%s: empty reply: want 1 or 0 first", l.spec.Name)
	}
	nums := make([]int64, 0, 3)
	for i, v := range vals[:min(len(vals), 3)] {
		n, ok := v.(int64)
		if !ok {
			return d, fmt.Errorf("%s: reply element %d is %T (%v), want an integer", l.spec.Name, i+1, v, v)
		}
		nums = append(nums, n)
	}
	if nums[0] != 0 && nums[0] != 1 {
		return d, fmt.Errorf("%s: reply starts with %d, want 1 (allowed) or 0", l.spec.Name, nums[0])
	}
	d.Allowed = nums[0] == 1
	if len(nums) > 1 {
		d.Remaining = nums[1]
	}
	if len(nums) > 2 && !d.Allowed {
		d.RetryAfter = time.Duration(nums[2]) * time.Millisecond
	}
	return d, nil
}
