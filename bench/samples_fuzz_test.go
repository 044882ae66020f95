package bench

import (
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"
)

// FuzzAuditSamples decodes the audit samples of a result file that report
// merge reads, from any bytes, any announced count and any number of
// consumers. What decodes must be what the audit can judge (consumers in
// range, flights that end after they begin, every field absent or not
// negative), and must encode and decode again to itself. A merge widens
// flights by the clock tolerance: a send time may come before the run's
// start.
func FuzzAuditSamples(f *testing.F) {
	ss := []sample{
		{consumer: 0, sent: time.Millisecond, done: 3 * time.Millisecond, status: 200, retryAfter: -1, limit: 5, remaining: 4, reset: time.Second},
		{consumer: 0, sent: 2 * time.Millisecond, done: 5 * time.Millisecond, status: 429, retryAfter: 1500 * time.Millisecond, limit: 5, remaining: 0, reset: 2 * time.Second},
		{consumer: 2, sent: 0, done: 1500 * time.Microsecond, status: 200, retryAfter: -1, limit: -1, remaining: -1, reset: -1},
		{consumer: 2, sent: -5 * time.Millisecond, done: time.Millisecond, status: 200, retryAfter: -1, limit: -1, remaining: -1, reset: -1},
	}
	enc := encodeSamples(ss)
	data, _ := base64.StdEncoding.DecodeString(enc.Data)
	f.Add(data, enc.Count, 3, int64(0))
	f.Add(data, enc.Count, 2, int64(250))
	f.Add(data, -1, 3, int64(0))
	f.Add(data, 1<<40, 3, int64(0))
	f.Add([]byte{0x80}, 1, 1, int64(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0xc8, 0x01, 0, 0, 0, 0}, 1, 1, int64(0))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 0xc8, 0x01, 0, 0, 0, 0}, 1, 1, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, count, consumers int, offsetMillis int64) {
		if consumers < 1 || consumers > 10_000_000 || offsetMillis < 0 || offsetMillis > int64(24*time.Hour/time.Millisecond) {
			return // Merge never asks for these: runs begin within a day of each other
		}
		offset := time.Duration(offsetMillis) * time.Millisecond
		a := &AuditSamples{Encoding: samplesEncoding, Count: count, Data: base64.StdEncoding.EncodeToString(data)}
		ss, advs, _, err := a.decodeAll(offset, consumers)
		if err != nil {
			return
		}
		if len(ss) != count {
			t.Fatalf("%d samples decoded, %d announced", len(ss), count)
		}
		for _, s := range ss {
			if s.consumer < 0 || int(s.consumer) >= consumers || s.done < s.sent || s.status < 0 || s.status > 999 ||
				s.retryAfter < -1 || s.limit < -1 || s.remaining < -1 || s.reset < -1 {
				t.Fatalf("decoded %+v of %d consumers", s, consumers)
			}
		}
		again, advsAgain, _, err := encodeSamplesWith(ss, advs, nil).decodeAll(0, consumers)
		if err != nil {
			t.Fatalf("decoded samples do not decode again: %v", err)
		}
		// The same responses, with the same policies (and violated
		// policies), in the order encodeSamples writes them.
		withAdverts := func(ss []sample, advs []advert) []string {
			out := make([]string, len(ss))
			for i, s := range ss {
				ads := advs[s.advAt : s.advAt+uint32(s.advN)+uint32(s.violated)]
				s.advAt = 0
				out[i] = fmt.Sprintf("%+v %+v", s, ads)
			}
			slices.Sort(out)
			return out
		}
		if a, b := withAdverts(ss, advs), withAdverts(again, advsAgain); !slices.Equal(a, b) {
			t.Fatalf("decoded, encoded and decoded again:\n%v\n%v", a, b)
		}
	})
}
