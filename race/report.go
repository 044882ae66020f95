package race

import (
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// Settings is the configuration as reports show it; see Config for each field.
type Settings struct {
	Limiters    []string `json:"limiters"`
	Concurrency int      `json:"concurrency"`
	Limit       int64    `json:"limit"`
	// WindowMillis, Clock and WatchRetries are the rate limiters'; absent
	// in a race of in-flight limiters.
	WindowMillis      int64 `json:"window_ms,omitempty"`
	Trials            int   `json:"trials"`
	RequestsPerWorker int   `json:"requests_per_worker"`
	// Clock is "caller" or "redis"; only the Lua limiters honour "redis".
	Clock        string `json:"clock,omitempty"`
	WatchRetries int    `json:"watch_retries,omitempty"`
	// InFlight holds the settings of a race of in-flight limiters; nil for
	// rate limiters.
	InFlight *InFlightSettings `json:"in_flight,omitempty"`
}

// Report is a whole run.
type Report struct {
	// Command is "race".
	Command string `json:"command"`
	// Redis is the server the run was measured on; the caller fills it.
	Redis redisrun.Info `json:"redis"`
	// Config is what was run.
	Config Settings `json:"config"`
	// Results has one entry per rate limiter, in the order raced; empty
	// in a race of in-flight limiters.
	Results []Result `json:"results"`
	// InFlight has one entry per in-flight limiter, in the order raced.
	InFlight []InFlightResult `json:"in_flight,omitempty"`
	// ElapsedMillis is the wall time of the run, connection set-up included.
	ElapsedMillis int64 `json:"elapsed_ms"`
}

// Spread is the release spread in microseconds: in each trial, the last
// goroutine's first send minus the first one's; the median and the largest
// over the trials.
type Spread struct {
	P50 int64 `json:"p50"`
	Max int64 `json:"max"`
}

// Result is one limiter over all its trials.
type Result struct {
	// Limiter is the registry name.
	Limiter string `json:"limiter"`
	// Atomic is whether the limiter checks and updates in one indivisible step.
	Atomic bool `json:"atomic"`
	// Description says what the limiter does.
	Description string `json:"description"`
	// Trials is the number of bursts run.
	Trials int `json:"trials"`
	// Requests is the number of decisions made over all trials.
	Requests int64 `json:"requests"`
	// Admitted is the number of decisions that admitted a request.
	Admitted int64 `json:"admitted"`
	// Guarantee is the rule the limiter was judged by (an algorithms.Guarantee),
	// and GuaranteeRule says it in words for the policy raced.
	Guarantee     string `json:"guarantee"`
	GuaranteeRule string `json:"guarantee_rule"`
	// Clock is the clock that decided the limiter's windows: "caller" or "redis".
	Clock string `json:"clock"`
	// ExpectedAdmitted sums the trials' Expected: the most each trial's
	// span allowed under the limiter's own guarantee.
	ExpectedAdmitted int64 `json:"expected_admitted"`
	// OverAdmitted sums what trials admitted beyond Expected.
	OverAdmitted int64 `json:"over_admitted"`
	// UnderAdmitted sums what trials fell short of their Minimum: policy
	// under-admission, apart from errors and exhausted retries.
	UnderAdmitted int64 `json:"under_admitted"`
	// LeakedTrials counts trials that admitted more than Expected.
	LeakedTrials int `json:"leaked_trials"`
	// WorstTrialAdmitted is the most one trial admitted, and
	// WorstTrialExpected what the guarantee allowed in that trial (the least,
	// among trials that admitted as many).
	WorstTrialAdmitted int64 `json:"worst_trial_admitted"`
	WorstTrialExpected int64 `json:"worst_trial_expected"`
	// MaxTrialExpected is the largest Expected of any trial, and
	// TrialsAboveLimit counts the trials whose guarantee allowed more than the
	// limit (a span across an aligned edge, a refill, a trial longer than a window).
	MaxTrialExpected int64 `json:"max_trial_expected"`
	TrialsAboveLimit int   `json:"trials_above_limit"`
	// Errors counts decisions that failed (Redis errors and timeouts).
	Errors int64 `json:"errors"`
	// RetriesExhausted counts requests the watch limiter denied after running
	// out of attempts: contention, not the policy, so neither is counted as
	// under-admission.
	RetriesExhausted int64 `json:"retries_exhausted"`
	// RoundTrips counts the Redis round trips of all decisions, measured on the client.
	RoundTrips int64 `json:"round_trips"`
	// AbortedTransactions counts EXECs that Redis aborted because a WATCHed key changed.
	AbortedTransactions int64 `json:"aborted_transactions"`
	// StateVerified is true when, after every trial, the key held exactly what
	// was admitted (the admitted members of a log, or the admitted count of a
	// counter); false when any trial's key did not; null when no trial could be
	// checked (the window was shorter than the trial).
	StateVerified *bool `json:"state_verified"`
	// StateMismatches counts the trials whose key did not match.
	StateMismatches int `json:"state_mismatches"`
	// TrialsOutlastingWindow counts trials whose real span reached a window,
	// so that key expiry may have wiped the client's state during them.
	TrialsOutlastingWindow int `json:"trials_outlasting_window"`
	// ReleaseSpreadMicros is the release spread over the trials, in µs.
	ReleaseSpreadMicros Spread `json:"release_spread_us"`
	// LatencyMicros is the per-decision latency, retries included, in µs,
	// from the merged histogram of every decision.
	LatencyMicros hdr.Percentiles `json:"latency_us"`
	// ElapsedMillis is the wall time of all the limiter's trials.
	ElapsedMillis int64 `json:"elapsed_ms"`
	// TrialResults has every trial, in order.
	TrialResults []Trial `json:"trial_results"`
	// Limits has one entry per limit of a limiter that enforces several on
	// one client (the multi-limit pair), each judged by its own guarantee;
	// the result's own counts are judged by the tightest. Empty otherwise.
	Limits []LimitResult `json:"limits,omitempty"`
	// Explain is the explained trial, when Config.Explain names the limiter.
	Explain *Explanation `json:"explain,omitempty"`
	// Histogram holds every decision's latency in microseconds.
	Histogram *hdrhistogram.Histogram `json:"-"`
}

// Trial is one burst.
type Trial struct {
	// Admitted counts the decisions that admitted a request.
	Admitted int64 `json:"admitted"`
	// Expected is the most a correct limiter may admit in the trial: Bound,
	// at most the requests.
	Expected int64 `json:"expected"`
	// Bound is what the limiter's guarantee allows one client over the
	// trial: Guarantee.Max over the deciding clock's span from ClockFromMillis
	// to ClockToMillis on a fresh key, plus a limit for each whole window of
	// real time the trial lasted (key expiry, on Redis's clock, may wipe a
	// client's state after a window without writes; a frozen caller clock
	// never frees it otherwise).
	Bound int64 `json:"bound"`
	// Minimum is the least a correct limiter admits: the limit, or the
	// decisions made when there were fewer (failed decisions and exhausted
	// retries were never decided by the policy).
	Minimum int64 `json:"minimum"`
	// ClockFromMillis and ClockToMillis are the clock that decides (the
	// caller's, or Redis's TIME), read before the release and after the last
	// reply, in ms since the epoch: every decision's time lies between them.
	ClockFromMillis int64 `json:"clock_from_ms"`
	ClockToMillis   int64 `json:"clock_to_ms"`
	// SpanMicros is the trial's real span, from the first send to the last reply, in µs.
	SpanMicros int64 `json:"span_us"`
	// OutlastedWindow is set when the real span reached the window (less the
	// millisecond Redis rounds expiry to).
	OutlastedWindow bool `json:"outlasted_window"`
	// Errors counts decisions that failed.
	Errors int64 `json:"errors"`
	// RetriesExhausted counts watch denials after running out of attempts.
	RetriesExhausted int64 `json:"retries_exhausted"`
	// RoundTrips is counted by a hook on the client; ReportedRoundTrips is
	// the sum of the decisions' Attempts. The two agree unless a call failed.
	RoundTrips         int64 `json:"round_trips"`
	ReportedRoundTrips int64 `json:"reported_round_trips"`
	// AbortedTransactions counts EXECs aborted because a WATCHed key changed.
	AbortedTransactions int64 `json:"aborted_transactions"`
	// ReleaseSpreadMicros is the last goroutine's first send minus the first one's, in µs.
	ReleaseSpreadMicros int64 `json:"release_spread_us"`
	// ElapsedMicros is the time from the release until the last decision returned, in µs.
	ElapsedMicros int64 `json:"elapsed_us"`
	// StateVerified is whether the key held exactly what was admitted; null
	// when the trial lasted too long for the key to be trusted.
	StateVerified *bool `json:"state_verified"`
	// State is what the key held: the log's member count or the counter's value.
	State int64 `json:"state"`
	// Limits has one entry per limit of a limiter that enforces several;
	// empty otherwise.
	Limits []LimitTrial `json:"limits,omitempty"`
	// LatencyMicros is the trial's decision latency, retries included, in
	// µs: exact nearest-rank percentiles of its decisions.
	LatencyMicros TrialLatency `json:"latency_us"`
}

// TrialLatency is one trial's decision latency, in µs.
type TrialLatency struct {
	P50 int64 `json:"p50"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// Leaked names each limiter that admitted more than its own guarantee
// allowed in some trial, with how many over: "naive over-admitted 1385";
// and each in-flight limiter that held more than its limit at once, or
// whose key ended counting slots nobody held, or fewer than were held.
func (r Report) Leaked() []string {
	var leaked []string
	for _, res := range r.Results {
		if res.OverAdmitted > 0 {
			leaked = append(leaked, fmt.Sprintf("%s over-admitted %d", res.Limiter, res.OverAdmitted))
		}
	}
	return append(leaked, inFlightLeaks(r.InFlight)...)
}
