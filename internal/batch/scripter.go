package batch

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Scripter returns a redis.Scripter for code that runs scripts through one
// (redis.Script.Run, the limiters of package algorithms): its EVALSHA goes
// through the Batcher, and the other script commands straight to the
// client. For a script loaded or evaluated through this Scripter, the
// Batcher answers NOSCRIPT by loading it; an unknown script's NOSCRIPT goes
// back to the caller, as from a plain client.
func (b *Batcher) Scripter() redis.Scripter {
	return &scripter{b: b, client: b.client}
}

type scripter struct {
	b      *Batcher
	client redis.Cmdable
	known  sync.Map // sha → *redis.Script
}

func (s *scripter) remember(src string) {
	script := redis.NewScript(src)
	s.known.LoadOrStore(script.Hash(), script)
}

// EvalSha runs sha through the Batcher.
func (s *scripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sha, len(keys)}, append(stringsToAny(keys), args...)...)...)
	var script *redis.Script
	if v, ok := s.known.Load(sha); ok {
		script = v.(*redis.Script)
	}
	val, err := s.b.run(ctx, sha, script, keys, args)
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	cmd.SetVal(val)
	return cmd
}

// Eval runs src on the client, and makes it known to the Batcher.
func (s *scripter) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s.remember(src)
	return s.client.Eval(ctx, src, keys, args...)
}

// EvalRO runs src on the client, and makes it known to the Batcher.
func (s *scripter) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s.remember(src)
	return s.client.EvalRO(ctx, src, keys, args...)
}

// EvalShaRO runs sha on the client, not batched.
func (s *scripter) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.client.EvalShaRO(ctx, sha, keys, args...)
}

// ScriptExists asks the client.
func (s *scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.client.ScriptExists(ctx, hashes...)
}

// ScriptLoad loads src through the client, and makes it known to the
// Batcher.
func (s *scripter) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	s.remember(src)
	return s.client.ScriptLoad(ctx, src)
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// Wrap returns client with its script commands replaced by the
// Scripter's: EVALSHA through the Batcher, EVAL and SCRIPT LOAD straight
// to client but remembered. Every other command goes straight to client.
// client must be the one the Batcher sends to. The limiters of package
// algorithms take it as they take any UniversalClient.
func (b *Batcher) Wrap(client redis.UniversalClient) redis.UniversalClient {
	return &wrapped{UniversalClient: client, s: &scripter{b: b, client: client}}
}

type wrapped struct {
	redis.UniversalClient
	s *scripter
}

// EvalSha runs sha through the Batcher.
func (w *wrapped) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return w.s.EvalSha(ctx, sha, keys, args...)
}

// Eval runs src on the client, and makes it known to the Batcher.
func (w *wrapped) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return w.s.Eval(ctx, src, keys, args...)
}

// EvalRO runs src on the client, and makes it known to the Batcher.
func (w *wrapped) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return w.s.EvalRO(ctx, src, keys, args...)
}

// ScriptLoad loads src through the client, and makes it known to the
// Batcher.
func (w *wrapped) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	return w.s.ScriptLoad(ctx, src)
}
