package bench

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/audit"
)

// fuzzRun is a small audited run as bench http writes it: histograms, a
// timeline, an audit and its samples, begun at start (Unix ms).
func fuzzRun(start int64, statuses ...int32) []byte {
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/", Method: "GET", Rate: 10, Connections: 2, Duration: 2 * time.Second,
		Consumers: 2, ConsumerHeader: "X-Consumer-Id", Interval: time.Second, Shards: 1, ExpectLimit: 2, ExpectWindow: time.Second}
	t := newTally(cfg.Interval)
	var events []event
	var rec audit.Record
	for i, status := range statuses {
		done := time.Duration(i+1) * 150 * time.Millisecond
		events = append(events, event{done: done, latency: 900 + int64(i)*10, lag: 5, status: status, kind: kindReset})
		if status != 0 {
			var f audit.Fields // RateLimit-Limit: 2, and what remains
			f.Set([]byte("RateLimit-Limit"), []byte("2"))
			f.Set([]byte("RateLimit-Remaining"), []byte(strconv.Itoa(i%3)))
			f.Set([]byte("RateLimit-Reset"), []byte("1"))
			rec.AddResponse(audit.NewSample(i%2, done-time.Millisecond, done, int(status)), &f, nil, nil)
		}
	}
	t.add(events)
	res := cfg.result(t, cfg.Duration)
	res.StartedUnixMillis = start
	res.RunID = cfg.runID()
	res.Audit, res.AuditSamples = judged(rec, cfg.ExpectLimit, cfg.ExpectWindow, cfg.Consumers)
	b, _ := json.Marshal(res)
	return b
}

// asShard is the result data as shard i of n of its run claims it.
func asShard(data []byte, i, n int) []byte {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		panic(err)
	}
	r.Config.Shard, r.Config.Shards = i, n
	b, _ := json.Marshal(r)
	return b
}

// FuzzMerge merges result files as report merge reads them, from any
// bytes: one or two runs, each decoded from JSON, among them runs whose
// counts, consumers, start or audit no run measures. A merge either fails
// with an error or is a result with no negative count, that can be
// written and merged again; it never panics nor asks for memory without
// bound (the fuzzing process would be killed).
func FuzzMerge(f *testing.F) {
	a := asShard(fuzzRun(1767225600000, 200, 200, 429, 503, 0, 200), 0, 2)
	b := asShard(fuzzRun(1767225600250, 200, 429, 429, 200), 1, 2)
	f.Add(a, b, uint16(5))
	f.Add(a, asShard(b, 0, 2), uint16(5)) // two claims of one shard
	f.Add(a, []byte(nil), uint16(0))
	f.Add(b, a, uint16(1000))
	for _, mutate := range []func(*Result){
		func(r *Result) { r.StatusCounts["200"] = -5 },
		func(r *Result) { r.ErrorKinds["reset"] = ErrorKind{Count: -3} },
		func(r *Result) { r.Bytes, r.Unsent, r.WarmupRequests = -1, -1, -1 },
		func(r *Result) { r.Timeline.Intervals[0].Status["2xx"] = -7 },
		func(r *Result) { r.StartedUnixMillis = math.MaxInt64 },
		func(r *Result) { r.StartedUnixMillis += 3_600_000 },
		func(r *Result) { r.Config.Consumers = -1 },
		func(r *Result) { r.Config.Consumers = 1 << 50 },
		func(r *Result) { r.Audit.Limits[0].Limit, r.Audit.Limits[0].WindowMillis = 0, 0 },
		func(r *Result) { r.Audit.Limits[0].WindowMillis = -1000 },
		func(r *Result) { r.Audit.Limits[0].Limit = math.MaxInt64 },
		func(r *Result) { r.Audit.Limits = nil },
		func(r *Result) { r.Audit.CompleteFromMillis = math.MinInt64 },
		func(r *Result) { r.RunID = "another-run" },
		func(r *Result) { r.RunID = "" },
		func(r *Result) { r.Config.Identities = []string{"10.0.0.1", "10.0.0.2"} },
		func(r *Result) { r.Config.Identities = []string{"consumer-0", "\x1b[2J"} },
		func(r *Result) { r.Config.Identities = []string{"only one"} },
	} {
		var r Result
		_ = json.Unmarshal(b, &r)
		mutate(&r)
		hostile, _ := json.Marshal(r)
		f.Add(a, hostile, uint16(5))
		f.Add(hostile, hostile, uint16(5))
	}
	f.Add([]byte(`{"command":"bench_http","histograms":{}}`), []byte(nil), uint16(0))
	f.Add([]byte(`{"command":"race"}`), a, uint16(0))
	f.Fuzz(func(t *testing.T, first, second []byte, toleranceMillis uint16) {
		var runs []Result
		for _, data := range [][]byte{first, second} {
			if len(data) == 0 {
				continue
			}
			var r Result
			if json.Unmarshal(data, &r) != nil {
				return
			}
			runs = append(runs, r)
		}
		tolerance := time.Duration(toleranceMillis) * time.Millisecond
		// As shards of one run, and as runs apart merged as one.
		if m, err := Merge(runs, tolerance); err == nil {
			checkMerged(t, m)
		}
		if m, err := MergeWith(runs, MergeOptions{Tolerance: tolerance, AsOneRun: true, Labels: []string{"a.json", "b.json"}}); err == nil {
			checkMerged(t, m)
		}
	})
}

// checkMerged fails t when m has a negative count, or cannot be written,
// read back and merged again.
func checkMerged(t *testing.T, m Result) {
	t.Helper()
	negative := m.Requests < 0 || m.Errors < 0 || m.Bytes < 0 || m.WarmupRequests < 0 || m.Unsent < 0
	for _, n := range m.StatusCounts {
		negative = negative || n < 0
	}
	for _, e := range m.ErrorKinds {
		negative = negative || e.Count < 0
	}
	for _, iv := range m.Timeline.Intervals {
		negative = negative || iv.Requests < 0
		for _, n := range iv.Status {
			negative = negative || n < 0
		}
	}
	if m.Audit != nil {
		negative = negative || m.Audit.Samples < 0
		for _, l := range m.Audit.Limits {
			negative = negative || l.OverAdmitted < 0 || l.UnderAdmitted < 0 || l.Headers.Checked < 0 || l.Headers.Violations < 0
		}
	}
	if negative {
		t.Fatalf("merged a negative count: %+v", m)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("the merge cannot be written: %v", err)
	}
	var again Result
	if err := json.Unmarshal(data, &again); err != nil {
		t.Fatalf("the merge written cannot be read: %v", err)
	}
	if _, err := Merge([]Result{again}, 0); err != nil {
		t.Fatalf("the merge cannot be merged again: %v", err)
	}
}

// judged is what a run keeps of its audit of rec by limit per window (the
// sliding-window rule) on each of consumers' own counters: the audit and
// its samples.
func judged(rec audit.Record, limit int64, window time.Duration, consumers int) (*audit.Audit, *audit.Samples) {
	exp, _ := audit.ExpectationOf(algorithms.Policy{Limit: limit, Window: window}, "")
	exps := []audit.Expectation{exp}
	m := audit.EveryConsumer(rec.Samples, len(exps), consumers, consumerName)
	a := audit.Judge(rec, exps, m, audit.NewCoverage(0, -1, false, false), consumerName)
	return &a, audit.Encode(rec, nil)
}
