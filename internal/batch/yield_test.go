package batch

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestReadyCallersJoinThePipeline: callers that are ready to run when a
// flusher wakes join its pipeline rather than the next one, because the
// flusher lets them run before it sends. On one P, eight callers are
// released at once, five times: the first caller to run wakes the flusher,
// which Go's scheduler runs next, before the seven others. Without the
// yield every burst's first pipeline holds that one call; with it, a burst
// falls short only when the scheduler's fairness check (one schedule in 61
// takes the global queue first) picks the flusher early. At least one of
// the five first pipelines must hold all eight.
func TestReadyCallersJoinThePipeline(t *testing.T) {
	c := redistest.Client(t, srv)
	key := redistest.Prefix(t) + "n"
	if err := echo.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const callers = 8
	var firsts []int
	for range 5 {
		var rec recorder
		b := New(c, Options{Max: callers, OnBatch: rec.onBatch})
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if got, err := b.Run(context.Background(), echo, []string{key}, i); err != nil || got != strconv.Itoa(i) {
					t.Errorf("caller %d: %v, %v", i, got, err)
				}
			}()
		}
		close(gate)
		wg.Wait()
		b.Close()
		sizes, _, _ := rec.snapshot()
		firsts = append(firsts, sizes[0])
	}
	t.Logf("first pipelines of five bursts: %v", firsts)
	for _, n := range firsts {
		if n == callers {
			return
		}
	}
	t.Errorf("first pipelines of five bursts %v: none took the %d callers ready to run", firsts, callers)
}
