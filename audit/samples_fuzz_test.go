package audit

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
	ss := []Sample{
		{Consumer: 0, Sent: time.Millisecond, Done: 3 * time.Millisecond, Status: 200, RetryAfter: -1, limit: 5, remaining: 4, Reset: time.Second},
		{Consumer: 0, Sent: 2 * time.Millisecond, Done: 5 * time.Millisecond, Status: 429, RetryAfter: 1500 * time.Millisecond, limit: 5, remaining: 0, Reset: 2 * time.Second},
		{Consumer: 2, Sent: 0, Done: 1500 * time.Microsecond, Status: 200, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1},
		{Consumer: 2, Sent: -5 * time.Millisecond, Done: time.Millisecond, Status: 200, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1},
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
		a := &Samples{Encoding: samplesEncoding, Count: count, Data: base64.StdEncoding.EncodeToString(data)}
		ss, advs, _, err := a.decodeAll(offset, consumers)
		if err != nil {
			return
		}
		if len(ss) != count {
			t.Fatalf("%d samples decoded, %d announced", len(ss), count)
		}
		for _, s := range ss {
			if s.Consumer < 0 || int(s.Consumer) >= consumers || s.Done < s.Sent || s.Status < 0 || s.Status > 999 ||
				s.RetryAfter < -1 || s.limit < -1 || s.remaining < -1 || s.Reset < -1 {
				t.Fatalf("decoded %+v of %d consumers", s, consumers)
			}
		}
		again, advsAgain, _, err := encodeSamplesWith(ss, advs, nil).decodeAll(0, consumers)
		if err != nil {
			t.Fatalf("decoded samples do not decode again: %v", err)
		}
		// The same responses, with the same policies (and violated
		// policies), in the order encodeSamples writes them.
		withAdverts := func(ss []Sample, advs []advert) []string {
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
