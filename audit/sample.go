package audit

import (
	"cmp"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Sample is one request of a consumer, kept for the audit: a response, or
// a transport error (status 0). The engine makes it (NewSample) and keeps
// it in a Record, with what its answer advertised.
type Sample struct {
	// Consumer is the consumer that sent it (0 for the one anonymous
	// client), Status its status (a rate limit service's codes as HTTP's:
	// OK 200, OVER_LIMIT 429), Route the route of a mix (or the set of
	// descriptors) it was sent to.
	Consumer int32
	Status   int16
	Route    uint16
	// otherMayDeny, on a denial projected on one limit, says that another
	// limit the request met may have denied it: it would not surely have
	// admitted it, or what it counted is not known.
	otherMayDeny bool
	// judgement is what the audit made of a denial, projected on one
	// limit (see denialJudgement).
	judgement denialJudgement
	// adverts are the policies its response spoke of: advs[advAt:advAt+advN]
	// of the slice kept beside the samples; then come the violated
	// policies its 429's problem body named (violatedPolicies).
	advN       uint8
	violated   uint8
	advAt      uint32
	Sent, Done time.Duration // since the measured run began
	RetryAfter time.Duration // how long the answer said to wait; -1 when absent
	limit      int64         // advertised limit; -1 when absent
	remaining  int64         // advertised remaining; -1 when absent
	Reset      time.Duration // advertised time until the quota resets; -1 when absent
}

// OK says the request was admitted (2xx).
func (s Sample) OK() bool { return s.Status >= 200 && s.Status < 300 }

// Denied says the limit turned the request away (429).
func (s Sample) Denied() bool { return s.Status == http.StatusTooManyRequests }

// Answered says the request got a response.
func (s Sample) Answered() bool { return s.Status != 0 }

// MaxSamples bounds what the audit keeps.
const MaxSamples = 5_000_000

// maxWorstConsumers bounds LimitAudit.WorstConsumers.
const maxWorstConsumers = 10

// sharedNote says why a shard of shared consumers cannot judge alone what
// needs all of a consumer's responses.
const sharedNote = "other load machines send the same consumers (--shared-consumers): report merge judges this over all of them"

// NewSample is consumer's request, sent and answered (done) at those
// times since the measured run began, with status (0 for a transport
// error), advertising nothing: no Retry-After, limit, remaining or reset.
func NewSample(consumer int, sent, done time.Duration, status int) Sample {
	return Sample{Consumer: int32(consumer), Sent: sent, Done: done, Status: int16(status), RetryAfter: -1, limit: -1, remaining: -1, Reset: -1}
}

// read reads the Retry-After, limit, remaining and reset of a response's
// rate-limit fields into s.
func (s *Sample) read(f *Fields) {
	if f.retryAfter != "" {
		if n, err := strconv.ParseFloat(f.retryAfter, 64); err == nil && n >= 0 && n < 1e9 {
			s.RetryAfter = time.Duration(n * float64(time.Second))
		} else if t, err := http.ParseTime(f.retryAfter); err == nil {
			s.RetryAfter = max(time.Until(t), 0)
		}
	}
	if q, ok := sfParam(f.policy, "q"); ok {
		s.limit = q
	} else if n, err := strconv.ParseInt(cmp.Or(f.limit, f.xLimit), 10, 64); err == nil {
		s.limit = n
	}
	if r, ok := sfParam(f.rateLimit, "r"); ok {
		s.remaining = r
	} else if n, err := strconv.ParseInt(cmp.Or(f.remaining, f.xRemaining), 10, 64); err == nil {
		s.remaining = n
	}
	if t, ok := sfParam(f.rateLimit, "t"); ok {
		s.Reset = resetIn(t)
	} else if n, err := strconv.ParseInt(cmp.Or(f.reset, f.xReset), 10, 64); err == nil {
		if n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
			n -= time.Now().Unix()
		}
		s.Reset = resetIn(max(n, 0))
	}
}

// Record is what the engine keeps of a run for the audit: its samples,
// in the order kept, and the policies their answers spoke of. Only its
// own goroutine touches one; Append gathers several.
type Record struct {
	Samples []Sample
	// advs holds each sample's adverts: advs[s.advAt:s.advAt+s.advN], then
	// the policies its 429's problem body named as violated (s.violated).
	advs []advert
}

// Add keeps s, with no policy its answer advertised: a transport error,
// or a rate limit service's answer, whose statuses AddStatus then adds.
func (r *Record) Add(s Sample) {
	s.advAt, s.advN, s.violated = uint32(len(r.advs)), 0, 0
	r.Samples = append(r.Samples, s)
}

// AddResponse keeps s, an HTTP response, with what its rate-limit fields
// f advertised, and, when problem holds the body of a 429 that is a
// problem (RFC 9457), the policies it named as violated. names are the
// audit's limits by the names a response may give them (Names).
func (r *Record) AddResponse(s Sample, f *Fields, problem []byte, names map[string]int16) {
	s.read(f)
	at := len(r.advs)
	r.advs = parseAdverts(r.advs, f, names)
	s.advAt, s.advN = uint32(at), uint8(len(r.advs)-at)
	if problem != nil {
		at := len(r.advs)
		r.advs = violatedPolicies(r.advs, problem, f, names)
		s.violated = uint8(len(r.advs) - at)
	}
	r.Samples = append(r.Samples, s)
}

// AddStatus adds, to the sample kept last, what a rate limit service's
// answer said of its descriptor d (from 0, each once, in order): its
// quota per window (s), the remaining and the time to reset (s; negative
// when not given). Each value an int32 cannot hold is not given; the
// statuses of descriptors from maxAdverts on are dropped.
func (r *Record) AddStatus(d int, quota, windowSeconds, remaining, resetSeconds int64) {
	s := &r.Samples[len(r.Samples)-1]
	if d < 0 || d >= maxAdverts || s.violated > 0 {
		return
	}
	a := advert{name: int16(d), named: true, q: clamp32(quota), w: clamp32(windowSeconds), r: clamp32(remaining)}
	if resetSeconds >= 0 {
		a.t = clamp32(resetSeconds)
	}
	r.advs = append(r.advs, a)
	s.advN++
}

// clamp32 is v, given when an int32 holds it.
func clamp32(v int64) given {
	if v < 0 || v > math.MaxInt32 {
		return given{}
	}
	return givenAs(int32(v))
}

// Append appends o's samples, with their adverts, to r's.
func (r *Record) Append(o Record) {
	base := uint32(len(r.advs))
	r.advs = append(r.advs, o.advs...)
	for _, s := range o.Samples {
		s.advAt += base
		r.Samples = append(r.Samples, s)
	}
}

// Coverage is what the samples hold of the run (NewCoverage).
type Coverage struct {
	// from is when they begin to hold every request that can count
	// against a limit (0, or after the warm-up's last response).
	from time.Duration
	// horizon, when not negative, is when samples started to be dropped:
	// checks that need every request up to some time judge only what
	// ended before it.
	horizon time.Duration
	// partial says the samples are one machine's share of consumers that
	// others send too: every admission the run saw is real, so the
	// admission count stays sound, but the checks that need every request
	// of a consumer (remaining, under-admission) are not made.
	partial bool
	// skipUnder, when set, says why under-admission cannot be judged (the
	// samples are partial, or the run was interrupted and the requests in
	// flight then were never answered).
	skipUnder string
}

// NewCoverage is the coverage of a run's samples: they hold every request
// that can count against a limit from from on (0, or when the warm-up's
// last response came back), and stopped being kept at horizon (-1: never).
// partial says they are one load machine's share of consumers that others
// send too; interrupted that the run was cut short, leaving requests in
// flight unanswered.
func NewCoverage(from, horizon time.Duration, partial, interrupted bool) Coverage {
	cov := Coverage{from: from, horizon: horizon, partial: partial}
	switch {
	case partial:
		cov.skipUnder = sharedNote
	case interrupted:
		cov.skipUnder = "the run was interrupted: the requests in flight then were never answered"
	}
	return cov
}

// overall is the verdict of several limits: the worst of theirs, with the
// reasons of each limit that has it, named when there are several.
func overall(limits []LimitAudit) (Verdict, []string) {
	v := Held
	judged := 0
	for _, l := range limits {
		if l.Verdict == NotJudged {
			continue
		}
		judged++
		if rank(l.Verdict) < rank(v) {
			v = l.Verdict
		}
	}
	reasons := []string{}
	if judged == 0 && len(limits) > 0 {
		v = NoVerdict
		reasons = append(reasons, "no limit the audit could judge: each is shadow, unlimited or of cost 0")
	}
	for _, l := range limits {
		if l.Verdict != v {
			continue
		}
		for _, r := range l.Reasons {
			if len(limits) > 1 {
				r = l.Label() + ": " + r
			}
			reasons = append(reasons, r)
		}
	}
	return v, reasons
}

// rank orders the verdicts, the strongest first: a leak, then what could
// not be judged, then what was not tested, and held last.
func rank(v Verdict) int {
	switch v {
	case Leaked:
		return 0
	case NoVerdict:
		return 1
	case NotReached:
		return 2
	}
	return 3
}
