package bench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/internal/hdr"
)

// errKind is why a request failed without a response.
type errKind uint8

const (
	kindRefused  errKind = iota // the connection was refused
	kindReset                   // the server reset or closed the connection
	kindTimeout                 // no response within --timeout
	kindTLS                     // the TLS handshake or a certificate failed
	kindProtocol                // the response is not HTTP/1.x; the service answered a gRPC call with an error
	kindOther
	numKinds
)

// kindNames are the error kinds as reports and JSON name them.
var kindNames = [numKinds]string{"refused", "reset", "timeout", "tls", "protocol", "other"}

// event is one finished request, as a connection hands it to the tally.
type event struct {
	// done is when the response ended, since the measured run began.
	done time.Duration
	// latency is from when the request should have been sent, in µs; lag is
	// from then until it was, in µs.
	latency, lag int64
	// status is the response's status; 0 for a transport error of kind.
	status int32
	kind   errKind
	// warm marks a request of the warm-up.
	warm bool
}

// batchSize is how many events a connection keeps before it hands them to
// the tally: its lock is taken once per batch, never per request.
const batchSize = 64

// batchAge bounds how long a connection keeps an event, so that the live
// line and the timeline are never more than this late.
const batchAge = 100 * time.Millisecond

// tally is the run's measurements, fed by every connection in batches.
// all holds the latency of every response, failed the time each transport
// error took to fail: the two are never mixed.
type tally struct {
	mu                                   sync.Mutex
	all, ok, limited, other, failed, lag *hdrhistogram.Histogram
	status                               [600]int64
	kinds                                [numKinds]int64
	warmup                               int64
	timeline                             timeline
}

func newTally(interval time.Duration) *tally {
	return &tally{all: hdr.New(), ok: hdr.New(), limited: hdr.New(), other: hdr.New(), failed: hdr.New(), lag: hdr.New(),
		timeline: timeline{interval: interval}}
}

// add records a batch of events.
func (t *tally) add(events []event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range events {
		e := &events[i]
		if e.warm {
			t.warmup++
			continue
		}
		lat := e.latency
		if e.status != 0 {
			hdr.Record(t.all, lat) // responses only: a failed connection is no response time
		}
		hdr.Record(t.lag, e.lag)
		class := classErrors
		switch {
		case e.status == 0:
			t.kinds[e.kind]++
			hdr.Record(t.failed, lat)
		case e.status == 429:
			class = class429
			t.status[e.status]++
			hdr.Record(t.limited, lat)
		case e.status >= 200 && e.status < 300:
			class = class2xx
			t.status[e.status]++
			hdr.Record(t.ok, lat)
		default:
			class = statusClass(int(e.status))
			if e.status > 0 && int(e.status) < len(t.status) {
				t.status[e.status]++
			}
			hdr.Record(t.other, lat)
		}
		t.timeline.add(e.done, lat, class, e.status != 0)
	}
}

// Status classes in a timeline.
const (
	classErrors = iota
	class1xx
	class2xx
	class3xx
	class4xx // 429 excluded
	class5xx
	class429
	numClasses
)

func statusClass(status int) int {
	switch {
	case status == 429:
		return class429
	case status >= 100 && status < 600:
		return class1xx + status/100 - 1
	}
	return classErrors
}

// maxSlots bounds a timeline: past it, neighbouring intervals are merged
// and the interval doubles.
const maxSlots = 1000

// timeline is the run cut into intervals of the same length, by when each
// response ended.
type timeline struct {
	interval time.Duration
	// end, when set, is the run's length: a response that ends after it
	// (it was sent before) counts in the interval the end falls in.
	end   time.Duration
	slots []slot
}

// slot is one interval: responses and transport errors by class, and the
// responses' latencies (µs).
type slot struct {
	counts [numClasses]int64
	hist   *hdrhistogram.Histogram
}

// newSlotHist is an interval's histogram: the range of every latency
// histogram (hdr.Lowest to hdr.Highest µs) at two significant digits
// (26 KB), which is enough to draw percentiles by.
func newSlotHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(hdr.Lowest, hdr.Highest, 2)
}

// add counts one request that ended at done in its class, and its latency
// when it got a response.
func (t *timeline) add(done time.Duration, lat int64, class int, response bool) {
	if t.interval <= 0 {
		return
	}
	if t.end > 0 && done >= t.end {
		done = t.end - 1
	}
	i := int(max(done, 0) / t.interval)
	for i >= maxSlots {
		t.coarsen()
		i = int(max(done, 0) / t.interval)
	}
	for len(t.slots) <= i {
		t.slots = append(t.slots, slot{hist: newSlotHist()})
	}
	s := &t.slots[i]
	s.counts[class]++
	if response {
		hdr.Record(s.hist, lat)
	}
}

// coarsen merges each pair of intervals into one twice as long.
func (t *timeline) coarsen() {
	merged := make([]slot, (len(t.slots)+1)/2)
	for i := range merged {
		merged[i] = t.slots[2*i]
		if j := 2*i + 1; j < len(t.slots) {
			for c := range merged[i].counts {
				merged[i].counts[c] += t.slots[j].counts[c]
			}
			merged[i].hist.Merge(t.slots[j].hist)
		}
	}
	t.slots = merged
	t.interval *= 2
}

// snapshot is what the live line shows: totals, and the last interval
// that has surely been handed over in full.
type snapshot struct {
	// done counts measured responses and errors; warm those of the warm-up.
	done, warm int64
	// last is the last whole interval: its responses by class and p99 (µs).
	last      [numClasses]int64
	lastP99   int64
	lastValid bool
	interval  time.Duration
}

// snapshot reads the tally for the live line, at elapsed since the
// measured run began.
func (t *tally) snapshot(elapsed time.Duration) snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{done: t.all.TotalCount() + t.failed.TotalCount(), warm: t.warmup, interval: t.timeline.interval}
	if t.timeline.interval > 0 {
		i := int((elapsed-batchAge)/t.timeline.interval) - 1
		if i >= 0 && i < len(t.timeline.slots) {
			sl := &t.timeline.slots[i]
			s.last, s.lastP99, s.lastValid = sl.counts, sl.hist.ValueAtPercentile(99), true
		}
	}
	return s
}
