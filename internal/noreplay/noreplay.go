// Package noreplay sends the script calls that may write so that go-redis
// never sends one again after it may have run.
//
// go-redis sends a command again in ways that replay a script that already
// ran: a client's retries (MaxRetries) after a network error once the
// command was written; and, within a Cluster client's MaxRedirects whatever
// MaxRetries says, after a network error on a node's pipeline, and when the
// first command of a node's pipeline got a retryable error (TRYAGAIN,
// LOADING, READONLY, CLUSTERDOWN, MASTERDOWN…), which sends the whole
// node's pipeline again, the commands that ran included. A decision or a
// refund so replayed is counted twice. go-redis sends again no command
// whose NoRetry is true, nor the pipeline that holds one; a Cluster client
// still follows MOVED and ASK with it, which come from a node that did not
// run it.
package noreplay

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Cmd is a command that go-redis sends at most once: its NoRetry is true.
// Read its reply as a *redis.Cmd's.
type Cmd struct{ *redis.Cmd }

var _ redis.Cmder = Cmd{}

// NoRetry is true: go-redis must not send the command again.
func (Cmd) NoRetry() bool { return true }

// EvalSha is EVALSHA sha with keys and args, as go-redis's EvalSha builds
// it, sent at most once.
func EvalSha(ctx context.Context, sha string, keys []string, args ...any) Cmd {
	return script(ctx, "evalsha", sha, keys, args)
}

// Eval is EVAL src with keys and args, as go-redis's Eval builds it, sent
// at most once.
func Eval(ctx context.Context, src string, keys []string, args ...any) Cmd {
	return script(ctx, "eval", src, keys, args)
}

func script(ctx context.Context, name, script string, keys []string, args []any) Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // a Cluster routes it by its first key
	}
	return Cmd{cmd}
}
