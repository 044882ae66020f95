package algorithms

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/noreplay"
)

// slidingLogSource is the sliding-window log written to be read: what the
// race's lua limiter runs, and the example of the calling convention
// of users' scripts (UserScript). TestSlidingLogReadsAsDecide holds its
// answers to decide.lua's.
//
//go:embed slidinglog.lua
var slidingLogSource string

//go:embed slidinglog_count_denied.lua
var countDeniedSource string

// WithoutShebang returns src without its first line when that is a
// shebang ("#!lua …"), for servers that cannot read one.
func WithoutShebang(src string) string {
	if !strings.HasPrefix(src, "#!") {
		return src
	}
	_, rest, _ := strings.Cut(src, "\n")
	return rest
}

// isCompileError reports whether err is the server's refusal to compile a
// script, as Redis before 7 and the embedded server answer a shebang.
func isCompileError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script")
}

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
// token bucket, GCRA), each decide.lua with one limit of cost 1, as a
// Decider sends it; the readable sliding log (slidinglog.lua) and its
// broken variants; and users' own scripts (UserScript). It runs with
// EVALSHA, and EVAL when the server answers NOSCRIPT, each sent at most
// once: go-redis never sends a call again once it may have run, whatever
// the client's retries (a Cluster's MOVED and ASK are still followed). The
// scripts differ in the ARGV a request sends and in how their reply reads:
// slidinglog.lua and users' scripts take the client's keys, then limit,
// window in ms, the caller's time in ms (or "" to read TIME inside Redis)
// and this request's member, and return {allowed, remaining,
// retry_after_ms}; decide.lua takes and returns what its header says.
//
// This package's scripts start with Redis 7's shebang, "#!lua" and no
// flags: a script that may write. Redis 7 then refuses it whole, with OOM,
// when the server is over its maxmemory, before any command of it runs;
// without the shebang a script that deletes first (ZREMRANGEBYSCORE) may go
// on writing past maxmemory, and one that writes first fails, so that a
// full Redis would admit or fail depending on the algorithm. A server that
// cannot compile the shebang (Redis before 7, the embedded one) gets the
// script without it, from its first refusal on: there a full Redis behaves
// as it did before.
//
// The sliding-window log is the exact one: count the members within the
// window, and add this request's member only when it is admitted. Each
// admitted request has its own member (a per-limiter random prefix and a
// counter), so concurrent requests in one millisecond never collapse into
// one entry.
type Scripted struct {
	name   string
	client scriptClient
	policy Policy
	clock  Clock
	now    func() time.Time
	script *luaScript
	keys   int // keys per client: the key itself, or key:0 and key:1
	argv   argvFunc
	parse  replyFunc
}

var (
	_ Limiter = (*Scripted)(nil)
	_ Loader  = (*Scripted)(nil)
)

// argvFunc builds one request's ARGV from the caller's time in ms ("" on
// Redis's clock). member is what the request writes to the client's log
// when admitted, reported in Decision.Member; "" when the state is no log.
type argvFunc func(now string) (args []any, member string)

// replyFunc reads a script's reply into a Decision's Allowed, Remaining and
// RetryAfter.
type replyFunc func(reply any) (Decision, error)

func newScripted(name string, c scriptClient, p Policy, o Options, src string, keys int, argv argvFunc, parse replyFunc) *Scripted {
	return &Scripted{
		name:   name,
		client: c,
		policy: p,
		clock:  o.Clock,
		now:    o.Now,
		script: newLuaScript(name, src),
		keys:   keys,
		argv:   argv,
		parse:  parse,
	}
}

// policyArgs is the ARGV of slidinglog.lua and its variants: limit,
// window in ms, the caller's time and the request's member (unique, or the
// same for every request with memberShared).
func policyArgs(p Policy, mode memberMode) argvFunc {
	ms := newMembers()
	return func(now string) ([]any, string) {
		args := []any{p.Limit, p.windowMillis(), now}
		switch mode {
		case memberUnique:
			m := ms.next()
			return append(args, m), m
		case memberShared:
			return append(args, sharedMember), sharedMember
		}
		return args, ""
	}
}

// shapeArgs is the ARGV of the script of one limit of algorithm alg
// (shapeOf) with policy p at cost 1, as a Decider sends it: a sliding
// log's member unique per request.
func shapeArgs(s shape, p Policy) argvFunc {
	ms := newMembers()
	return func(now string) ([]any, string) {
		m := ""
		if s.members[0] {
			m = ms.next()
		}
		return s.argv([]Check{{Policy: p, Cost: 1}}, []string{m}, now), m
	}
}

// parseDecided reads decide.lua's reply for one limit that is not in
// shadow.
func parseDecided(reply any) (Decision, error) {
	r, err := parseDecideReply(reply, []bool{false})
	if err != nil {
		return Decision{}, err
	}
	d := r.decisions[0]
	return Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}, nil
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

// Load loads the script into the server's script cache (on every master of
// a Cluster); without its shebang when the server cannot compile one.
func (s *Scripted) Load(ctx context.Context) error {
	return s.script.load(ctx, s.client)
}

// Allow runs the script once for key.
func (s *Scripted) Allow(ctx context.Context, key string) (Decision, error) {
	d := Decision{Limit: s.policy.Limit, Attempts: 1}
	now := ""
	if s.clock == ClockCaller {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	args, member := s.argv(now)
	reply, trips, err := s.script.run(ctx, s.client, s.Keys(key), args...)
	d.Attempts = trips
	if err != nil {
		return d, fmt.Errorf("%s: eval: %w", s.name, err)
	}
	v, err := s.parse(reply)
	if err != nil {
		return d, fmt.Errorf("%s: %w", s.name, err)
	}
	d.Allowed, d.Remaining, d.RetryAfter = v.Allowed, v.Remaining, v.RetryAfter
	if d.Allowed {
		d.Member = member
	}
	return d, nil
}

// scriptClient is what runs a script: ScriptLoad loads it, and Process
// sends each call, never to be sent again once it may have run
// (internal/noreplay). A redis.UniversalClient is one, and so is a
// batcher's wrapped client, which batches the calls.
type scriptClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
}

// luaScript is a script of this package or a user's, run without its
// shebang once the server refused to compile one (see Scripted).
type luaScript struct {
	name   string
	script *source
	// plain is script without its shebang, run once the server refused
	// to compile the shebang (legacy set); nil for a script with none.
	plain  *source
	legacy atomic.Bool
	// fresh is set for a script built at run time (a Decider's, per
	// shape), which the server has most likely never seen: until it was
	// loaded or run once a call sends EVAL, which loads it, rather than an
	// EVALSHA the server would answer NOSCRIPT. known is set then.
	fresh bool
	known atomic.Bool
}

// source is a script's text and the SHA1 that EVALSHA names it by.
type source struct{ text, sha string }

func newSource(text string) *source { return &source{text: text, sha: redis.NewScript(text).Hash()} }

func newLuaScript(name, src string) *luaScript {
	s := &luaScript{name: name, script: newSource(src)}
	if plain := WithoutShebang(src); plain != src {
		s.plain = newSource(plain)
	}
	return s
}

// is reports whether sha names the script, with or without its shebang.
func (s *luaScript) is(sha string) bool {
	return s.script.sha == sha || s.plain != nil && s.plain.sha == sha
}

// current is the script to run: plain once the server refused the shebang.
func (s *luaScript) current() *source {
	if s.legacy.Load() {
		return s.plain
	}
	return s.script
}

// refused reports whether err is the server's first refusal to compile
// the shebang, and from then on runs the script without it.
func (s *luaScript) refused(err error) bool {
	if !isCompileError(err) || s.plain == nil || s.legacy.Load() {
		return false
	}
	s.legacy.Store(true)
	return true
}

func (s *luaScript) load(ctx context.Context, c scriptClient) error {
	err := c.ScriptLoad(ctx, s.current().text).Err()
	if s.refused(err) {
		err = c.ScriptLoad(ctx, s.plain.text).Err()
	}
	if err != nil {
		return fmt.Errorf("%s: script load: %w", s.name, err)
	}
	s.known.Store(true)
	return nil
}

// run runs the script once (EVALSHA, EVAL on NOSCRIPT) and says how many
// round trips it took.
func (s *luaScript) run(ctx context.Context, c scriptClient, keys []string, args ...any) (any, int, error) {
	send := eval
	if s.fresh && !s.known.Load() {
		send = evalText
	}
	reply, trips, err := send(ctx, c, s.current(), keys, args...)
	if s.refused(err) {
		// Nothing ran: the server could not compile the shebang.
		var more int
		reply, more, err = send(ctx, c, s.plain, keys, args...)
		trips += more
	}
	if err == nil {
		s.known.Store(true)
	}
	return reply, trips, err
}

// evalText runs script with EVAL, in one round trip, sent at most once.
func evalText(ctx context.Context, c scriptClient, script *source, keys []string, args ...any) (any, int, error) {
	reply, err := process(ctx, c, noreplay.Eval(ctx, script.text, keys, args...))
	return reply, 1, err
}

// eval runs script with EVALSHA, and EVAL when the server answers NOSCRIPT
// (the script did not run), and says how many round trips that took. Each
// goes out never to be sent again once it may have run, whatever the
// client's retries: a call that failed otherwise may have been counted,
// and is counted at most once.
func eval(ctx context.Context, c scriptClient, script *source, keys []string, args ...any) (any, int, error) {
	var reply any
	var err error
	if r, ok := c.(shaRunner); ok {
		reply, err = r.RunSha(ctx, script.sha, keys, args)
	} else {
		reply, err = process(ctx, c, noreplay.EvalSha(ctx, script.sha, keys, args...))
	}
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = process(ctx, c, noreplay.Eval(ctx, script.text, keys, args...))
		return reply, 2, err
	}
	return reply, 1, err
}

// shaRunner is a client that runs an EVALSHA given its parts, with no
// command built for it (internal/batch's, which sends it in a pipeline
// marked never to be sent again, as noreplay's).
type shaRunner interface {
	RunSha(ctx context.Context, sha string, keys []string, args []any) (any, error)
}

func process(ctx context.Context, c scriptClient, cmd noreplay.Cmd) (any, error) {
	_ = c.Process(ctx, cmd) // its error is cmd's
	return cmd.Result()
}

// parseReply reads this package's {allowed, remaining, retry_after_ms} reply.
func parseReply(reply any) (Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 3 {
		return Decision{}, fmt.Errorf("bad reply %v: want {allowed, remaining, retry_after_ms}", reply)
	}
	nums := make([]int64, 3)
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return Decision{}, fmt.Errorf("bad reply %v: element %d is %T, want an integer", reply, i+1, v)
		}
		nums[i] = n
	}
	d := Decision{Allowed: nums[0] == 1, Remaining: nums[1]}
	if !d.Allowed { // an admission has no retry-after
		retry, err := retryAfterMillis(nums[2])
		if err != nil {
			return Decision{}, fmt.Errorf("bad reply %v: %w", reply, err)
		}
		d.RetryAfter = retry
	}
	return d, nil
}

// retryAfterMillis reads a reply's retry-after in ms: an error when it is
// negative or too long for a time.Duration, which would wrap around.
func retryAfterMillis(ms int64) (time.Duration, error) {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, fmt.Errorf("retry-after %d ms is out of range", ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
