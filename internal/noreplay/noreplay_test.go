package noreplay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/noreplay"
)

// TestScriptCalls: EvalSha and Eval build the commands go-redis's own
// EvalSha and Eval build, with and without keys, and mark them never to be
// sent again, which go-redis's are not.
func TestScriptCalls(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the pipeline is not run
	defer c.Close()
	pipe := c.Pipeline()
	for _, tc := range []struct {
		name  string
		once  noreplay.Cmd
		plain *redis.Cmd
	}{
		{"evalsha", noreplay.EvalSha(ctx, "abc", []string{"k1", "k2"}, "a", 1), pipe.EvalSha(ctx, "abc", []string{"k1", "k2"}, "a", 1)},
		{"evalsha without keys", noreplay.EvalSha(ctx, "abc", nil, "a"), pipe.EvalSha(ctx, "abc", nil, "a")},
		{"eval", noreplay.Eval(ctx, "return 1", []string{"k"}, 2), pipe.Eval(ctx, "return 1", []string{"k"}, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := fmt.Sprint(tc.once.Args()), fmt.Sprint(tc.plain.Args()); got != want {
				t.Errorf("args %s, want %s", got, want)
			}
			if !tc.once.NoRetry() || tc.plain.NoRetry() {
				t.Errorf("NoRetry %t, go-redis's own %t: want true and false", tc.once.NoRetry(), tc.plain.NoRetry())
			}
		})
	}
}
