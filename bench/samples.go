package bench

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// AuditSamples keeps, in a run's JSON, every response the audit judged, so
// that `report merge` can audit runs from several load machines as one: a
// limiter that leaks across machines is caught although each machine alone
// saw too little to tell.
type AuditSamples struct {
	// Encoding names the format of Data: "ratelab-samples-v1", a sequence
	// of unsigned varints per response, in consumer and send order:
	// consumer (delta), sent in µs since the measured run began (delta
	// within a consumer), flight in µs (received − sent, rounded up),
	// status, and Retry-After in ms, limit, remaining and reset in s, each
	// plus one (0: the field was absent).
	Encoding string `json:"encoding"`
	// Count is the number of responses in Data.
	Count int `json:"count"`
	// Data is the encoded responses, base64 (standard, padded).
	Data string `json:"data"`
}

const samplesEncoding = "ratelab-samples-v1"

// encodeSamples packs samples for JSON. Times are kept in whole µs, sent
// rounded down and received rounded up, so that a flight only ever grows:
// the audit stays sound on what it reads back.
func encodeSamples(samples []sample) *AuditSamples {
	ss := slices.Clone(samples)
	slices.SortFunc(ss, func(a, b sample) int {
		if a.consumer != b.consumer {
			return int(a.consumer - b.consumer)
		}
		return cmpDur(a.sent, b.sent)
	})
	buf := make([]byte, 0, len(ss)*10)
	var consumer int64
	var sent int64
	for _, s := range ss {
		c := int64(s.consumer)
		if c != consumer {
			sent = 0
		}
		buf = binary.AppendUvarint(buf, uint64(c-consumer))
		consumer = c
		us := s.sent.Microseconds()
		buf = binary.AppendUvarint(buf, uint64(us-sent))
		sent = us
		flight := (s.done - time.Duration(us)*time.Microsecond + time.Microsecond - 1) / time.Microsecond
		buf = binary.AppendUvarint(buf, uint64(max(flight, 0)))
		buf = binary.AppendUvarint(buf, uint64(s.status))
		buf = binary.AppendUvarint(buf, plusOne(s.retryAfter.Milliseconds(), s.retryAfter >= 0))
		buf = binary.AppendUvarint(buf, plusOne(s.limit, s.limit >= 0))
		buf = binary.AppendUvarint(buf, plusOne(s.remaining, s.remaining >= 0))
		buf = binary.AppendUvarint(buf, plusOne(int64(s.reset/time.Second), s.reset >= 0))
	}
	return &AuditSamples{Encoding: samplesEncoding, Count: len(ss), Data: base64.StdEncoding.EncodeToString(buf)}
}

func plusOne(v int64, present bool) uint64 {
	if !present {
		return 0
	}
	return uint64(v) + 1
}

func minusOne(v uint64) int64 { return int64(v) - 1 }

// Bounds of what decode reads: a sample's send time (either side of the
// run's start) and flight at most 30 days in µs (a run is a day at most), a
// Retry-After in ms that fits in a time.Duration, and a reset the audit
// reads (maxResetSeconds).
const (
	maxSampleMicros = int64(30 * 24 * time.Hour / time.Microsecond)
	maxMillis       = uint64(math.MaxInt64 / time.Millisecond)
)

// decode unpacks the samples, shifted by offset (the run's start less the
// earliest start of the runs merged).
func (a *AuditSamples) decode(offset time.Duration, consumers int) ([]sample, error) {
	if a.Encoding != samplesEncoding {
		return nil, fmt.Errorf("audit samples in %q, want %s", a.Encoding, samplesEncoding)
	}
	buf, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		return nil, fmt.Errorf("audit samples: %w", err)
	}
	if a.Count < 0 {
		return nil, fmt.Errorf("audit samples: count %d", a.Count)
	}
	// A response takes 8 bytes at least: what Data holds bounds what to
	// make room for, whatever Count says.
	out := make([]sample, 0, min(a.Count, len(buf)/8))
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
				return nil, err
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
			return nil, fmt.Errorf("audit samples: response %d of consumer %d is out of range %v", len(out)+1, consumer, f)
		}
		consumer += int64(f[0])
		sent += d
		s := sample{consumer: int32(consumer), status: int16(f[3]),
			sent:       time.Duration(sent)*time.Microsecond + offset,
			retryAfter: -1, limit: minusOne(f[5]), remaining: minusOne(f[6]), reset: -1}
		s.done = s.sent + time.Duration(f[2])*time.Microsecond
		if f[4] > 0 {
			s.retryAfter = time.Duration(minusOne(f[4])) * time.Millisecond
		}
		if f[7] > 0 {
			s.reset = time.Duration(minusOne(f[7])) * time.Second
		}
		out = append(out, s)
	}
	if len(out) != a.Count {
		return nil, fmt.Errorf("audit samples: %d decoded, %d announced", len(out), a.Count)
	}
	return out, nil
}
