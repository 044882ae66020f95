package bench

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/hdr"
)

// Merge combines shards of one run (results with the same run id, each
// claiming shards of its own) from several load machines into one
// result: counts add up, and the percentiles come from the merged
// histograms, so they are exact, not averages of percentiles. Throughput is the sum of the runs' (they ran at
// the same time); the duration is the longest. Timelines are lined up by
// the wall-clock time each run began. Results of different runs, or
// without a run id when there are several, are refused with a *RunsError,
// and results that claim the same shard of one run (two runs of one
// command one after the other, each the whole run) with a *ShardsError;
// MergeWith merges them with AsOneRun. A run given twice is refused
// always (a *ShardsError whose Twice is set).
//
// When every run was audited against the same limit and kept its samples,
// the merged result carries one audit over all of them, as if one machine
// had sent everything: each run's responses are placed by the time it
// began, and every flight is widened by tolerance on both sides, so that
// clocks that disagree by up to that much cannot make an honest limiter
// look leaky. Otherwise AuditNote says why there is no audit.
func Merge(runs []Result, tolerance time.Duration) (Result, error) {
	return MergeWith(runs, MergeOptions{Tolerance: tolerance})
}

// MergeOptions say how MergeWith merges.
type MergeOptions struct {
	// Tolerance is how far the load machines' clocks may disagree: every
	// flight is widened by it on both sides.
	Tolerance time.Duration
	// AsOneRun merges results of different runs (or without a run id, or
	// claiming the same shard of one run) as if they were one. A consumer
	// with an identity of its own (Settings.Identities) is one consumer
	// whichever runs sent it; those named consumer-N are each run's own,
	// followed by the run's label ("consumer-0 (a.json)") when two runs'
	// names clash. Runs whose identities are pseudonyms of different
	// lists (Settings.Pseudonyms) are refused: one identity would be two
	// consumers. The runs must have measured one endpoint (their targets
	// may differ in the query), and may hold 1,000,000 consumers in all.
	AsOneRun bool
	// Labels name the runs, in order (their files), in consumers' names
	// and in errors; "run N" without.
	Labels []string
}

// MergeWith is Merge with options.
func MergeWith(runs []Result, opts MergeOptions) (Result, error) {
	if len(runs) == 0 {
		return Result{}, errors.New("nothing to merge")
	}
	for i, r := range runs {
		switch {
		case r.Command != "bench_http" && r.Command != "bench_rls":
			return Result{}, fmt.Errorf("run %d is a %q result, not bench_http or bench_rls", i+1, r.Command)
		case r.Command != runs[0].Command:
			return Result{}, fmt.Errorf("run %d is a %s result, run 1 a %s one: merge results of one command", i+1, r.Command, runs[0].Command)
		}
	}
	if !opts.AsOneRun {
		if err := oneRun(runs); err != nil {
			return Result{}, err
		}
	}
	if err := claims(runs, true); err != nil { // never, not even as one run
		return Result{}, err
	}
	tolerance := opts.Tolerance
	hists := map[string]*hdrhistogram.Histogram{}
	for _, name := range []string{"all", "2xx", "429", "other", "errors", "send_lag"} {
		hists[name] = hdr.New()
	}
	t := newTally(0)
	var first [numKinds]string
	var bytes int64
	var longest float64
	var rps float64
	for i, r := range runs {
		if !sameEndpoint(r.Target, runs[0].Target, opts.AsOneRun) {
			return Result{}, fmt.Errorf("run %d measured %s, run 1 %s: merge runs of one target", i+1, r.Target, runs[0].Target)
		}
		if err := r.mergeable(runs[0].StartedUnixMillis); err != nil {
			return Result{}, fmt.Errorf("run %d: %w", i+1, err)
		}
		for name, h := range hists {
			enc, ok := r.Histograms[name]
			if !ok {
				return Result{}, fmt.Errorf("run %d has no %q histogram (was it written with --output json?)", i+1, name)
			}
			d, err := hdrhistogram.Decode([]byte(enc))
			if err != nil {
				return Result{}, fmt.Errorf("run %d: histogram %q: %w", i+1, name, err)
			}
			h.Merge(d)
		}
		for k, v := range r.StatusCounts {
			code, err := strconv.Atoi(k)
			if err != nil || code < 0 || code >= len(t.status) {
				return Result{}, fmt.Errorf("run %d: status %q", i+1, k)
			}
			t.status[code] += v
		}
		kinds := r.ErrorKinds
		if len(kinds) == 0 && r.Errors > 0 {
			kinds = map[string]ErrorKind{"other": {Count: r.Errors}}
		}
		for name, e := range kinds {
			k := slices.Index(kindNames[:], name)
			if k < 0 {
				return Result{}, fmt.Errorf("run %d: error kind %q", i+1, name)
			}
			t.kinds[k] += e.Count
			if first[k] == "" {
				first[k] = e.First
			}
		}
		bytes += r.Bytes
		t.warmup += r.WarmupRequests
		longest = max(longest, r.DurationSeconds)
		rps += r.ThroughputRPS
	}
	t.all, t.ok, t.limited, t.other, t.failed, t.lag = hists["all"], hists["2xx"], hists["429"], hists["other"], hists["errors"], hists["send_lag"]
	lay, err := oneRunLayout(runs)
	if opts.AsOneRun {
		lay, err = apartLayout(runs, opts.Labels)
	}
	if err != nil {
		return Result{}, err
	}
	cfg := HTTPConfig{Target: mergedTarget(runs), Method: runs[0].Config.Method, Consumers: lay.total}
	startAt := runs[0].Config.StartAt
	for _, r := range runs {
		c := r.Config
		cfg.Rate += c.RatePerSec
		cfg.Connections += c.Connections
		cfg.Timeout = max(cfg.Timeout, time.Duration(c.TimeoutMillis)*time.Millisecond)
		cfg.Warmup = max(cfg.Warmup, time.Duration(c.WarmupMillis)*time.Millisecond)
		cfg.SharedConsumers = cfg.SharedConsumers || c.SharedConsumers
		if c.Model == "open" { // each shard's Requests bounds the whole run
			cfg.Requests = max(cfg.Requests, c.Requests)
		} else {
			cfg.Requests += c.Requests
		}
		if c.StartAt != startAt {
			startAt = ""
		}
	}
	cfg.ConsumerHeader = runs[0].Config.ConsumerHeader
	cfg.Duration = time.Duration(longest * float64(time.Second))
	cfg.Interval = time.Duration(runs[0].Timeline.IntervalMillis) * time.Millisecond
	t.timeline = timeline{interval: cfg.Interval}
	began := runs[0].StartedUnixMillis
	for _, r := range runs {
		began = min(began, r.StartedUnixMillis)
	}
	if err := mergeTimelines(&t.timeline, runs, began); err != nil {
		return Result{}, err
	}
	res := cfg.result(t, cfg.Duration)
	res.Command = runs[0].Command
	res.StartedUnixMillis = began
	res.RunID = runs[0].RunID
	if opts.AsOneRun && len(runs) > 1 {
		res.RunID = mergedRunID(runs)
	}
	res.Config.Identities, res.Config.Pseudonyms = lay.names, lay.pseudonyms
	for _, r := range runs {
		res.Parts = append(res.Parts, r.parts()...)
	}
	res.Config.SourceIPs = runs[0].Config.SourceIPs
	if lay.apart {
		res.Config.SourceIPs = "" // the names say each consumer's
	}
	res.Config.StartAt = startAt
	res.Config.IdentityIn = runs[0].Config.IdentityIn
	res.Config.Threads = 0
	for _, r := range runs {
		res.Config.Threads += r.Config.Threads
	}
	ma, err := mergeAudits(runs, lay, began, tolerance)
	if err != nil {
		return Result{}, err
	}
	res.Audit, res.AuditNote, res.AuditSamples = ma.Audit, ma.Note, ma.Samples
	res.Bytes = bytes
	for k, msg := range first {
		if e, ok := res.ErrorKinds[kindNames[k]]; ok {
			e.First = msg
			res.ErrorKinds[kindNames[k]] = e
		}
	}
	res.ThroughputRPS = rps
	res.RateShortfall = cfg.Rate > 0 && rps < 0.99*cfg.Rate
	for _, r := range runs {
		res.Unsent += r.Unsent
	}
	return res, nil
}

// maxStartSpread bounds how far apart the runs of one merge began.
const maxStartSpread = 24 * time.Hour

// mergeable checks what a result file may say that a run never measures:
// a count below zero, more consumers than a run sends, an audit of a limit
// no run can expect, or a start further than maxStartSpread from the first
// run's (first, in Unix ms).
func (r Result) mergeable(first int64) error {
	negative := r.Requests < 0 || r.Errors < 0 || r.Bytes < 0 || r.WarmupRequests < 0 || r.Unsent < 0
	for _, n := range r.StatusCounts {
		negative = negative || n < 0
	}
	for _, e := range r.ErrorKinds {
		negative = negative || e.Count < 0
	}
	for _, iv := range r.Timeline.Intervals {
		for _, n := range iv.Status {
			negative = negative || n < 0
		}
	}
	spread := maxStartSpread.Milliseconds()
	switch {
	case negative:
		return errors.New("a count below zero")
	case r.InFlightAudit != nil:
		return errors.New("it has an in-flight audit (--expect-in-flight), which needs every request of a consumer from one run on one machine: report merge does not merge it")
	case r.Config.Consumers < 0 || r.Config.Consumers > MaxConsumers:
		return fmt.Errorf("%d consumers: want 0 to %d", r.Config.Consumers, MaxConsumers)
	case r.Config.checkIdentities() != nil:
		return r.Config.checkIdentities()
	case first < 0 || first > 1<<53 || r.StartedUnixMillis < first-spread || r.StartedUnixMillis > first+spread:
		return fmt.Errorf("began at %d ms, more than %s from run 1 (%d ms): merge runs of one test", r.StartedUnixMillis, maxStartSpread, first)
	}
	if err := r.checkNames(); err != nil {
		return err
	}
	if r.Audit != nil {
		if len(r.Audit.Limits) > audit.MaxLimits {
			return fmt.Errorf("audit of %d limits: at most %d", len(r.Audit.Limits), audit.MaxLimits)
		}
		for i := range r.Audit.Limits {
			if r.Audit.Limits[i].Unlimited {
				continue // no policy: never judged
			}
			if _, err := r.Audit.Limits[i].Policy(); err != nil {
				return err
			}
		}
	}
	return nil
}

// mergeTimelines adds the runs' intervals into t, each run placed by when
// it began. Runs with other interval lengths, intervals without a
// histogram, or runs so far apart that the merged timeline would be longer
// than two runs' (each interval costs a histogram), leave it out.
func mergeTimelines(t *timeline, runs []Result, began int64) error {
	if t.interval <= 0 {
		*t = timeline{}
		return nil
	}
	for i, r := range runs {
		if time.Duration(r.Timeline.IntervalMillis)*time.Millisecond != t.interval {
			*t = timeline{} // not comparable interval by interval
			return nil
		}
		shift := int((r.StartedUnixMillis - began + t.interval.Milliseconds()/2) / t.interval.Milliseconds())
		for k, iv := range r.Timeline.Intervals {
			if iv.Histogram == "" {
				*t = timeline{}
				return nil
			}
			h, err := hdrhistogram.Decode([]byte(iv.Histogram))
			if err != nil {
				return fmt.Errorf("run %d: interval %d: %w", i+1, k, err)
			}
			j := shift + k
			if j >= 2*maxSlots { // runs too far apart, or too long, to draw as one
				*t = timeline{}
				return nil
			}
			for len(t.slots) <= j {
				t.slots = append(t.slots, slot{hist: newSlotHist()})
			}
			t.slots[j].hist.Merge(h)
			for c, name := range classNames {
				t.slots[j].counts[c] += iv.Status[name]
			}
		}
	}
	return nil
}

// mergeAudits audits the runs' samples as one run, through the audit, or
// says why it cannot.
func mergeAudits(runs []Result, lay layout, began int64, tolerance time.Duration) (audit.Merged, error) {
	parts := make([]audit.Part, len(runs))
	for i, r := range runs {
		parts[i] = audit.Part{Audit: r.Audit, Samples: r.AuditSamples, Offset: time.Duration(r.StartedUnixMillis-began) * time.Millisecond,
			Consumers: max(lay.total, 1), Rename: lay.of[i]} // an anonymous run's requests are consumer 0's
		if lay.apart {
			parts[i].Consumers = max(r.Config.Consumers, 1)
		}
	}
	return audit.Merge(parts, audit.Merging{Tolerance: tolerance, Consumers: max(lay.total, 1), Name: lay.namer(),
		Service: runs[0].Command == "bench_rls", Several: runs[0].Config.severalPerCall()})
}

// sameEndpoint says whether two runs' targets can be merged: the same
// URL, or with anyQuery the same but for the query (which may carry the
// identity).
func sameEndpoint(a, b string, anyQuery bool) bool {
	if a == b {
		return true
	}
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	return anyQuery && errA == nil && errB == nil &&
		ua.Scheme == ub.Scheme && ua.Host == ub.Host && ua.Path == ub.Path
}

// mergedTarget is the runs' target, or without its query when their
// queries differ.
func mergedTarget(runs []Result) string {
	t := runs[0].Target
	for _, r := range runs {
		if r.Target != t {
			if u, err := url.Parse(t); err == nil {
				u.RawQuery = ""
				return u.String()
			}
		}
	}
	return t
}
