package bench

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/ratelab/ratelab/audit"
)

// DecodeHistogram reads one of the result's kept histograms ("all", "2xx",
// "429", "other", "errors", "send_lag"), latencies in µs.
func (r Result) DecodeHistogram(name string) (*hdrhistogram.Histogram, error) {
	enc, ok := r.Histograms[name]
	if !ok {
		return nil, fmt.Errorf("no %q histogram", name)
	}
	return hdrhistogram.Decode([]byte(enc))
}

// ConsumerWindows is one consumer's admissions over rolling windows.
type ConsumerWindows struct {
	Consumer string
	// Allowed is the most the expected algorithm allows in such a window.
	Allowed int64
	// Points has, at each success's send, the successes whose whole flight
	// lies in the window (less a millisecond) that begins then: the count
	// the sliding-window audit judges.
	Points []WindowCount
}

// WindowCount is a window's start, in ms since the measured run began, and
// the successes in it.
type WindowCount struct {
	AtMillis int64
	Admitted int64
}

// maxWindowPoints bounds the windows counted per consumer.
const maxWindowPoints = 2000

// RollingAdmissions reads the audited responses kept in the result and
// returns, for up to n consumers (the audit's worst first, then those
// admitted most), their admissions over rolling windows of the window of
// the audit's first limit. It needs audit samples (a run with --expect-limit).
func (r Result) RollingAdmissions(n int) ([]ConsumerWindows, error) {
	return r.RollingAdmissionsOf(0, n)
}

// RollingAdmissionsOf is RollingAdmissions for the audit's limit k, whose
// counters are the consumers' own (a limit of --expect-limit).
func (r Result) RollingAdmissionsOf(k, n int) ([]ConsumerWindows, error) {
	if r.Audit == nil || r.AuditSamples == nil || k < 0 || k >= len(r.Audit.Limits) {
		return nil, errors.New("no audit samples")
	}
	a := &r.Audit.Limits[k]
	if a.Descriptor != "" {
		return nil, errors.New("a limit of a rules file counts on its own counters, not the consumers'")
	}
	samples, err := r.AuditSamples.Decode(max(r.Config.Consumers, 1))
	if err != nil {
		return nil, err
	}
	p, err := a.Policy()
	if err != nil {
		return nil, err
	}
	span := p.Window - time.Millisecond
	exp, err := audit.ExpectationOf(p, a.Algorithm)
	if err != nil {
		return nil, err
	}
	allowed := exp.MaxIn(span)
	per := map[int32][]audit.Sample{}
	for _, s := range samples {
		if s.OK() {
			per[s.Consumer] = append(per[s.Consumer], s)
		}
	}
	ids := make([]int32, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		x, y := r.Config.identity(ids[i]) == a.WorstConsumer, r.Config.identity(ids[j]) == a.WorstConsumer
		if x != y {
			return x
		}
		if len(per[ids[i]]) != len(per[ids[j]]) {
			return len(per[ids[i]]) > len(per[ids[j]])
		}
		return ids[i] < ids[j]
	})
	var out []ConsumerWindows
	for _, id := range ids[:min(n, len(ids))] {
		ok := per[id]
		slices.SortFunc(ok, func(a, b audit.Sample) int { return cmp.Compare(a.Sent, b.Sent) })
		cw := ConsumerWindows{Consumer: r.Config.identity(id), Allowed: allowed}
		step := (len(ok) + maxWindowPoints - 1) / maxWindowPoints // windows are counted from at most so many starts
		for i := 0; i < len(ok); i += step {
			s := ok[i]
			var k int64
			for j := i; j < len(ok) && ok[j].Sent < s.Sent+span; j++ {
				if ok[j].Done < s.Sent+span {
					k++
				}
			}
			cw.Points = append(cw.Points, WindowCount{AtMillis: s.Sent.Milliseconds(), Admitted: k})
		}
		out = append(out, cw)
	}
	return out, nil
}
