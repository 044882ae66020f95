package audit

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Samples keeps, in a run's JSON, every response the audit judged, so
// that `report merge` can audit runs from several load machines as one: a
// limiter that leaks across machines is caught although each machine alone
// saw too little to tell.
type Samples struct {
	// Encoding names the format of Data: "ratelab-samples-v3", a sequence
	// of unsigned varints per response, in consumer and send order:
	// consumer (delta), sent in µs since the measured run began (delta
	// within a consumer), flight in µs (received − sent, rounded up),
	// status, and Retry-After in ms, limit, remaining and reset in s, each
	// plus one (0: the field was absent); then the route (of --path's, or
	// bench rls's sets, from 0) and the number of policies the response
	// gave, and for each: the index of the limit its name names plus one
	// (0: none), 1 for legacy fields (else 0), and its q, w, r and t, each
	// plus one; then the number of policies its 429's problem body named in
	// violated-policies, each written as a policy is (legacy 0).
	// "ratelab-samples-v2" is the same without the violated policies, and
	// "ratelab-samples-v1" without the route and policies too.
	Encoding string `json:"encoding"`
	// Count is the number of responses in Data.
	Count int `json:"count"`
	// Data is the encoded responses, base64 (standard, padded).
	Data string `json:"data"`
	// Counters, for an audit by a rules file, are each limit's counters:
	// Data then gives, after each response's policies, the number of
	// limits its request met and, for each, the limit's index and the
	// counter's index in its Keys.
	Counters []SampleCounters `json:"counters,omitempty"`
}

// SampleCounters are one limit's counters in AuditSamples: their Redis
// keys (rules.Hit.Key), which tell one counter from another across runs,
// and their names in reports.
type SampleCounters struct {
	Keys  []string `json:"keys"`
	Names []string `json:"names"`
}

// MaxRoutes bounds the routes of a run (bench http's paths, or bench
// rls's sets of descriptors) that a sample keeps.
const MaxRoutes = 64

const (
	samplesEncoding   = "ratelab-samples-v3"
	samplesEncodingV2 = "ratelab-samples-v2"
	samplesEncodingV1 = "ratelab-samples-v1"
)

// Encode packs a run's samples, with their adverts and, for an audit by
// rules or by a rate limit service's configuration, the counters m says
// they met (nil: none), for its result's JSON.
func Encode(rec Record, m *Meeting) *Samples { return encodeSamplesWith(rec.Samples, rec.advs, m) }

// Decode unpacks the samples of a result of consumers consumers, without
// their adverts.
func (a *Samples) Decode(consumers int) ([]Sample, error) { return a.decode(0, consumers) }

// encodeSamples packs samples without adverts for JSON.
func encodeSamples(samples []Sample) *Samples { return encodeSamplesWith(samples, nil, nil) }

// encodeSamplesWith packs samples, with their adverts in advs and, for an
// audit by rules, the counters m says they met, for JSON. Times are kept in
// whole µs, sent rounded down and received rounded up, so that a flight
// only ever grows: the audit stays sound on what it reads back.
func encodeSamplesWith(samples []Sample, advs []advert, m *Meeting) *Samples {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := samples[i], samples[j]
		if a.Consumer != b.Consumer {
			return int(a.Consumer - b.Consumer)
		}
		return cmpDur(a.Sent, b.Sent)
	})
	hits := m.perSample(len(samples))
	buf := make([]byte, 0, len(samples)*10)
	var consumer int64
	var sent int64
	for _, i := range order {
		s := samples[i]
		c := int64(s.Consumer)
		if c != consumer {
			sent = 0
		}
		buf = binary.AppendUvarint(buf, uint64(c-consumer))
		consumer = c
		us := s.Sent.Microseconds()
		buf = binary.AppendUvarint(buf, uint64(us-sent))
		sent = us
		flight := (s.Done - time.Duration(us)*time.Microsecond + time.Microsecond - 1) / time.Microsecond
		buf = binary.AppendUvarint(buf, uint64(max(flight, 0)))
		buf = binary.AppendUvarint(buf, uint64(s.Status))
		buf = binary.AppendUvarint(buf, plusOne(s.RetryAfter.Milliseconds(), s.RetryAfter >= 0))
		buf = binary.AppendUvarint(buf, plusOne(s.limit, s.limit >= 0))
		buf = binary.AppendUvarint(buf, plusOne(s.remaining, s.remaining >= 0))
		buf = binary.AppendUvarint(buf, plusOne(int64(s.Reset/time.Second), s.Reset >= 0))
		buf = binary.AppendUvarint(buf, uint64(s.Route))
		var ads, vio []advert
		if end := int(s.advAt) + int(s.advN); end+int(s.violated) <= len(advs) {
			ads, vio = advs[s.advAt:end], advs[end:end+int(s.violated)]
		}
		for _, list := range [2][]advert{ads, vio} {
			buf = binary.AppendUvarint(buf, uint64(len(list)))
			for _, a := range list {
				buf = appendAdvert(buf, a)
			}
		}
		if hits != nil {
			buf = binary.AppendUvarint(buf, uint64(len(hits[i])))
			for _, h := range hits[i] {
				buf = binary.AppendUvarint(buf, uint64(h.k))
				buf = binary.AppendUvarint(buf, uint64(h.c))
			}
		}
	}
	a := &Samples{Encoding: samplesEncoding, Count: len(samples), Data: base64.StdEncoding.EncodeToString(buf)}
	if hits != nil {
		for _, lc := range m.of {
			a.Counters = append(a.Counters, SampleCounters{Keys: lc.keys, Names: lc.names})
		}
	}
	return a
}

// appendAdvert writes a policy as Data holds it.
func appendAdvert(buf []byte, a advert) []byte {
	legacy := uint64(0)
	if a.legacy {
		legacy = 1
	}
	buf = binary.AppendUvarint(buf, plusOne(int64(a.name), a.named))
	buf = binary.AppendUvarint(buf, legacy)
	for _, v := range [4]given{a.q, a.w, a.r, a.t} {
		buf = binary.AppendUvarint(buf, plusOne(int64(v.n), v.ok))
	}
	return buf
}

func plusOne(v int64, present bool) uint64 {
	if !present {
		return 0
	}
	return uint64(v) + 1
}

func minusOne(v uint64) int64 { return int64(v) - 1 }

// givenPlusOne reads a count written plus one: 0 is one not given.
func givenPlusOne(v uint64) given {
	if v == 0 {
		return given{}
	}
	return givenAs(int32(v - 1))
}

// Bounds of what decode reads: a sample's send time (either side of the
// run's start) and flight at most 30 days in µs (a run is a day at most), a
// Retry-After in ms that fits in a time.Duration, and a reset the audit
// reads (maxResetSeconds).
const (
	maxSampleMicros = int64(30 * 24 * time.Hour / time.Microsecond)
	maxMillis       = uint64(math.MaxInt64 / time.Millisecond)
)

// decode unpacks the samples, shifted by offset (the run's start less the
// earliest start of the runs merged), without their adverts.
func (a *Samples) decode(offset time.Duration, consumers int) ([]Sample, error) {
	ss, _, _, err := a.decodeAll(offset, consumers)
	return ss, err
}

// decodeAll unpacks the samples, shifted by offset, their adverts, and for
// an audit by rules the counters each met (nil otherwise).
func (a *Samples) decodeAll(offset time.Duration, consumers int) ([]Sample, []advert, [][]counterHit, error) {
	v3 := a.Encoding == samplesEncoding
	v2 := v3 || a.Encoding == samplesEncodingV2
	if !v2 && a.Encoding != samplesEncodingV1 {
		return nil, nil, nil, fmt.Errorf("audit samples in %q, want %s", a.Encoding, samplesEncoding)
	}
	buf, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("audit samples: %w", err)
	}
	if a.Count < 0 {
		return nil, nil, nil, fmt.Errorf("audit samples: count %d", a.Count)
	}
	// A response takes 8 bytes at least: what Data holds bounds what to
	// make room for, whatever Count says.
	out := make([]Sample, 0, min(a.Count, len(buf)/8))
	var advs []advert
	var hits [][]counterHit
	if err := a.checkCounters(); err != nil {
		return nil, nil, nil, err
	}
	var consumer, sent int64
	next := func() (uint64, error) {
		v, n := binary.Uvarint(buf)
		if n <= 0 {
			return 0, errors.New("audit samples: truncated")
		}
		buf = buf[n:]
		return v, nil
	}
	for len(buf) > 0 {
		var f [8]uint64
		for i := range f {
			if f[i], err = next(); err != nil {
				return nil, nil, nil, err
			}
		}
		if f[0] > 0 {
			sent = 0
		}
		// Every field within what encodeSamples writes, so that none wraps
		// around into a value the audit would judge. A send time changes by
		// a signed amount: a merge widens flights by the clock tolerance,
		// and a consumer's first may then be sent before the run began.
		d := int64(f[1])
		if consumers < 1 || f[0] >= uint64(consumers)-uint64(consumer) || d < -maxSampleMicros || d > maxSampleMicros ||
			sent+d < -maxSampleMicros || sent+d > maxSampleMicros || f[2] > uint64(maxSampleMicros) ||
			f[3] > 999 || f[4] > maxMillis+1 || f[5] > 1<<63 || f[6] > 1<<63 || f[7] > maxResetSeconds+1 {
			return nil, nil, nil, fmt.Errorf("audit samples: response %d of consumer %d is out of range %v", len(out)+1, consumer, f)
		}
		consumer += int64(f[0])
		sent += d
		s := Sample{Consumer: int32(consumer), Status: int16(f[3]),
			Sent:       time.Duration(sent)*time.Microsecond + offset,
			RetryAfter: -1, limit: minusOne(f[5]), remaining: minusOne(f[6]), Reset: -1}
		s.Done = s.Sent + time.Duration(f[2])*time.Microsecond
		if f[4] > 0 {
			s.RetryAfter = time.Duration(minusOne(f[4])) * time.Millisecond
		}
		if f[7] > 0 {
			s.Reset = time.Duration(minusOne(f[7])) * time.Second
		}
		if v2 {
			if advs, err = decodeAdverts(&s, advs, next, v3); err != nil {
				return nil, nil, nil, err
			}
			if len(a.Counters) > 0 {
				hs, err := a.decodeHits(next)
				if err != nil {
					return nil, nil, nil, err
				}
				hits = append(hits, hs)
			}
		}
		out = append(out, s)
	}
	if len(out) != a.Count {
		return nil, nil, nil, fmt.Errorf("audit samples: %d decoded, %d announced", len(out), a.Count)
	}
	return out, advs, hits, nil
}

// decodeAdverts reads a v2 sample's route and adverts into s and advs,
// and with v3 the policies its problem body named as violated.
func decodeAdverts(s *Sample, advs []advert, next func() (uint64, error), v3 bool) ([]advert, error) {
	var head [2]uint64
	for i := range head {
		v, err := next()
		if err != nil {
			return nil, err
		}
		head[i] = v
	}
	if head[0] >= MaxRoutes || head[1] > maxAdverts {
		return nil, fmt.Errorf("audit samples: route %d or %d policies out of range", head[0], head[1])
	}
	s.Route, s.advAt, s.advN = uint16(head[0]), uint32(len(advs)), uint8(head[1])
	advs, err := decodePolicies(advs, head[1], next)
	if err != nil || !v3 {
		return advs, err
	}
	n, err := next()
	if err != nil {
		return nil, err
	}
	if n > maxViolated {
		return nil, fmt.Errorf("audit samples: %d violated policies, at most %d", n, maxViolated)
	}
	s.violated = uint8(n)
	return decodePolicies(advs, n, next)
}

// decodePolicies reads n policies into advs.
func decodePolicies(advs []advert, n uint64, next func() (uint64, error)) ([]advert, error) {
	for range n {
		var f [6]uint64
		for i := range f {
			v, err := next()
			if err != nil {
				return nil, err
			}
			f[i] = v
		}
		if f[0] > MaxLimits || f[1] > 1 || f[2] > 1<<31 || f[3] > 1<<31 || f[4] > 1<<31 || f[5] > 1<<31 {
			return nil, fmt.Errorf("audit samples: policy %v out of range", f)
		}
		a := advert{legacy: f[1] == 1, q: givenPlusOne(f[2]), w: givenPlusOne(f[3]), r: givenPlusOne(f[4]), t: givenPlusOne(f[5])}
		if f[0] > 0 {
			a.name, a.named = int16(f[0]-1), true
		}
		advs = append(advs, a)
	}
	return advs, nil
}
