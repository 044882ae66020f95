package testwait_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/testwait"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing's does, without failing the real test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually with a recorder on its own goroutine, which Fatalf
// ends, and returns the failure message ("" when it returned).
func run(t *testing.T, timeout time.Duration, cond func() (bool, string)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testwait.Eventually(r, timeout, cond)
	}()
	<-done
	return r.failed
}

// TestEventually: a condition that becomes true passes however many calls
// it takes; one that never does fails with its last reason; and the
// condition is always asked at least once, and again at the timeout, so
// that a late machine is judged by the condition, not by the clock.
func TestEventually(t *testing.T) {
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		trueAfter int // calls; 0: never
		wantCalls func(int) bool
		wantFail  string
	}{
		{"true at once", time.Minute, 1, func(n int) bool { return n == 1 }, ""},
		{"true at once, no time at all", 0, 1, func(n int) bool { return n == 1 }, ""},
		{"true on the fifth call", time.Minute, 5, func(n int) bool { return n == 5 }, ""},
		{"never true", 20 * time.Millisecond, 0, func(n int) bool { return n >= 2 }, "still not so after 20ms: call "},
		{"never true, no time at all", 0, 0, func(n int) bool { return n == 1 }, "still not so after 0s: call 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			failed := run(t, tc.timeout, func() (bool, string) {
				calls++
				return calls == tc.trueAfter, fmt.Sprintf("call %d", calls)
			})
			if !tc.wantCalls(calls) {
				t.Errorf("%d calls", calls)
			}
			if tc.wantFail == "" && failed != "" || tc.wantFail != "" && !strings.HasPrefix(failed, tc.wantFail) {
				t.Errorf("failed with %q, want %q", failed, tc.wantFail)
			}
			if tc.wantFail != "" && !strings.HasSuffix(failed, fmt.Sprintf("call %d", calls)) {
				t.Errorf("failed with %q, want the last reason (call %d)", failed, calls)
			}
		})
	}
}
