package bench

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// Shards of one run get one run id, whichever shard they are; anything
// that changes the identities sent, the target, the load or the start
// makes another; a run id given by hand is the run's.
func TestRunIDNamesOneRun(t *testing.T) {
	at := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	base := HTTPConfig{Target: "http://127.0.0.1:8080/?apikey=k1", Rate: 300, Duration: time.Minute, Connections: 30, Consumers: 10,
		ConsumerHeader: "X-Consumer-Id", Shards: 3, StartAt: at, ExpectLimit: 10, ExpectWindow: time.Second,
		Header: http.Header{"X-Api-Key": {"k1"}}}
	id := base.runID()
	if len(id) != 16 {
		t.Fatalf("run id %q: want 16 hex digits", id)
	}
	for _, tc := range []struct {
		name   string
		change func(*HTTPConfig)
		same   bool
	}{
		{"another shard", func(c *HTTPConfig) { c.Shard = 2 }, true},
		{"another timeout or interval", func(c *HTTPConfig) { c.Timeout, c.Interval = time.Second, 2*time.Second }, true},
		{"probes off", func(c *HTTPConfig) { c.NoProbes = true }, true},
		{"another query", func(c *HTTPConfig) { c.Target = "http://127.0.0.1:8080/?apikey=k2" }, false},
		{"another header value", func(c *HTTPConfig) { c.Header = http.Header{"X-Api-Key": {"k2"}} }, false},
		{"another body", func(c *HTTPConfig) { c.Body = []byte("x") }, false},
		{"another start", func(c *HTTPConfig) { c.StartAt = at.Add(time.Minute) }, false},
		{"no start", func(c *HTTPConfig) { c.StartAt = time.Time{} }, false},
		{"another rate", func(c *HTTPConfig) { c.Rate = 301 }, false},
		{"another duration", func(c *HTTPConfig) { c.Duration = 2 * time.Minute }, false},
		{"more consumers", func(c *HTTPConfig) { c.Consumers = 11 }, false},
		{"more shards", func(c *HTTPConfig) { c.Shards = 4 }, false},
		{"shared consumers", func(c *HTTPConfig) { c.SharedConsumers = true }, false},
		{"source addresses", func(c *HTTPConfig) { c.SourceIPs = []netip.Addr{netip.MustParseAddr("127.0.0.2")} }, false},
		{"another limit", func(c *HTTPConfig) { c.ExpectLimit = 20 }, false},
		{"other identities", func(c *HTTPConfig) { c.Identities = []string{"k1", "k2"} }, false},
		{"token claims", func(c *HTTPConfig) { c.JWTClaims = []JWTClaim{{Name: "sub", Value: "{consumer}"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.change(&c)
			if got := c.runID(); (got == id) != tc.same {
				t.Errorf("run id %q, the base's %q: want the same: %v", got, id, tc.same)
			}
		})
	}
	given := base
	given.RunID = "nightly-42"
	if got := given.runID(); got != "nightly-42" {
		t.Errorf("run id %q, want the one given", got)
	}
}

// keyRun is one run of a single consumer, consumer-0, at target: every
// 50 ms from start (Unix ms) it sends a request, 20 in all; the gateway
// admits the first limit and denies the rest, as a gateway keyed by the
// run's key would.
func keyRun(t *testing.T, target string, start int64, limit int) Result {
	t.Helper()
	cfg := HTTPConfig{Target: target, Method: "GET", Rate: 20, Connections: 1, Duration: time.Second, Consumers: 1,
		ConsumerHeader: "X-Consumer-Id", Interval: time.Second, Shards: 1, ExpectLimit: int64(limit), ExpectWindow: time.Second}
	tl := newTally(cfg.Interval)
	var events []event
	var rec audit.Record
	for i := range 20 {
		status := int16(200)
		if i >= limit {
			status = 429
		}
		sent := time.Duration(i) * 50 * time.Millisecond
		done := sent + time.Millisecond
		events = append(events, event{done: done, latency: 1000, status: int32(status)})
		rec.Add(audit.NewSample(0, sent, done, int(status)))
	}
	tl.add(events)
	res := cfg.result(tl, cfg.Duration)
	res.StartedUnixMillis = start
	res.RunID = cfg.runID()
	res.Audit, res.AuditSamples = judged(rec, cfg.ExpectLimit, cfg.ExpectWindow, cfg.Consumers)
	return roundTripJSON(t, res) // as report merge reads it
}

// Five single-key runs at the same time, each of one consumer that its
// gateway held to 10 a second: each passes its audit. They are five runs,
// not shards of one: merged as one run, all named consumer-0, they would
// read as one consumer admitted 50 a second. The merge refuses them,
// naming each file with its run id; --as-one-run merges them as five
// consumers, each held, named by file; a merge of that merge keeps them.
func TestMergeOnlyMergesOneRun(t *testing.T) {
	start := int64(1767225600000)
	var runs []Result
	var labels []string
	for _, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
		r := keyRun(t, "http://127.0.0.1:8080/v1?apikey="+key, start, 10)
		if r.Audit.Verdict != audit.Held {
			t.Fatalf("%s alone: %s %q", key, r.Audit.Verdict, r.Audit.Reasons)
		}
		runs = append(runs, r)
		labels = append(labels, key+".json")
	}
	_, err := MergeWith(runs, MergeOptions{Labels: labels})
	var re *RunsError
	if !errors.As(err, &re) {
		t.Fatalf("merged five runs: %v; want a RunsError", err)
	}
	text := re.Text(labels)
	for i, l := range labels {
		if !strings.Contains(text, l+" is run "+runs[i].RunID) {
			t.Errorf("%q does not name %s and its run id", text, l)
		}
	}

	m, err := MergeWith(runs, MergeOptions{AsOneRun: true, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	a := m.Audit
	if a == nil || a.Verdict != audit.Held || a.Limits[0].Consumers != 5 || m.Config.Consumers != 5 || a.Samples != 100 {
		t.Fatalf("as one run: %d consumers, audit %+v; want five held", m.Config.Consumers, a)
	}
	if len(m.Config.Identities) != 5 || m.Config.Identities[2] != "consumer-0 (k3.json)" {
		t.Fatalf("names %q: want each consumer-0 named by its file", m.Config.Identities)
	}
	if m.Target != "http://127.0.0.1:8080/v1" || m.RunID == "" || m.RunID == runs[0].RunID {
		t.Fatalf("target %q, run id %q: want the endpoint and a run id of its own", m.Target, m.RunID)
	}
	again, err := Merge([]Result{roundTripJSON(t, m)}, 0)
	if err != nil || again.Audit.Limits[0].Consumers != 5 || again.Audit.Limits[0].WorstConsumers[0].Consumer != m.Audit.Limits[0].WorstConsumers[0].Consumer {
		t.Fatalf("merged again: %+v, %v", again.Audit, err)
	}

	// Had they been one run (one key sent five times at once), the
	// gateway let 50 through: forced into one id, the merge says so.
	for i := range runs {
		runs[i].RunID, runs[i].Target = "one-key", runs[0].Target
		runs[i].Config.Shard, runs[i].Config.Shards = i, len(runs)
	}
	if m, err := Merge(runs, 0); err != nil || m.Audit.Verdict != audit.Leaked {
		t.Fatalf("one run: %v, %v; want the leak", m.Audit, err)
	}
}

// Merged as one run, a consumer with an identity of its own (an API key,
// a source address) is one consumer whichever runs sent it: two runs that
// each got key-b 10 through at the same time got it 20 through, a leak.
// Consumers named consumer-N stay each run's own, named by file only when
// they clash.
func TestMergeAsOneRunKeysByIdentity(t *testing.T) {
	start := int64(1767225600000)
	var runs []Result
	for _, id := range []string{"key-a", "key-b", "key-b", ""} {
		r := keyRun(t, "http://127.0.0.1:8080/", start, 10)
		if id != "" {
			r.Config.Identities = []string{id}
		}
		runs = append(runs, r)
	}
	labels := []string{"a.json", "b1.json", "b2.json", "plain.json"}
	m, err := MergeWith(runs, MergeOptions{AsOneRun: true, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"key-a", "key-b", "consumer-0"}
	if !slices.Equal(m.Config.Identities, want) || m.Config.Consumers != 3 {
		t.Fatalf("identities %q (%d consumers), want %q", m.Config.Identities, m.Config.Consumers, want)
	}
	l := m.Audit.Limits[0]
	if m.Audit.Verdict != audit.Leaked || l.WorstConsumer != "key-b" || l.WorstWindowAdmitted != 20 {
		t.Fatalf("audit %+v: want key-b's 20 in one window", m.Audit)
	}
	// Without identities, the first three too are each run's own.
	for i := range runs {
		runs[i].Config.Identities = nil
	}
	m, err = MergeWith(runs, MergeOptions{AsOneRun: true, Labels: labels})
	if err != nil || m.Config.Consumers != 4 || m.Config.Identities[2] != "consumer-0 (b2.json)" || m.Audit.Verdict != audit.Held {
		t.Fatalf("identities %q, audit %+v, %v", m.Config.Identities, m.Audit, err)
	}
}

// Results written before results carried a run id merge alone, or with
// --as-one-run, but not with each other: nothing shows they are one run.
func TestMergeOfResultsWithoutRunID(t *testing.T) {
	start := int64(1767225600000)
	a, b := keyRun(t, "http://127.0.0.1:8080/", start, 10), keyRun(t, "http://127.0.0.1:8080/", start+100, 10)
	if a.RunID != b.RunID {
		t.Fatalf("two runs with the same settings: run ids %q and %q", a.RunID, b.RunID)
	}
	a.RunID, b.RunID = "", ""
	if _, err := Merge([]Result{a}, 0); err != nil {
		t.Fatalf("one old result: %v", err)
	}
	_, err := MergeWith([]Result{a, b}, MergeOptions{Labels: []string{"old-a.json", "old-b.json"}})
	var re *RunsError
	if !errors.As(err, &re) || !strings.Contains(re.Text([]string{"old-a.json", "old-b.json"}), "old-a.json and old-b.json have no run id") {
		t.Fatalf("two old results: %v", err)
	}
	if m, err := MergeWith([]Result{a, b}, MergeOptions{AsOneRun: true}); err != nil || m.Config.Consumers != 2 ||
		m.Config.Identities[1] != "consumer-0 (run 2)" {
		t.Fatalf("two old results as one run: %v, names %q", err, m.Config.Identities)
	}
}

// A result file's identities are refused when they are not one printable
// name per consumer: reports print them.
func TestMergeRefusesBadIdentities(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"a", "b"}, "2 identities for 1 consumer"},
		{[]string{"\x1b[2J"}, "is not a name"},
		{[]string{""}, "is not a name"},
		{[]string{strings.Repeat("x", maxNameBytes+1)}, "is not a name"},
	} {
		r := keyRun(t, "http://127.0.0.1:8080/", 1767225600000, 10)
		r.Config.Identities = tc.names
		if _, err := Merge([]Result{r}, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("names %q: %v; want %q", tc.names, err, tc.want)
		}
	}
}

func roundTripJSON(t *testing.T, r Result) Result {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

// Two runs of one command, one after the other and not sharded, share a
// run id and each claims the whole run (shard 0 of 1): merged as shards,
// a limit each held would read as leaked. The merge refuses them, naming
// both; --as-one-run merges them. Shards of one run, each its own, merge;
// one run given twice is refused even as one run, and so is a merge
// given with a run it holds.
func TestMergeRefusesOneShardClaimedTwice(t *testing.T) {
	start := int64(1767225600000)
	run := func(start int64, instance string, shard, shards int) Result {
		r := keyRun(t, "http://127.0.0.1:8080/", start, 10)
		r.Instance, r.Config.Shard, r.Config.Shards = instance, shard, shards
		return r
	}
	a, b := run(start, "aaaa", 0, 1), run(start+5000, "bbbb", 0, 1)
	if a.RunID != b.RunID || a.Audit.Verdict != audit.Held || b.Audit.Verdict != audit.Held {
		t.Fatalf("run ids %q and %q, verdicts %s and %s: want one id, each held", a.RunID, b.RunID, a.Audit.Verdict, b.Audit.Verdict)
	}
	labels := []string{"a.json", "b.json"}
	_, err := MergeWith([]Result{a, b}, MergeOptions{Labels: labels})
	var se *ShardsError
	if !errors.As(err, &se) || se.Twice || !strings.Contains(se.Text(labels), "a.json and b.json each claim the whole of run "+a.RunID+" (shard 0 of 1)") {
		t.Fatalf("two whole runs merged as shards: %v; want a ShardsError naming both", err)
	}
	if m, err := MergeWith([]Result{a, b}, MergeOptions{AsOneRun: true, Labels: labels}); err != nil || m.Audit.Verdict != audit.Held || m.Config.Consumers != 2 {
		t.Fatalf("as one run: %v, %+v; want two consumers, held", err, m.Audit)
	}
	// Written before results carried an instance, they claim it alike.
	a.Instance, b.Instance = "", ""
	if _, err := Merge([]Result{a, b}, 0); !errors.As(err, &se) {
		t.Fatalf("two old whole runs: %v; want a ShardsError", err)
	}

	s0, s1 := run(start, "s0", 0, 2), run(start, "s1", 1, 2)
	m, err := MergeWith([]Result{s0, s1}, MergeOptions{Labels: []string{"s0.json", "s1.json"}})
	if err != nil {
		t.Fatalf("two shards: %v", err)
	}
	if len(m.Parts) != 2 || m.Parts[1] != (Part{RunID: s1.RunID, Instance: "s1", Shard: 1, Shards: 2, StartedUnixMillis: start}) || m.Instance != "" {
		t.Fatalf("parts %+v, instance %q: want both shards, no instance", m.Parts, m.Instance)
	}
	again := roundTripJSON(t, m)
	for _, tc := range []struct {
		name string
		runs []Result
		want string
	}{
		{"a run given twice", []Result{s0, s0}, "x.json and y.json hold the same run (shard 0 of 2 of run " + s0.RunID + ")"},
		{"a merge and a shard it holds", []Result{again, s1}, "x.json and y.json hold the same run (shard 1 of 2 of run " + s0.RunID + ")"},
	} {
		for _, asOne := range []bool{false, true} {
			_, err := MergeWith(tc.runs, MergeOptions{AsOneRun: asOne, Labels: []string{"x.json", "y.json"}})
			if !errors.As(err, &se) || !se.Twice || !strings.Contains(se.Text([]string{"x.json", "y.json"}), tc.want) {
				t.Errorf("%s (as one run: %v): %v; want %q", tc.name, asOne, err, tc.want)
			}
		}
	}
	// Another shard claiming what a merge holds is refused; a shard the
	// merge lacks joins it.
	s1again := run(start, "s1-again", 1, 2)
	if _, err := Merge([]Result{again, s1again}, 0); !errors.As(err, &se) || se.Twice {
		t.Fatalf("a merge and another run of a shard it holds: %v; want a ShardsError", err)
	}
	t0, t1, t2 := run(start, "t0", 0, 3), run(start, "t1", 1, 3), run(start, "t2", 2, 3)
	for _, r := range []*Result{&t0, &t1, &t2} {
		r.RunID = "three"
	}
	part, err := Merge([]Result{t0, t1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if whole, err := Merge([]Result{roundTripJSON(t, part), t2}, 0); err != nil || len(whole.Parts) != 3 || whole.Requests != 60 {
		t.Fatalf("a merge of two shards and the third: %v, %d parts, %d requests", err, len(whole.Parts), whole.Requests)
	}
}
