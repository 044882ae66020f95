package audit

import (
	"fmt"
)

// counterHit is one limit a sample met, and its counter of that limit.
type counterHit struct{ k, c int32 }

// perSample lists, for each of n samples, the limits it met and their
// counters: for an audit by rules (whose counters have keys); nil for
// counters that are the consumers' own, or no meeting.
func (m *Meeting) perSample(n int) [][]counterHit {
	if m == nil || len(m.of) == 0 || m.of[0].keys == nil {
		return nil
	}
	hits := make([][]counterHit, n)
	for k, lc := range m.of {
		for j, i := range lc.idx {
			hits[i] = append(hits[i], counterHit{k: int32(k), c: lc.counter[j]})
		}
	}
	return hits
}

// checkCounters checks the counter tables of an audit by rules.
func (a *Samples) checkCounters() error {
	if len(a.Counters) > MaxLimits {
		return fmt.Errorf("audit samples: counters of %d limits, at most %d", len(a.Counters), MaxLimits)
	}
	for k, t := range a.Counters {
		if len(t.Keys) != len(t.Names) || len(t.Keys) > 1<<31-1 {
			return fmt.Errorf("audit samples: limit %d has %d counter keys and %d names", k, len(t.Keys), len(t.Names))
		}
	}
	return nil
}

// decodeHits reads one sample's limits and counters.
func (a *Samples) decodeHits(next func() (uint64, error)) ([]counterHit, error) {
	n, err := next()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(a.Counters)) {
		return nil, fmt.Errorf("audit samples: %d limits met, of %d", n, len(a.Counters))
	}
	hits := make([]counterHit, 0, n)
	for range n {
		k, err := next()
		if err != nil {
			return nil, err
		}
		c, err := next()
		if err != nil {
			return nil, err
		}
		if k >= uint64(len(a.Counters)) || c >= uint64(len(a.Counters[k].Keys)) {
			return nil, fmt.Errorf("audit samples: counter %d of limit %d out of range", c, k)
		}
		hits = append(hits, counterHit{k: int32(k), c: int32(c)})
	}
	return hits, nil
}

// counterMerge gathers the counters of several runs' samples into one
// meeting: counters of one key are one, whichever run met them.
type counterMerge struct {
	m     Meeting
	index []map[string]int32 // per limit, counter by key
}

func newCounterMerge(limits int) *counterMerge {
	cm := &counterMerge{m: Meeting{of: make([]limitCounters, limits)}, index: make([]map[string]int32, limits)}
	for k := range cm.index {
		cm.index[k] = map[string]int32{}
		cm.m.of[k].keys = []string{}
	}
	return cm
}

// add adds one run's samples, their hits and its counter tables; base is
// the index of its first sample among all.
func (cm *counterMerge) add(base int, hits [][]counterHit, tables []SampleCounters) error {
	if len(tables) != len(cm.m.of) {
		return fmt.Errorf("counters of %d limits, want %d", len(tables), len(cm.m.of))
	}
	for i, hs := range hits {
		var met uint64
		for _, h := range hs {
			t := tables[h.k]
			key := t.Keys[h.c]
			lc := &cm.m.of[h.k]
			c, ok := cm.index[h.k][key]
			switch {
			case !ok:
				c = int32(len(lc.keys))
				cm.index[h.k][key] = c
				lc.keys = append(lc.keys, key)
				lc.names = append(lc.names, t.Names[h.c])
			case lc.names[c] != t.Names[h.c] && len(t.Names[h.c]) > len(lc.names[c]):
				lc.names[c] = t.Names[h.c] // a label, where a run saw several consumers on it
			}
			met |= 1 << h.k
			lc.idx = append(lc.idx, int32(base+i))
			lc.counter = append(lc.counter, c)
		}
		cm.m.met = append(cm.m.met, met)
	}
	return nil
}
