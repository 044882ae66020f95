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
	_ = s.run(ctx, cmd, sha, keys, args)
	return cmd
}

// run runs sha through the Batcher and sets cmd's reply: its value, or its
// error, which it returns. The Batcher loads a known script on NOSCRIPT.
func (s *scripter) run(ctx context.Context, cmd valueCmd, sha string, keys []string, args []any) error {
	var script *redis.Script
	if v, ok := s.known.Load(sha); ok {
		script = v.(*redis.Script)
	}
	val, err := s.b.run(ctx, sha, script, keys, args)
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	cmd.SetVal(val)
	return nil
}

// valueCmd is a command whose reply is any value: a *redis.Cmd, or a
// command that embeds one (internal/noreplay's).
type valueCmd interface {
	SetVal(any)
	SetErr(error)
}

// scriptCall reads cmd as EVALSHA or EVAL: its name, its script (a SHA1 or
// a source), keys and arguments, as go-redis and internal/noreplay build
// them. ok is false for any other command, and for one whose number of
// keys is not an int followed by as many string keys.
func scriptCall(cmd redis.Cmder) (name, script string, keys []string, args []any, ok bool) {
	name, a := cmd.Name(), cmd.Args()
	if name != "evalsha" && name != "eval" || len(a) < 3 {
		return "", "", nil, nil, false
	}
	script, isString := a[1].(string)
	n, isInt := a[2].(int)
	if !isString || !isInt || n < 0 || len(a) < 3+n {
		return "", "", nil, nil, false
	}
	keys = make([]string, n)
	for i := range keys {
		if keys[i], ok = a[3+i].(string); !ok {
			return "", "", nil, nil, false
		}
	}
	return name, script, keys, a[3+n:], true
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
// to client but remembered; so too an EVALSHA or EVAL sent with Process, as
// the limiters of package algorithms send theirs. Every other command goes
// straight to client. client must be the one the Batcher sends to. The
// limiters of package algorithms take it as they take any UniversalClient.
func (b *Batcher) Wrap(client redis.UniversalClient) redis.UniversalClient {
	return &wrapped{UniversalClient: client, s: &scripter{b: b, client: client}}
}

type wrapped struct {
	redis.UniversalClient
	s *scripter
}

// Process runs an EVALSHA through the Batcher, as EvalSha does, and
// remembers the script of an EVAL; it sends every other command, and an
// EVALSHA whose reply it cannot set, straight to the client.
func (w *wrapped) Process(ctx context.Context, cmd redis.Cmder) error {
	name, script, keys, args, ok := scriptCall(cmd)
	if ok && name == "evalsha" {
		if vc, settable := cmd.(valueCmd); settable {
			return w.s.run(ctx, vc, script, keys, args)
		}
	}
	if ok && name == "eval" {
		w.s.remember(script)
	}
	return w.UniversalClient.Process(ctx, cmd)
}

// RunSha runs sha through the Batcher, as Process runs an EVALSHA, without
// a command built for it only to be read back: package algorithms's
// decisions take this way.
func (w *wrapped) RunSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	var script *redis.Script
	if v, ok := w.s.known.Load(sha); ok {
		script = v.(*redis.Script)
	}
	return w.s.b.run(ctx, sha, script, keys, args)
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
