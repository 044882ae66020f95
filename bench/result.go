package bench

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/plural"
)

// Settings is the configuration as reports show it.
type Settings struct {
	Model          string  `json:"model"` // "open" (a fixed schedule) or "closed" (back to back)
	Method         string  `json:"method"`
	RatePerSec     float64 `json:"rate_per_sec"`
	Connections    int     `json:"connections"`
	DurationMillis int64   `json:"duration_ms"`
	Requests       int64   `json:"requests"`
	WarmupMillis   int64   `json:"warmup_ms"`
	Consumers      int     `json:"consumers"`
	ConsumerHeader string  `json:"consumer_header"`
	// Identities are the identities sent, by consumer number, when they
	// are not consumer-0 … (--consumers-from, or their source addresses
	// with SourceIPs; for a merge --as-one-run, every identity its runs
	// sent, then each run's consumer-N, named by run when two clash);
	// omitted then.
	Identities []string `json:"identities,omitempty"`
	// IdentityIn says where the requests carry the identity: "URL",
	// "body", a header's name, each followed by " (JWT)" when a token
	// minted for the consumer carries it.
	IdentityIn []string `json:"identity_in,omitempty"`
	// Pseudonyms, when set, says that Identities, and every consumer the
	// audit names by its identity, are pseudonyms that stand for the
	// identities sent (pseudonyms.go): a result holds the identities of
	// a file only when the run was told to show them. It is
	// "hmac-sha256:" and a fingerprint of the pseudonyms' key, the same for
	// runs of one list of identities. Empty when the identities are shown
	// (or are consumer-N, or source addresses), and in results written
	// before pseudonyms.
	Pseudonyms string `json:"pseudonyms,omitempty"`
	// SourceIPs are the addresses the consumers were sent from, one each,
	// as --source-ips reads them ("127.0.0.2-127.0.0.60"); empty when
	// they were not bound to addresses.
	SourceIPs string `json:"source_ips,omitempty"`
	// Domain and Descriptors are what bench rls sent: the call's domain,
	// and its descriptors as --descriptor takes them ({consumer} in a
	// value); empty for bench http. DescriptorSets, in place of
	// Descriptors, are a mix of calls as --call takes them:
	// WEIGHT:DESCRIPTOR[;DESCRIPTOR…].
	Domain         string   `json:"domain,omitempty"`
	Descriptors    []string `json:"descriptors,omitempty"`
	DescriptorSets []string `json:"descriptor_sets,omitempty"`
	// Threads is the number of threads the load generator ran on.
	Threads int `json:"threads"`
	// TimeoutMillis bounds one request.
	TimeoutMillis int64 `json:"timeout_ms"`
	// Shard of Shards (from 0) is this load machine's part of a run that
	// several share; RatePerSec and Connections are then its share, and
	// Requests too in the closed model (in the open one it bounds the whole
	// run's schedule).
	// SharedConsumers is set when every shard sends every consumer.
	Shard           int  `json:"shard"`
	Shards          int  `json:"shards"`
	SharedConsumers bool `json:"shared_consumers"`
	// StartAt is the wall-clock time the run was told to begin at
	// (RFC 3339), empty when it began at once.
	StartAt string `json:"start_at"`
}

// ErrorKind counts the transport errors of one kind.
type ErrorKind struct {
	Count int64 `json:"count"`
	// First is the message of the first one.
	First string `json:"first,omitempty"`
}

// Result is one run, measured after the warm-up.
type Result struct {
	Command string `json:"command"` // "bench_http" or "bench_rls"
	Target  string `json:"target"`
	// RunID is the run this result is part of: every shard of one run has
	// the same (HTTPConfig.RunID, or a hash of the settings they share),
	// and report merge merges only results of one run. Empty in results
	// written before results carried one.
	RunID string `json:"run_id"`
	// Instance tells this run from every other, shards of one run and runs
	// of one command one after the other (which share a run id) alike:
	// random, 16 hex digits. Empty for a merge, whose Parts say which runs
	// it holds, and in results written before instances.
	Instance string `json:"instance,omitempty"`
	// Parts are the runs a merge holds, each one load machine's run as it
	// claimed to be; empty for a run, whose part is itself.
	Parts  []Part   `json:"parts,omitempty"`
	Config Settings `json:"config"`
	// StartedUnixMillis is the wall-clock time at which the measured run
	// began, so that runs from several machines can be lined up.
	StartedUnixMillis int64 `json:"started_unix_ms"`
	// Requests is the number of measured requests that completed or failed.
	Requests int64 `json:"requests"`
	// DurationSeconds is the measured time, warm-up excluded.
	DurationSeconds float64 `json:"duration_s"`
	ThroughputRPS   float64 `json:"throughput_rps"`
	// StatusCounts counts responses by status code.
	StatusCounts map[string]int64 `json:"status_counts"`
	// Errors counts transport errors and timeouts; ErrorKinds splits them
	// by kind: refused, reset, timeout, tls, protocol, other.
	Errors     int64                `json:"errors"`
	ErrorKinds map[string]ErrorKind `json:"error_kinds"`
	// Bytes counts the bytes of the response bodies.
	Bytes int64 `json:"bytes"`
	// WarmupRequests were sent during the warm-up and are not in the figures.
	WarmupRequests int64 `json:"warmup_requests"`
	// Unsent counts the open model's requests that were due during the run
	// but never sent, because their connection was still waiting for an
	// earlier response when the run ended.
	Unsent int64 `json:"unsent"`
	// RateShortfall is set when the open model achieved under 99% of the rate.
	RateShortfall bool `json:"rate_shortfall"`
	// LatencyMicros is the latency of every response, measured from when
	// each request should have been sent (open model) or was sent (closed
	// model), in µs; the 2xx, 429 and other rows split it by status.
	// LatencyErrorMicros is apart: how long the transport errors took to
	// fail, which is no response time. Each Count is the number of responses
	// (or errors) behind it.
	LatencyMicros      hdr.Percentiles `json:"latency_us"`
	Latency2xxMicros   hdr.Percentiles `json:"latency_2xx_us"`
	Latency429Micros   hdr.Percentiles `json:"latency_429_us"`
	LatencyOtherMicros hdr.Percentiles `json:"latency_other_us"`
	LatencyErrorMicros hdr.Percentiles `json:"latency_error_us"`
	// SendLagMicros is actual minus intended send time, in µs.
	SendLagMicros hdr.Percentiles `json:"send_lag_us"`
	// Timeline is the run interval by interval.
	Timeline Timeline `json:"timeline"`
	// Histograms keeps every histogram, HdrHistogram V2 compressed and base64
	// encoded, so that runs from several machines can be merged exactly.
	Histograms map[string]string `json:"histograms"`
	// Audit is what the admission audit found; null without --expect-limit.
	Audit *audit.Audit `json:"audit"`
	// InFlightAudit is what the in-flight audit found; null without
	// --expect-in-flight.
	InFlightAudit *audit.InFlightAudit `json:"in_flight_audit,omitempty"`
	// AuditNote says why a merged result has no audit, when it has none.
	AuditNote string `json:"audit_note,omitempty"`
	// AuditHints say what the load missed, when what was sent shows it,
	// and where the identities could go for the audit to test what was
	// meant: a header or query parameter that the rules keep a limit per
	// value of and every request sent alike, or the URL's query, for a
	// gateway that seems to share its limit across the identities sent.
	AuditHints []string `json:"audit_hints,omitempty"`
	// AuditSamples keeps what the audit judged, for merges; only with
	// --expect-limit.
	AuditSamples *audit.Samples `json:"audit_samples,omitempty"`

	all       *hdrhistogram.Histogram
	responses []Response
}

// Responses are the measured requests, kept with KeepResponses, in no
// particular order; nil without it.
func (r Result) Responses() []Response { return r.responses }

// Failures counts the run's failed requests, which --max-error-rate
// weighs: its transport errors, and its responses other than 2xx and 429
// (a 400, a 401 or a 503 alike: none says what the limit decided).
func (r Result) Failures() int64 {
	n := r.Errors
	for code, c := range r.StatusCounts {
		if failed(code) {
			n += c
		}
	}
	return n
}

// FailedStatuses lists the responses other than 2xx and 429 by status, in
// status order, as "400 × 240, 503 × 2"; empty when there were none.
func (r Result) FailedStatuses() string {
	return plural.Tally(r.StatusCounts, failed)
}

// failed says whether a response of status code (as StatusCounts keys it)
// is a failure of the run.
func failed(code string) bool {
	return !strings.HasPrefix(code, "2") && code != "429"
}

// Unanswered is an error, naming the kinds of transport error, when the
// run sent requests and not one got a response (every one was refused,
// reset or timed out): then there is nothing to measure or audit. It is
// nil otherwise.
func (r Result) Unanswered() error {
	if r.Requests == 0 || r.Errors < r.Requests {
		return nil
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
		e := r.ErrorKinds[k]
		if e.Count == 0 {
			continue
		}
		kind := k + " " + strconv.FormatInt(e.Count, 10)
		if e.First != "" {
			kind += " (first: " + e.First + ")"
		}
		kinds = append(kinds, kind)
	}
	return fmt.Errorf("no request got a response: %d of %d failed: %s", r.Errors, r.Requests, strings.Join(kinds, "; "))
}

// Timeline is a run cut into intervals by when each response ended.
type Timeline struct {
	// IntervalMillis is the length of an interval; it doubles, with
	// neighbours merged, when a run would have more than 1,000.
	IntervalMillis int64      `json:"interval_ms"`
	Intervals      []Interval `json:"intervals"`
}

// Interval is one interval of a timeline.
type Interval struct {
	// StartMillis is when it began, since the measured run began.
	StartMillis int64 `json:"start_ms"`
	// Requests counts responses and errors that ended in it.
	Requests      int64   `json:"requests"`
	ThroughputRPS float64 `json:"throughput_rps"`
	// Status counts them by class: 1xx to 5xx (4xx without 429), 429 and
	// transport errors.
	Status map[string]int64 `json:"status"`
	// LatencyMicros are the percentiles of the responses that ended in it
	// (transport errors left out), in µs, at two significant digits.
	LatencyMicros struct {
		P50 int64 `json:"p50"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"latency_us"`
	// Histogram is the interval's histogram of response latencies (µs), HdrHistogram V2
	// compressed and base64 encoded, for exact merges.
	Histogram string `json:"histogram,omitempty"`
}

// classNames name the status classes in a timeline.
var classNames = [numClasses]string{"errors", "1xx", "2xx", "3xx", "4xx", "5xx", "429"}

// Histogram is the latency histogram of all responses (transport errors
// left out), in µs.
func (r Result) Histogram() *hdrhistogram.Histogram { return r.all }

// newResult is what the tally measured of a run of load l (with its
// defaults), elapsed long; the caller adds what its transport knows (the
// command, the target, how the consumers were sent).
func newResult(l load, t *tally, elapsed time.Duration) Result {
	model := "closed"
	if l.Rate > 0 {
		model = "open"
	}
	shards := max(l.Shards, 1)
	rate := l.Rate / float64(shards) // this shard's part
	startAt := ""
	if !l.StartAt.IsZero() {
		startAt = l.StartAt.UTC().Format(time.RFC3339Nano)
	}
	r := Result{
		Config: Settings{Model: model, RatePerSec: rate, Connections: l.Connections,
			DurationMillis: l.Duration.Milliseconds(), Requests: l.Requests,
			WarmupMillis: l.Warmup.Milliseconds(), Consumers: l.Consumers,
			Threads: threads(), TimeoutMillis: l.Timeout.Milliseconds(), Shard: l.Shard, Shards: shards,
			SharedConsumers: l.SharedConsumers, StartAt: startAt},
		Requests:           t.all.TotalCount() + t.failed.TotalCount(),
		DurationSeconds:    elapsed.Seconds(),
		StatusCounts:       map[string]int64{},
		ErrorKinds:         map[string]ErrorKind{},
		WarmupRequests:     t.warmup,
		LatencyMicros:      hdr.PercentilesOf(t.all),
		Latency2xxMicros:   hdr.PercentilesOf(t.ok),
		Latency429Micros:   hdr.PercentilesOf(t.limited),
		LatencyOtherMicros: hdr.PercentilesOf(t.other),
		LatencyErrorMicros: hdr.PercentilesOf(t.failed),
		SendLagMicros:      hdr.PercentilesOf(t.lag),
		Histograms:         map[string]string{},
		all:                t.all,
	}
	if elapsed > 0 {
		r.ThroughputRPS = float64(r.Requests) / elapsed.Seconds()
	}
	if rate > 0 && r.ThroughputRPS < 0.99*rate {
		r.RateShortfall = true
	}
	for code, n := range t.status {
		if n > 0 {
			r.StatusCounts[strconv.Itoa(code)] = n
		}
	}
	for k, n := range t.kinds {
		if n > 0 {
			r.ErrorKinds[kindNames[k]] = ErrorKind{Count: n}
			r.Errors += n
		}
	}
	for name, h := range map[string]*hdrhistogram.Histogram{"all": t.all, "2xx": t.ok, "429": t.limited,
		"other": t.other, "errors": t.failed, "send_lag": t.lag} {
		if b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
			r.Histograms[name] = string(b) // already base64, as HdrHistogram's logs keep it
		}
	}
	r.Timeline = t.timeline.result()
	return r
}

// result renders the timeline for a Result.
func (t *timeline) result() Timeline {
	tl := Timeline{IntervalMillis: t.interval.Milliseconds(), Intervals: []Interval{}}
	for i, s := range t.slots {
		iv := Interval{StartMillis: int64(i) * tl.IntervalMillis, Status: map[string]int64{}}
		for c, n := range s.counts {
			iv.Requests += n
			if n > 0 {
				iv.Status[classNames[c]] = n
			}
		}
		length := t.interval
		if from := time.Duration(i) * t.interval; t.end > 0 && from+length > t.end {
			length = t.end - from // the run ended inside it
		}
		iv.ThroughputRPS = float64(iv.Requests) / length.Seconds()
		iv.LatencyMicros.P50, iv.LatencyMicros.P99, iv.LatencyMicros.Max = s.hist.ValueAtPercentile(50), s.hist.ValueAtPercentile(99), s.hist.Max()
		if b, err := s.hist.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
			iv.Histogram = string(b)
		}
		tl.Intervals = append(tl.Intervals, iv)
	}
	return tl
}

// identity is consumer c's identity as the run sent it.
func (s Settings) identity(c int32) string {
	if int(c) < len(s.Identities) {
		return s.Identities[c]
	}
	return consumerName(c)
}
