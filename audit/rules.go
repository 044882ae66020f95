package audit

import "github.com/ratelab/ratelab/rules"

// RulesMeeting finds the limits of set that each sample's request met, and
// its counter of each (Hit.Key): requests of one counter are judged
// together. A counter is named after its consumer while it has one, and
// by the hit's label (domain, entries, limit) when several share it.
func RulesMeeting(samples []Sample, set *rules.Set, req func(route, consumer int) rules.Request, name func(int32) string) Meeting {
	limits := set.Limits()
	index := make(map[*rules.Limit]int, len(limits))
	for k, l := range limits {
		index[l] = k
	}
	// Each kind of request (a route and a consumer) meets the same limits
	// on the same counters: found once, on its first sample.
	type hit struct{ k, c int32 }
	cache := map[[2]int32][]hit{}
	b := newCounterBook(len(samples), len(limits), name)
	for i, s := range samples {
		at := [2]int32{int32(s.Route), s.Consumer}
		hs, ok := cache[at]
		if !ok {
			hs = []hit{}
			for _, h := range set.Match(req(int(s.Route), int(s.Consumer))) {
				k := int32(index[h.Limit])
				key := h.Key
				if key == "" { // unlimited: no counter; one per entries
					key = h.Label()
				}
				hs = append(hs, hit{k: k, c: b.counter(k, key, h.Label(), s.Consumer)})
			}
			cache[at] = hs
		}
		for _, h := range hs {
			b.add(i, h.k, h.c)
		}
	}
	return b.m
}
