package algorithms_test

import (
	"context"
	"testing"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestMultiLimitPairDenials: on 5 per window and 10 per ten windows (as
// 5/1s and 10/10s, with the package's hour-long window, so that no key
// expires while the test runs), bursts of 20 requests a window apart. The
// atomic pair admits 5, 5, then nothing until the long window frees; the
// sequential one admits 5, then nothing: the 5 requests the short limit
// denied in the first burst each took a slot of the long one, so the second
// burst is wrongly denied. The state check after the first burst shows why.
func TestMultiLimitPairDenials(t *testing.T) {
	c := redistest.Client(t, srv)
	p := algorithms.Policy{Limit: 5, Window: window}
	for _, tc := range []struct {
		name string
		held int64  // what the long limit holds after the first burst
		want [3]int // admitted per burst
	}{
		{"multi-limit-sequential", 10, [3]int{5, 0, 0}},
		{"multi-limit-atomic", 5, [3]int{5, 5, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: alignedStart(10 * window)}
			l := newLimiter(t, tc.name, c, p, algorithms.WithNow(clock.Now))
			key := algorithms.Key(redistest.Prefix(t), tc.name)
			checks := l.(algorithms.LimitSet).Checks(key)
			if len(checks) != 2 || checks[0].Policy != (algorithms.Policy{Limit: 10, Window: 10 * window}) || checks[1].Policy != p {
				t.Fatalf("checks %+v, want 10 per ten windows, then 5 per window", checks)
			}
			for burst, want := range tc.want {
				admitted := 0
				for range 20 {
					if allow(t, l, key).Allowed {
						admitted++
					}
				}
				if admitted != want {
					t.Fatalf("burst %d admitted %d, want %d", burst+1, admitted, want)
				}
				if burst == 0 {
					if n := c.ZCard(context.Background(), checks[0].Key).Val(); n != tc.held {
						t.Fatalf("after the first burst the long limit holds %d, want %d", n, tc.held)
					}
				}
				clock.Add(window)
			}
		})
	}
}
