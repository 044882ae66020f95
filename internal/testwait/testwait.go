// Package testwait waits, in tests, for what another goroutine or process
// makes true: one bounded poll with a short backoff that fails the test with
// the condition's last reason, instead of a hand-written loop in each test.
package testwait

import (
	"testing"
	"time"
)

// The pause between two calls of a condition starts at firstPause and
// doubles up to maxPause: a condition that is true at once costs nothing,
// and one that takes seconds is asked a few times a second.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// Eventually calls cond until it reports true, and fails t with cond's last
// reason if it has not within timeout. cond is called at least once, and
// once more at or after the timeout, so that a machine too loaded to call it
// in time still gets the last word from cond, not from the clock. The
// reason says what cond saw ("edge answers 503, want 429"); it is read only
// when cond reports false.
func Eventually(t testing.TB, timeout time.Duration, cond func() (ok bool, reason string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := firstPause
	for {
		ok, reason := cond()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("still not so after %s: %s", timeout, reason)
			return
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}
