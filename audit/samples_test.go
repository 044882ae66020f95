package audit

import (
	"encoding/base64"
	"runtime"
	"slices"
	"testing"
	"time"
)

// A result file's sample count is only announced: a negative one is an
// error, and a huge one makes no room for samples the data cannot hold.
func TestAuditSamplesCountIsOnlyAnnounced(t *testing.T) {
	data := encodeSamples([]Sample{{Status: 200, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}}).Data
	for _, count := range []int{-1, 1 << 40} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := (&Samples{Encoding: samplesEncoding, Count: count, Data: data}).decode(0, 1)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("count %d: decoded", count)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("count %d: allocated %d bytes", count, grew)
		}
	}
}

// A field that would wrap around (a consumer delta of 2^64-1, read as -1; a
// send time past 2^63 ns) is out of range, not a sample with a negative
// consumer or time, which the audit would index or judge by.
func TestAuditSamplesOutOfRange(t *testing.T) {
	for name, data := range map[string][]byte{
		"consumer": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0xc8, 0x01, 0, 0, 0, 0},
		"sent":     {0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 0xc8, 0x01, 0, 0, 0, 0},
	} {
		a := &Samples{Encoding: samplesEncoding, Count: 1, Data: base64.StdEncoding.EncodeToString(data)}
		if ss, err := a.decode(0, 1); err == nil {
			t.Errorf("%s: decoded %+v", name, ss)
		}
	}
}

// A merged result's samples are widened by the clock tolerance: one sent
// in the run's first milliseconds is then sent before it began, and the
// merged result must read back, to be merged again.
func TestAuditSamplesSentBeforeTheRun(t *testing.T) {
	ss := []Sample{
		{Consumer: 0, Sent: -3 * time.Millisecond, Done: 4 * time.Millisecond, Status: 200, RetryAfter: -1, limit: 5, remaining: 4, Reset: -1},
		{Consumer: 0, Sent: time.Millisecond, Done: 8 * time.Millisecond, Status: 200, RetryAfter: -1, limit: 5, remaining: 3, Reset: -1},
		{Consumer: 1, Sent: -5 * time.Millisecond, Done: 2 * time.Millisecond, Status: 429, RetryAfter: time.Second, limit: 5, remaining: 0, Reset: time.Second},
	}
	got, err := encodeSamples(ss).decode(0, 2)
	if err != nil || !slices.Equal(got, ss) {
		t.Fatalf("decoded %+v, %v: want %+v", got, err, ss)
	}
}

// The policies a 429's problem body named as violated are kept with its
// sample, after its adverts, for report merge to check again; a file of
// ratelab-samples-v2, which has none, still reads.
func TestAuditSamplesViolated(t *testing.T) {
	s := Sample{Consumer: 0, Sent: time.Millisecond, Done: 2 * time.Millisecond, Status: 429, RetryAfter: time.Second, limit: 5, remaining: 0,
		Reset: time.Second, Route: 1, advN: 1, violated: 2}
	advs := []advert{{name: 0, named: true, q: givenAs(5), w: givenAs(1), r: givenAs(0), t: givenAs(1)},
		{name: 0, named: true, q: givenAs(5), w: givenAs(1), r: givenAs(0), t: givenAs(1)}, {q: givenAs(100), w: givenAs(3600)}}
	got, back, _, err := encodeSamplesWith([]Sample{s}, advs, nil).decodeAll(0, 1)
	if err != nil || len(got) != 1 || got[0] != s || !slices.Equal(back, advs) {
		t.Fatalf("decoded %+v %+v (%v), want %+v %+v", got, back, err, s, advs)
	}
	plain := s
	plain.advN, plain.violated = 0, 0
	enc := encodeSamplesWith([]Sample{plain}, nil, nil)
	data, _ := base64.StdEncoding.DecodeString(enc.Data)
	v2 := &Samples{Encoding: samplesEncodingV2, Count: 1, Data: base64.StdEncoding.EncodeToString(data[:len(data)-1])} // no count of violated
	if got, err := v2.decode(0, 1); err != nil || len(got) != 1 || got[0] != plain {
		t.Fatalf("v2: decoded %+v (%v), want %+v", got, err, plain)
	}
}
