package race

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
)

// LimitTrial is one limit of a limiter that enforces several on one client
// (an algorithms.LimitSet), over one trial. Every admitted request counts
// in every limit.
type LimitTrial struct {
	// Policy is the limit, as "10/10s".
	Policy string `json:"policy"`
	// Bound is what the limit's own guarantee allows over the trial, as
	// Trial.Bound is for a single limit.
	Bound int64 `json:"bound"`
	// OverAdmitted is what the trial admitted beyond Bound.
	OverAdmitted int64 `json:"over_admitted"`
	// StateChecked is set when the limit's key was read back (a log, in a
	// trial shorter than the shortest window); Held is then its member count.
	StateChecked bool  `json:"state_checked"`
	Held         int64 `json:"held"`
	// WronglyConsumed is what the key held beyond the requests admitted:
	// slots taken by requests another limit denied. Each one is a request
	// the limit will wrongly deny later in its window.
	WronglyConsumed int64 `json:"wrongly_consumed"`
}

// LimitResult is one limit of a limiter that enforces several, over all
// its trials.
type LimitResult struct {
	// Policy is the limit, as "10/10s", and GuaranteeRule what its guarantee allows, in words.
	Policy        string `json:"policy"`
	GuaranteeRule string `json:"guarantee_rule"`
	// OverAdmitted sums what trials admitted beyond the limit's bound, and
	// LeakedTrials counts the trials that did.
	OverAdmitted int64 `json:"over_admitted"`
	LeakedTrials int   `json:"leaked_trials"`
	// WronglyConsumed sums the slots the limit's key held for requests that
	// were denied, and TrialsWronglyConsumed counts the trials that left any.
	WronglyConsumed       int64 `json:"wrongly_consumed"`
	TrialsWronglyConsumed int   `json:"trials_wrongly_consumed"`
}

// limitsOf describes the limits of ls for the client behind key, for the
// result's Limits.
func limitsOf(ls algorithms.LimitSet, key string) []LimitResult {
	var out []LimitResult
	for _, c := range ls.Checks(key) {
		info, _ := algorithms.Lookup(c.Algorithm)
		out = append(out, LimitResult{Policy: c.Policy.String(), GuaranteeRule: info.Guarantee.Rule(c.Policy)})
	}
	return out
}

// judgeLimits judges a trial of a limiter with several limits by each
// limit's guarantee, and reads back the key of each limit kept in a log
// when the trial, from its first send, lasted less than the shortest
// window. It sets t's Limits, and its Bound, Expected and Minimum to the
// tightest limit's; StateVerified when every key it read held exactly the
// requests admitted.
func judgeLimits(ctx context.Context, client redis.UniversalClient, checks []algorithms.Check, t *Trial,
	requests int64, from, to time.Time, span time.Duration, first time.Time) error {
	t.Limits = make([]LimitTrial, len(checks))
	shortest := checks[0].Policy.Window
	for _, c := range checks {
		shortest = min(shortest, c.Policy.Window)
	}
	verified, read := true, false
	for i, c := range checks {
		info, _ := algorithms.Lookup(c.Algorithm)
		lt := LimitTrial{Policy: c.Policy.String(), Bound: bound(info.Guarantee, c.Policy, from, to, span)}
		lt.OverAdmitted = max(t.Admitted-lt.Bound, 0)
		if i == 0 || lt.Bound < t.Bound {
			t.Bound = lt.Bound
		}
		t.Minimum = min(t.Minimum, c.Policy.Limit)
		// A log read once the shortest window has passed may have expired
		// before the read: it is read first, and kept only if it was not.
		if info.State == algorithms.StateLog && time.Since(first) < shortest {
			n, err := client.ZCard(ctx, c.Key).Result()
			if err != nil {
				return err
			}
			if time.Since(first) >= shortest {
				t.Limits[i] = lt
				continue
			}
			lt.StateChecked, lt.Held = true, n
			lt.WronglyConsumed = max(n-t.Admitted, 0)
			verified = verified && n == t.Admitted
			read = true
			t.State = max(t.State, n)
		}
		t.Limits[i] = lt
	}
	t.Expected = min(requests, t.Bound)
	if read {
		t.StateVerified = &verified
	}
	return nil
}

// addLimits adds a trial's limits to the result's.
func addLimits(res []LimitResult, t Trial) {
	for i, lt := range t.Limits {
		if i >= len(res) {
			return
		}
		res[i].OverAdmitted += lt.OverAdmitted
		if lt.OverAdmitted > 0 {
			res[i].LeakedTrials++
		}
		res[i].WronglyConsumed += lt.WronglyConsumed
		if lt.WronglyConsumed > 0 {
			res[i].TrialsWronglyConsumed++
		}
	}
}
