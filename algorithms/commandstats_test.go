package algorithms_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// TestCommandstatsDecide is a measurement, not a check: with
// RATELAB_COMMANDSTATS set to a comma-separated list of scripts ("decide"
// for decide.lua, else a file in decide.lua's calling convention), it runs
// each on a redis-server of its own with one and three sliding logs (1 s,
// 1 m and 1 h, never reached) over 1,000 consumers, three alternating
// rounds, and logs Redis's own usec_per_call (INFO commandstats) for each:
//
//	RATELAB_COMMANDSTATS=decide go test -count=1 -v -run TestCommandstatsDecide ./algorithms/
func TestCommandstatsDecide(t *testing.T) {
	scripts := os.Getenv("RATELAB_COMMANDSTATS")
	if scripts == "" {
		t.Skip("a measurement: set RATELAB_COMMANDSTATS=decide to run it")
	}
	ctx := context.Background()
	r, err := redisrun.Start(ctx, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	windows := []int64{1000, 60000, 3600000}
	const calls = 10000
	member := 0
	for round := range 3 {
		for _, name := range strings.Split(scripts, ",") {
			src := algorithms.DecideSource()
			if name != "decide" {
				b, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				src = string(b)
			}
			for _, limits := range []int{1, 3} {
				c.FlushAll(ctx)
				sha, err := c.ScriptLoad(ctx, src).Result()
				if err != nil {
					t.Fatal(err)
				}
				c.ConfigResetStat(ctx)
				now := time.Now().UnixMilli()
				for i := range calls {
					args := []any{"decide", now + int64(i/50), limits}
					var keys []string
					for j := range limits {
						member++
						keys = append(keys, "k"+strconv.Itoa(j)+":c"+strconv.Itoa(i%1000))
						args = append(args, "sliding-log", 1000000000, windows[j], 1, 0, "m"+strconv.Itoa(member), "0", 1000000000)
					}
					if err := c.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("round %d  %-20s limits=%d  %s", round+1, name, limits, evalshaPerCall(t, c))
			}
		}
	}
}

// evalshaPerCall is the usec_per_call of EVALSHA in INFO commandstats.
func evalshaPerCall(t *testing.T, c *redis.Client) string {
	t.Helper()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line), ",") {
			if strings.HasPrefix(f, "usec_per_call=") {
				return f
			}
		}
	}
	return "no evalsha counted"
}
