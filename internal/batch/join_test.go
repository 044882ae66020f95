package batch

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// sentCounter counts the EVALSHAs the client's pipelines send.
type sentCounter struct {
	mu   sync.Mutex
	sent int
}

func (s *sentCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				s.sent++
			}
		}
		s.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (s *sentCounter) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sent
	s.sent = 0
	return n
}

// joinable takes one key and one argument per call: it adds the argument
// to the key, or fails that call alone when the argument is "fail".
const joinable = `
local replies = {}
for i = 1, #KEYS do
  if ARGV[i] == 'fail' then
    replies[i] = redis.error_reply('ERR asked to fail')
  else
    replies[i] = redis.call('INCRBY', KEYS[i], ARGV[i])
  end
end
if #KEYS == 1 then
  return replies[1]
end
return replies
`

// TestJoinSendsOneCall: the calls of a pipeline that run a script Join
// names go out as one EVALSHA, and each gets its own reply or its own
// error; a call of another script goes out on its own, as before.
func TestJoinSendsOneCall(t *testing.T) {
	c := redistest.Client(t, srv)
	count := &sentCounter{}
	c.AddHook(count)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	joined, other := redis.NewScript(joinable), redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	for _, s := range []*redis.Script{joined, other} {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := newBatcher(t, c, Options{Join: func(sha string) bool { return sha == joined.Hash() }})
	prefix := redistest.Prefix(t)
	calls := []*call{
		{ctx: ctx, sha: joined.Hash(), keys: []string{prefix + "a"}, args: []any{2}},
		{ctx: ctx, sha: other.Hash(), keys: []string{prefix + "b"}, args: []any{5}},
		{ctx: ctx, sha: joined.Hash(), keys: []string{prefix + "c"}, args: []any{"fail"}},
		{ctx: ctx, sha: joined.Hash(), keys: []string{prefix + "a"}, args: []any{3}},
	}
	cmds := b.exec(ctx, calls, false)
	if n := count.take(); n != 2 {
		t.Fatalf("%d commands sent for 3 joined calls and 1 other, want 2", n)
	}
	for i, want := range []any{int64(2), int64(5), nil, int64(5)} {
		val, err := cmds[i].Result()
		if want == nil {
			if err == nil || err.Error() != "ERR asked to fail" {
				t.Errorf("call %d: %v, %v; want its own error", i+1, val, err)
			}
			continue
		}
		if err != nil || val != want {
			t.Errorf("call %d: %v, %v; want %v", i+1, val, err, want)
		}
	}
	// A call alone is sent as it was, and replies as it would.
	cmds = b.exec(ctx, calls[:1], false)
	if v, err := cmds[0].Result(); count.take() != 1 || err != nil || v != int64(7) {
		t.Fatalf("a call alone: %v, %v", v, err)
	}
}

// callRecorder records the script calls a Decider makes, and runs none.
type callRecorder struct {
	redis.UniversalClient
	calls []*call
}

var errRecorded = errors.New("recorded, not run")

func (r *callRecorder) Process(ctx context.Context, cmd redis.Cmder) error {
	name, script, keys, args, ok := scriptCall(cmd)
	if !ok {
		return r.UniversalClient.Process(ctx, cmd)
	}
	if name == "eval" {
		s := redis.NewScript(script)
		if err := s.Load(ctx, r.UniversalClient).Err(); err != nil {
			return err
		}
		script = s.Hash()
	}
	r.calls = append(r.calls, &call{ctx: ctx, sha: script, keys: keys, args: args})
	cmd.SetErr(errRecorded)
	return errRecorded
}

// TestJoinedDecisionsDecideAsAlone: a Decider's requests, joined into one
// call of their shape's script, get the replies they get sent one by one
// (on keys of their own, from the same state), a request whose key holds
// the wrong type failing alone; and on a Cluster the Decider joins none.
func TestJoinedDecisionsDecideAsAlone(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	rec := &callRecorder{UniversalClient: c}
	d := algorithms.NewDecider(rec, algorithms.DecideNow(halfPast))
	hour := algorithms.Policy{Limit: 3, Window: time.Hour}
	requests := func(side string) {
		for i := range 14 {
			who := fmt.Sprintf("%s%s-%d", prefix, side, i%3)
			if i == 7 {
				who = prefix + side + "-wrong"
			}
			cost := int64(1 + i%3/2) // 1, 1, 2, …
			_, _ = d.Decide(ctx, []algorithms.Check{
				{Key: algorithms.Key(who, "log"), Algorithm: "sliding-log", Policy: hour, Cost: cost},
				{Key: algorithms.Key(who, "gcra"), Algorithm: "gcra", Policy: algorithms.Policy{Limit: 2, Window: time.Hour, Burst: 4}, Cost: cost},
				{Key: algorithms.Key(who, "fw"), Algorithm: "fixed-window", Policy: hour, Cost: 1, Shadow: true},
			})
		}
	}
	requests("joined")
	requests("alone")
	for _, side := range []string{"joined", "alone"} {
		if err := c.Set(ctx, algorithms.Key(prefix+side+"-wrong", "log"), "a string", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	joined, alone := rec.calls[:14], rec.calls[14:]
	b := newBatcher(t, c, Options{Join: d.Joins})
	together := b.exec(ctx, joined, false)
	for i, one := range alone {
		want, wantErr := b.exec(ctx, []*call{one}, false)[0].Result()
		got, err := together[i].Result()
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("request %d: joined %v, %v; alone %v, %v", i+1, got, err, want, wantErr)
		}
		if (i == 7) != (err != nil) {
			t.Fatalf("request %d: error %v; want WRONGTYPE for request 8 alone", i+1, err)
		}
	}
	if cl := algorithms.NewDecider(c, algorithms.DecideOnCluster(true)); cl.Joins(joined[0].sha) {
		t.Error("a Decider on a Cluster joins calls")
	}
	if !d.Joins(joined[0].sha) || d.Joins(redis.NewScript("return 1").Hash()) {
		t.Error("the Decider does not name its own script alone")
	}
}

// TestJoinedAfterScriptFlush: joined calls whose script Redis no longer
// holds (SCRIPT FLUSH) get NOSCRIPT without having run; the batcher loads
// the script once and sends them again, joined: each gets its own reply,
// and each is counted once.
func TestJoinedAfterScriptFlush(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	joined := redis.NewScript(joinable)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	count := &sentCounter{}
	c.AddHook(count)
	b := newBatcher(t, c, Options{Join: func(sha string) bool { return sha == joined.Hash() }})
	prefix := redistest.Prefix(t)
	calls := []*call{
		{ctx: ctx, sha: joined.Hash(), script: joined, keys: []string{prefix + "a"}, args: []any{2}, reply: make(chan result, 1)},
		{ctx: ctx, sha: joined.Hash(), script: joined, keys: []string{prefix + "b"}, args: []any{4}, reply: make(chan result, 1)},
		{ctx: ctx, sha: joined.Hash(), script: joined, keys: []string{prefix + "a"}, args: []any{3}, reply: make(chan result, 1)},
	}
	b.flush(calls)
	for i, want := range []int64{2, 4, 5} {
		if r := <-calls[i].reply; r.err != nil || r.val != want {
			t.Errorf("call %d: %v, %v; want %d", i+1, r.val, r.err, want)
		}
	}
	// In pipelines: the joined call that got NOSCRIPT, then, once the
	// script was loaded, the joined call again.
	if n := count.take(); n != 2 {
		t.Errorf("%d commands sent in pipelines, want 2: one joined call, and it again", n)
	}
	if a, err := c.Get(ctx, prefix+"a").Int64(); err != nil || a != 5 {
		t.Errorf("the key of calls 1 and 3 holds %d (%v), want 5: each counted once", a, err)
	}
}
