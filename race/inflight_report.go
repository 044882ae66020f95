package race

import (
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/internal/hdr"
)

// InFlightSettings are the settings of a race of in-flight limiters, as
// reports show them; see Config for each field.
type InFlightSettings struct {
	HoldMillis     int64  `json:"hold_ms"`
	LeaseTTLMillis int64  `json:"lease_ttl_ms"`
	Faults         Faults `json:"faults"`
}

// FaultCounts count the faults dealt to holders.
type FaultCounts struct {
	// Killed counts holders killed before their release: connection
	// closed, release never sent.
	Killed int64 `json:"killed"`
	// LostReleases counts releases never sent.
	LostReleases int64 `json:"lost_releases"`
	// RetriedReleases counts releases sent twice.
	RetriedReleases int64 `json:"retried_releases"`
}

func (f *FaultCounts) add(g FaultCounts) {
	f.Killed += g.Killed
	f.LostReleases += g.LostReleases
	f.RetriedReleases += g.RetriedReleases
}

// InFlightResult is one in-flight limiter over all its trials.
type InFlightResult struct {
	// Limiter is the registry name.
	Limiter string `json:"limiter"`
	// Description says what the limiter does.
	Description string `json:"description"`
	// Atomic is whether it checks and takes a slot in one indivisible step.
	Atomic bool `json:"atomic"`
	// Expires is whether a slot whose holder never released it comes back
	// after the lease's TTL.
	Expires bool `json:"expires"`
	// Limit is the most requests in flight at once that it enforces.
	Limit int64 `json:"limit"`
	// Trials is the number of trials run.
	Trials int `json:"trials"`
	// Requests counts the acquires made, Admitted, Denied and Errors how
	// each ended.
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	Errors   int64 `json:"errors"`
	// MostInFlight is the most requests truly in flight at once in any
	// trial: admitted, and neither released, killed nor done.
	MostInFlight int64 `json:"most_in_flight"`
	// MostHeld is the most held at once in any trial by holders whose slot
	// the limiter still counted by its own rule: for the lease, holders
	// within their lease; for the counters, every holder.
	MostHeld int64 `json:"most_held"`
	// OverTrials counts the trials whose MostHeld passed the limit, and
	// OverHolders the holders admitted into such a moment, summed.
	OverTrials  int   `json:"over_trials"`
	OverHolders int64 `json:"over_holders"`
	// Leaked sums the slots the key still counted when no request held
	// one, at the end of each trial (for the lease, once every lease's TTL
	// had passed); LeakedTrials counts the trials that leaked any.
	Leaked       int64 `json:"leaked"`
	LeakedTrials int   `json:"leaked_trials"`
	// FreedTwice sums, over the trials whose key ended below the holders
	// (a release counted twice), how far below; FreedTwiceTrials counts them.
	FreedTwice       int64 `json:"freed_twice"`
	FreedTwiceTrials int   `json:"freed_twice_trials"`
	// HeldAtEnd sums the key's count as each trial ended, before any lease
	// expired: the slots of holders that never released them.
	HeldAtEnd int64 `json:"held_at_end"`
	// WrongfulDenials counts the denials made when fewer than the limit
	// could have been held (see InFlightTrial).
	WrongfulDenials int64 `json:"wrongful_denials"`
	// OutlivedLeases counts holders whose hold outlasted their lease: the
	// lease freed their slot while they still held it.
	OutlivedLeases int64 `json:"outlived_leases"`
	// Faults counts the faults dealt.
	Faults FaultCounts `json:"faults"`
	// LatencyMicros is the acquire latency in µs, from the merged histogram
	// of every acquire.
	LatencyMicros hdr.Percentiles `json:"latency_us"`
	// ElapsedMillis is the wall time of all the limiter's trials.
	ElapsedMillis int64 `json:"elapsed_ms"`
	// TrialResults has every trial, in order.
	TrialResults []InFlightTrial `json:"trial_results"`
	// Explain is the explained trial, when Config.Explain names the limiter.
	Explain *Explanation `json:"explain,omitempty"`
	// Histogram holds every acquire's latency in microseconds.
	Histogram *hdrhistogram.Histogram `json:"-"`
}

// InFlightTrial is one trial of an in-flight limiter.
//
// Each admitted request is an interval of time. It was surely held from
// its acquire's reply until its release was sent (or it was killed, or its
// release dropped); for the lease, no later than its lease surely lasted
// (the acquire's send plus the TTL, less a thousandth of it and a
// millisecond for the clocks). It may have been held from its acquire's
// send until its release's reply (until the trial's end when none came);
// the slot of a holder that never released it, until its lease surely
// ended for the lease, and for the counters no longer than its holder.
type InFlightTrial struct {
	// Requests counts the acquires made, and Admitted, Denied and Errors
	// how each ended.
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Denied   int64 `json:"denied"`
	Errors   int64 `json:"errors"`
	// MostInFlight is the most admitted requests in flight at once: their
	// sure intervals, the lease's not cut at its TTL.
	MostInFlight int64 `json:"most_in_flight"`
	// MostHeld is the most sure intervals at once, the lease's cut at its
	// TTL; above the limit, the limiter over-admitted (Over), and
	// OverHolders counts the holders admitted into such a moment.
	MostHeld    int64 `json:"most_held"`
	Over        bool  `json:"over"`
	OverHolders int64 `json:"over_holders"`
	// HeldAtEnd is the key's count as the trial ended, every holder gone.
	HeldAtEnd int64 `json:"held_at_end"`
	// Leaked is the key's count against the true holders (none) at the
	// end: for the lease, once every lease's TTL had passed, or as soon as
	// none counted. Negative when the key counted fewer: a release counted
	// twice.
	Leaked int64 `json:"leaked"`
	// LeaseWaitMicros is how long the trial waited, once its goroutines
	// were done, for the leases to expire; 0 for the counters, and when
	// none counted.
	LeaseWaitMicros int64 `json:"lease_wait_us"`
	// WrongfulDenials counts the denials at moments when fewer than the
	// limit could have been held: fewer than the limit of the intervals a
	// request may have been held in met the denial's own, from its send to
	// its reply.
	WrongfulDenials int64 `json:"wrongful_denials"`
	// OutlivedLeases counts holders still holding after their lease had
	// surely expired (the lease only).
	OutlivedLeases int64 `json:"outlived_leases"`
	// Faults counts the faults dealt in the trial.
	Faults FaultCounts `json:"faults"`
	// LatencyMicros is the trial's acquire latency, in µs: exact
	// nearest-rank percentiles.
	LatencyMicros TrialLatency `json:"latency_us"`
	// ElapsedMicros is the time from the release until the last goroutine
	// was done, in µs.
	ElapsedMicros int64 `json:"elapsed_us"`
}

// inFlightLeaks says what each in-flight limiter leaked: "semaphore-naive
// held 37 at once over a limit of 5".
func inFlightLeaks(rs []InFlightResult) []string {
	var leaked []string
	for _, r := range rs {
		if r.OverTrials > 0 {
			leaked = append(leaked, fmt.Sprintf("%s held %d at once over a limit of %d", r.Limiter, r.MostHeld, r.Limit))
		}
		if r.Leaked > 0 {
			leaked = append(leaked, fmt.Sprintf("%s leaked %d slots", r.Limiter, r.Leaked))
		}
		if r.FreedTwice > 0 {
			leaked = append(leaked, fmt.Sprintf("%s freed %d slots twice", r.Limiter, r.FreedTwice))
		}
	}
	return leaked
}
