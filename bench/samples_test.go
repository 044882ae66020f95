package bench

import (
	"runtime"
	"testing"
)

// A result file's sample count is only announced: a negative one is an
// error, and a huge one makes no room for samples the data cannot hold.
func TestAuditSamplesCountIsOnlyAnnounced(t *testing.T) {
	data := encodeSamples([]sample{{status: 200, retryAfter: -1, limit: -1, remaining: -1, reset: -1}}).Data
	for _, count := range []int{-1, 1 << 40} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := (&AuditSamples{Encoding: samplesEncoding, Count: count, Data: data}).decode(0, 1)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("count %d: decoded", count)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("count %d: allocated %d bytes", count, grew)
		}
	}
}
